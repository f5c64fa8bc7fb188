"""Whether the resident in-place path applies here, decided the same way by the server actor and the sync client
from the config and the installed SGLang (its declared fields, not a version table)."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

MODES = ("auto", "on", "off")
SETTING = "actor_rollout_ref.rollout.engine_kwargs.sglang_lora.resident"


def unsupported_reason(mode: str, sglang_ranks: int) -> str | None:
    """None when the in-place path can run; otherwise why not (one line, for the log and the error)."""
    if mode == "off":
        return f"{SETTING}=off"
    if sglang_ranks != 1:
        return (f"the rollout server has {sglang_ranks} scheduler ranks (TP x DP); each rank needs its adapter source "
                "on its own GPU, which the weight-sync client (one process, one GPU) cannot hand over yet")
    try:
        from sglang.srt.server_args import ServerArgs

        from verl_sglang_lora.sglang_contract.installed import io_struct
    except Exception as exc:  # noqa: BLE001 - no SGLang: nothing can run anyway; say why
        return f"SGLang is not importable here ({type(exc).__name__}: {exc})"
    declared = getattr(ServerArgs, "__dataclass_fields__", None) or getattr(ServerArgs, "__struct_fields__", ())
    if "custom_weight_loader" not in declared:
        return "the installed SGLang's ServerArgs has no custom_weight_loader (the in-place writer's entry point)"
    from verl_sglang_lora.sglang_contract.installed import struct_fields

    if "pinned" not in struct_fields(io_struct("LoadLoRAAdapterFromTensorsReqInput")):
        return "the installed SGLang cannot pin an adapter loaded from tensors (the slots would be evictable)"
    try:
        io_struct("BeginWeightUpdateReqInput")
    except (AttributeError, ImportError):
        return None
    return ("the installed SGLang requires a weight-update session (begin/end_weight_update) around every tensor "
            "update, whose end re-processes the base weights; the in-place path does not open one yet")


def resident_enabled(mode: str, sglang_ranks: int) -> bool:
    """``on`` refuses to start where the path cannot run; ``auto`` says once why it takes the versioned loads."""
    if mode not in MODES:
        raise ValueError(f"{SETTING} must be one of {MODES}, got {mode!r}")
    reason = unsupported_reason(mode, sglang_ranks)
    if reason is None:
        return True
    if mode == "on":
        raise ValueError(f"{SETTING}=on, but the in-place adapter sync cannot run here: {reason}. Fix: set it to auto "
                         "(versioned adapter loads) or off.")
    if mode == "auto":
        logger.warning("sglang_lora: resident in-place adapter sync not used (versioned adapter loads instead): %s", reason)
    return False
