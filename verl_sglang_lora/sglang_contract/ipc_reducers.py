"""Make a fresh SGLang scheduler able to receive CUDA tensors from a patched producer.

SGLang patches torch's CUDA-IPC reducers on both ends (``sglang.srt.utils.patch_torch``): the producer
sends the device's UUID instead of its index, and the pickle names SGLang's ``_rebuild_cuda_tensor_modified``,
which calls ``reductions._rebuild_cuda_tensor_original`` -- an attribute only the patch creates. Up to 0.5.12
the scheduler patches itself in ``update_weights_from_tensor`` but not in ``load_lora_adapter_from_tensors``,
so a server whose first tensor request is an adapter load dies with ``AttributeError: module
'torch.multiprocessing.reductions' has no attribute '_rebuild_cuda_tensor_original'`` (e.g. after
a restart: the relaunched server reads its base weights from the checkpoint, so no base sync patches it first).

The fix is SGLang's own patch path: one ``update_weights_from_tensor`` with no tensors right after launch.
"""

from __future__ import annotations

from typing import Any

from verl_sglang_lora.sglang_contract.installed import io_struct, struct_fields, weight_update_session

REQUEST_CLASS = "UpdateWeightsFromTensorReqInput"


def empty_tensor_update(tp_size: int, cls: type | None = None) -> Any:
    """An installed ``UpdateWeightsFromTensorReqInput`` carrying no tensors (one empty payload per TP rank)."""
    from sglang.srt.utils import MultiprocessingSerializer

    if tp_size < 1:
        raise ValueError(f"tp_size must be >= 1, got {tp_size}")
    cls = cls or io_struct(REQUEST_CLASS)
    fields = struct_fields(cls)
    if "serialized_named_tensors" not in fields:
        raise TypeError(f"{cls.__name__} lacks 'serialized_named_tensors' (fields: {sorted(fields)})")
    kwargs: dict[str, Any] = {"serialized_named_tensors": [MultiprocessingSerializer.serialize([]) for _ in range(tp_size)]}
    if "flush_cache" in fields:
        kwargs["flush_cache"] = False  # nothing was computed with weights that change here
    return cls(**kwargs)


def needs_priming() -> bool:
    """False where the installed SGLang runs tensor updates only inside a weight-update session (0.5.23+): there an
    update outside one is refused, and its adapter load applies the torch patch itself (docs/compatibility.md)."""
    return not weight_update_session()


async def prime_scheduler_reducers(tokenizer_manager: Any, tp_size: int) -> None:
    """Send the empty update through the server's own tokenizer manager; a refusal is an error with its message."""
    if not needs_priming():
        return
    # every supported release's TokenizerManager.update_weights_from_tensor returns (success, message)
    success, message = await tokenizer_manager.update_weights_from_tensor(empty_tensor_update(tp_size), None)
    if not success:
        raise RuntimeError(
            "sglang_lora: SGLang refused the empty update_weights_from_tensor that prepares its scheduler for "
            f"CUDA-IPC adapter loads: {message}"
        )
