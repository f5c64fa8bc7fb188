"""Apply the LoRA contract to the arguments verl passes to SGLang's ``ServerArgs``.

verl builds the ServerArgs dict inside its own ``launch_server`` (different code in every release); the
plugin wraps the ``ServerArgs`` constructor that code calls, so the LoRA keys are always the plugin's, checked
against the fields the installed SGLang declares, whatever verl put there.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

from verl_sglang_lora.sglang_contract.lora_backends import chosen_backend

logger = logging.getLogger(__name__)

LORA_KEYS = ("enable_lora", "max_lora_rank", "lora_target_modules", "max_loras_per_batch")
USER_WINS = ("lora_backend",)
LOADERS_KEY = "custom_weight_loader"  # merged, not replaced: a user's own loaders stay allowed
# verl's default rollout.load_format: SGLang starts on random weights that the trainer's first sync overwrites
DUMMY_LOAD_FORMAT = "dummy"


def apply_lora_args(args: dict[str, Any], lora_args: dict[str, Any], declared: set[str]) -> dict[str, Any]:
    """``args`` with the LoRA keys replaced by ``lora_args`` (adapter mode) or removed (merge / no LoRA)."""
    out = {k: v for k, v in args.items() if k not in LORA_KEYS}
    missing = [k for k in lora_args if k not in declared]
    if missing:
        raise TypeError(f"the installed SGLang ServerArgs does not declare {missing}; LoRA adapters cannot be served")
    # the plugin's kernel backend is a default: one named in engine_kwargs.sglang (or a topology override) stays;
    # the default itself is fitted to the final arguments (lora_backends.launch_backend)
    out.update({k: v for k, v in lora_args.items() if k not in (LOADERS_KEY, *USER_WINS)})
    if backend := chosen_backend(lora_args.get("lora_backend"), out):
        out["lora_backend"] = backend
    if LOADERS_KEY in lora_args:
        out[LOADERS_KEY] = [*(args.get(LOADERS_KEY) or []), *[p for p in lora_args[LOADERS_KEY]
                                                               if p not in (args.get(LOADERS_KEY) or [])]]
    return out


def apply_overrides(args: dict[str, Any], overrides: dict[str, Any], declared: set[str]) -> dict[str, Any]:
    """``args`` with a topology group's ``overrides`` on top: the highest precedence over verl's own arguments and
    ``engine_kwargs.sglang`` (slime's rule). The LoRA keys stay the plugin's: the topology schema refuses them on the
    actor, and this refuses them again rather than let one slip past the LoRA contract."""
    unknown = sorted(k for k in overrides if k not in declared)
    if unknown:
        raise TypeError(f"topology overrides {unknown} are not fields of the installed SGLang ServerArgs")
    lora = sorted(k for k in overrides if k in (*LORA_KEYS, LOADERS_KEY))
    if lora:
        raise ValueError(f"topology overrides {lora} would replace the plugin's LoRA launch arguments; the topology "
                         "schema refuses them on the actor (docs/topology.md)")
    return {**args, **overrides}


def checkpoint_weights(args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with verl's ``load_format=dummy`` replaced by ``auto``: SGLang reads the checkpoint's weights.

    Why, for a relaunch after a crash: a restarted server never gets the trainer's one-time base-weight sync
    again (adapter mode sends the base once), so under ``dummy`` it would serve random base weights; and
    SGLang refuses disk adapter loads under ``dummy`` ("DUMMY load_format should use DummyModelLoader and not
    call _prepare_weights"), which is how the snapshot is loaded back.
    """
    if args.get("load_format") != DUMMY_LOAD_FORMAT:
        return args
    logger.warning("sglang_lora: relaunching SGLang on the checkpoint's weights (load_format dummy -> auto): %s",
                   args.get("model_path"))
    return {**args, "load_format": "auto"}


def reserve_memory(args: dict[str, Any], reserve_bytes: int, total_bytes: int) -> dict[str, Any]:
    """``args`` with ``mem_fraction_static`` lowered by ``reserve_bytes`` of the GPU's ``total_bytes``: memory the
    plugin allocates in SGLang's process after SGLang sized its KV cache (the resident slots' read-back mirrors)."""
    fraction = args.get("mem_fraction_static")
    if not reserve_bytes or not fraction:
        return args
    if not total_bytes:
        logger.warning("sglang_lora: the GPU's total memory is unknown here (neither nvidia-smi nor SGLang's CUDA "
                       "fallback gave one): mem_fraction_static stays %s, and the resident slots' %.1f MiB of "
                       "read-back mirrors come on top of it", fraction, reserve_bytes / 2**20)
        return args
    lowered = round(float(fraction) - reserve_bytes / total_bytes, 4)
    logger.warning("sglang_lora: mem_fraction_static %s -> %s: %.1f MiB kept free for the resident slots' read-back "
                   "mirrors", fraction, lowered, reserve_bytes / 2**20)
    return {**args, "mem_fraction_static": lowered}


def wrap_server_args(
    original: type, lora_args: dict[str, Any], from_checkpoint: bool = False,
    overrides: dict[str, Any] | None = None, reserve_bytes: int = 0,
) -> Callable[..., Any]:
    """A drop-in for ``ServerArgs`` (``dataclasses.fields()`` still works on it) that applies, in this order, the
    topology group's ``overrides`` (:func:`apply_overrides`), with ``from_checkpoint`` :func:`checkpoint_weights`
    (a relaunch must read the checkpoint whatever ``load_format`` said), ``lora_args``, and ``reserve_bytes`` taken
    off ``mem_fraction_static`` (:func:`reserve_memory`)."""
    # a dataclass up to SGLang 0.5.18, a msgspec struct from 0.5.23 on
    declared = set(getattr(original, "__dataclass_fields__", None) or getattr(original, "__struct_fields__", ()))

    def make(**args: Any) -> Any:
        merged = apply_overrides(args, overrides, declared) if overrides else args
        final = apply_lora_args(checkpoint_weights(merged) if from_checkpoint else merged, lora_args, declared)
        if reserve_bytes:
            final = reserve_memory(final, reserve_bytes, _gpu_total_bytes())
        if overrides:
            logger.warning("sglang_lora: launching SGLang with topology overrides %s (verl had %s)",
                           {k: final.get(k) for k in overrides}, {k: args.get(k) for k in overrides if k in args})
        logger.warning(
            "sglang_lora: launching SGLang with %s",
            {k: final.get(k) for k in (*LORA_KEYS, *USER_WINS, LOADERS_KEY) if k in final}
            if final.get("enable_lora") else "LoRA disabled (merge mode or no LoRA)",
        )
        return original(**final)

    for attr in ("__dataclass_fields__", "__struct_fields__"):  # what callers introspect stays visible
        if hasattr(original, attr):
            setattr(make, attr, getattr(original, attr))
    if not hasattr(original, "__dataclass_fields__"):
        # verl 0.9.1's launch_server asks `dataclasses.fields(ServerArgs)` for a field name, which raises TypeError
        # on 0.5.23's msgspec struct (its stock path dies there): the drop-in answers with the struct's field names.
        make.__dataclass_fields__ = dataclasses.make_dataclass(  # type: ignore[attr-defined]
            "ServerArgsFields", [(name, Any, dataclasses.field(default=None)) for name in sorted(declared)]
        ).__dataclass_fields__
    make.__wrapped__ = original  # type: ignore[attr-defined]
    return make


def _gpu_total_bytes() -> int:
    """The GPU's total memory as SGLang reads it for its own defaults (``sglang.srt.utils.get_nvgpu_memory_capacity``:
    the smallest ``memory.total`` nvidia-smi lists, in MiB). Not ``torch.cuda.mem_get_info`` first: that creates a
    CUDA context in this server actor, hundreds of MiB of GPU memory held for its life outside SGLang's fraction, in a
    process that otherwise never touches the GPU. Where nvidia-smi gives no size (MIG, no nvidia-smi) SGLang falls
    back to ``mem_get_info`` itself (0.5.12 on), as its own ServerArgs then does. 0 where nothing answers."""
    try:
        from sglang.srt.utils import get_nvgpu_memory_capacity

        return int(get_nvgpu_memory_capacity() * 2**20)
    except Exception:  # noqa: BLE001 - no GPU visible here: reserve_memory says the fraction stands
        return 0


def running_server_args(tokenizer_manager: Any, keys: list[str]) -> dict[str, Any]:
    """``keys`` of the ServerArgs a launched SGLang runs with (its tokenizer manager's own copy): verl 0.9.1's
    in-process server answers ``/server_info`` with HTTP 500 (``'PortArgs' object is not a mapping``), so a replica's
    real arguments are read here instead."""
    args = getattr(tokenizer_manager, "server_args", None)
    if args is None:
        raise RuntimeError("sglang_lora: this replica's SGLang is not launched (no tokenizer manager yet)")
    missing = [k for k in keys if not hasattr(args, k)]
    if missing:
        raise KeyError(f"not fields of the installed SGLang's ServerArgs: {missing}")
    return {k: getattr(args, k) for k in keys}
