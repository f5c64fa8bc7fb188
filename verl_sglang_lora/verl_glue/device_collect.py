"""Keep the adapter on the device between verl's FSDP collect and the sync client (touchpoint C: the LoRA export).

verl's ``collect_lora_params`` copies every LoRA tensor to the host (``.full_tensor().detach().cpu()``) and the
client copies it back to the device for CUDA-IPC: two PCIe crossings per tensor per sync, for data that SGLang
reads on the same GPU. For the common case -- FSDP2, adapter sync after the base sync, no layered summon -- the
wrapper returns the same tensors without the host copy (all-gathered with ``full_tensor()`` where sharded); every
other case is verl's own function, unchanged. Installed only in processes that build the sglang_lora client.
"""

from __future__ import annotations

import inspect
import logging
import sys
from collections import OrderedDict
from typing import Any, Callable

logger = logging.getLogger(__name__)

FSDP_UTILS = "verl.utils.fsdp_utils"
BOUND_IN = ("verl.workers.engine.fsdp.transformer_impl",)
EXPECTED_PARAMS = ("module", "layered_summon", "base_sync_done")
_WRAPPED = "__sglang_lora_device_collect__"


def device_lora_params(module: Any) -> "OrderedDict[str, Any]":
    """The PEFT adapter state dict of an FSDP2 module, full tensors left where the parameters live."""
    from peft.utils.save_and_load import get_peft_model_state_dict

    peft_model = getattr(module, "_fsdp_wrapped_module", module)
    state = get_peft_model_state_dict(peft_model)
    return OrderedDict((name, p.full_tensor().detach() if hasattr(p, "full_tensor") else p.detach())
                       for name, p in state.items())


def wrap_collect(original: Callable[..., Any], fsdp_version: Callable[[Any], int]) -> Callable[..., Any]:
    if getattr(original, _WRAPPED, False):
        return original

    def collect_lora_params(module: Any, layered_summon: bool, base_sync_done: bool) -> Any:
        if base_sync_done and not layered_summon and fsdp_version(module) == 2:
            return device_lora_params(module)
        return original(module=module, layered_summon=layered_summon, base_sync_done=base_sync_done)

    setattr(collect_lora_params, _WRAPPED, True)
    collect_lora_params.__wrapped__ = original  # type: ignore[attr-defined]
    return collect_lora_params


def install() -> bool:
    """Wrap verl's collect where its signature is the one this wrapper was written against; loud otherwise."""
    try:
        import importlib

        utils = importlib.import_module(FSDP_UTILS)
        original = utils.collect_lora_params
    except Exception as exc:  # noqa: BLE001 - no FSDP stack in this process: nothing to do
        logger.info("sglang_lora: verl's FSDP collect not importable here (%s); adapter stays on verl's path", exc)
        return False
    params = tuple(inspect.signature(getattr(original, "__wrapped__", original)).parameters)
    if params != EXPECTED_PARAMS:
        logger.warning("sglang_lora: verl's collect_lora_params%s is not the signature %s; the adapter takes verl's "
                       "host round trip", params, EXPECTED_PARAMS)
        return False
    wrapped = wrap_collect(original, utils.fsdp_version)
    utils.collect_lora_params = wrapped
    for name in BOUND_IN:
        bound = sys.modules.get(name)
        if bound is None:
            try:
                bound = importlib.import_module(name)
            except Exception:  # noqa: BLE001 - this verl has no such engine module
                continue
        if getattr(bound, "collect_lora_params", None) is original:
            bound.collect_lora_params = wrapped
    return True
