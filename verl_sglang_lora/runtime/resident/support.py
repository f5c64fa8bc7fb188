"""Whether the resident in-place path applies here, decided the same way by the server actor and the sync client
from the config and the installed SGLang (its declared fields, not a version table)."""

from __future__ import annotations

import logging
from typing import Any

from verl_sglang_lora.sglang_contract.installed import weight_update_session
from verl_sglang_lora.verl_glue.config_access import cfg_get

logger = logging.getLogger(__name__)

MODES = ("auto", "on", "off")
SETTING = "actor_rollout_ref.rollout.engine_kwargs.sglang_lora.resident"


def unsupported_reason(mode: str, sglang_ranks: int, base_unsafe: str | None = None) -> str | None:
    """None when the in-place path can run; otherwise why not (one line, for the log and the error)."""
    if mode == "off":
        return f"{SETTING}=off"
    if sglang_ranks != 1:
        return (f"the rollout server has {sglang_ranks} scheduler ranks (TP x DP); each rank needs its adapter source "
                "on its own GPU, which the weight-sync client (one process, one GPU) cannot hand over yet")
    try:
        from sglang.srt.server_args import ServerArgs

        from verl_sglang_lora.sglang_contract.installed import io_struct, struct_fields
    except Exception as exc:  # noqa: BLE001 - no SGLang: nothing can run anyway; say why
        return f"SGLang is not importable here ({type(exc).__name__}: {exc})"
    declared = getattr(ServerArgs, "__dataclass_fields__", None) or getattr(ServerArgs, "__struct_fields__", ())
    if "custom_weight_loader" not in declared:
        return "the installed SGLang's ServerArgs has no custom_weight_loader (the in-place writer's entry point)"
    if "pinned" not in struct_fields(io_struct("LoadLoRAAdapterFromTensorsReqInput")):
        return "the installed SGLang cannot pin an adapter loaded from tensors (the slots would be evictable)"
    if weight_update_session() and base_unsafe:
        # end_weight_update runs every quant method's process_weights_after_loading on the base weights: a repack
        # per sync at best, a second packing where a method cannot restore first (e.g. the MoE expert shuffle)
        return ("the installed SGLang wraps every tensor update in a weight-update session whose end re-processes "
                f"the base weights, and {base_unsafe}")
    return None


MOE_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
QUANT_KEYS = ("quantization", "torchao_config")


def session_unsafe_base(model_config: Any, rollout_config: Any) -> str | None:
    """Why the base weights must not go through a weight-update session per sync (None: a dense, unquantized base,
    whose session re-processes nothing). Read from the checkpoint's HF config and the rollout's SGLang arguments."""
    hf_config = getattr(model_config, "hf_config", None)
    if getattr(hf_config, "quantization_config", None) is not None:
        return "the checkpoint is quantized (quantization_config in its config.json)"
    sglang_kwargs = cfg_get(cfg_get(rollout_config, "engine_kwargs"), "sglang")
    for key in QUANT_KEYS:
        if cfg_get(rollout_config, key) or cfg_get(sglang_kwargs, key):
            return f"the rollout quantizes the base ({key})"
    for field in MOE_FIELDS:
        if (getattr(hf_config, field, 0) or 0) > 0:
            return f"the base is a mixture of experts ({field}={getattr(hf_config, field)}: its expert weights are re-packed)"
    return None


def resident_enabled(mode: str, sglang_ranks: int, base_unsafe: str | None = None) -> bool:
    """``on`` refuses to start where the path cannot run; ``auto`` says once why it takes the versioned loads."""
    if mode not in MODES:
        raise ValueError(f"{SETTING} must be one of {MODES}, got {mode!r}")
    reason = unsupported_reason(mode, sglang_ranks, base_unsafe)
    if reason is None:
        return True
    if mode == "on":
        raise ValueError(f"{SETTING}=on, but the in-place adapter sync cannot run here: {reason}. Fix: set it to auto "
                         "(versioned adapter loads) or off.")
    if mode == "auto":
        logger.warning("sglang_lora: resident in-place adapter sync not used (versioned adapter loads instead): %s", reason)
    return False


LINEAR_DIMS = {  # leaf -> (in, out) in terms of the HF config (q: heads x head_dim, kv: kv heads x head_dim)
    "q_proj": ("h", "q"), "k_proj": ("h", "kv"), "v_proj": ("h", "kv"), "o_proj": ("q", "h"),
    "gate_proj": ("h", "i"), "up_proj": ("h", "i"), "down_proj": ("i", "h"),
}


def mirror_bytes(hf_config: Any, rank: int, target_modules: Any) -> int | None:
    """The bytes of one slot's read-back mirror in SGLang's process: the adapter's flat buffer (A and B of every
    targeted dense projection of every layer). None where the config is not a dense decoder this can size."""
    from verl_sglang_lora.sglang_contract.target_modules import ALL_LINEAR_HF, hf_leaves

    get = lambda key: cfg_get(hf_config, key)  # noqa: E731 - a dict, or the checkpoint's HF config
    h, layers, heads = get("hidden_size"), get("num_hidden_layers"), get("num_attention_heads")
    if not (h and layers and heads):
        return None
    head_dim = get("head_dim") or h // heads
    dims = {"h": h, "q": heads * head_dim, "kv": (get("num_key_value_heads") or heads) * head_dim,
            "i": get("intermediate_size") or 0}
    leaves = hf_leaves(target_modules) or ALL_LINEAR_HF
    per_layer = sum(rank * (dims[a] + dims[b]) for leaf, (a, b) in LINEAR_DIMS.items() if leaf in leaves)
    return per_layer * layers * 2  # 2 bytes an element: the pool's 16-bit dtype
