"""LoRA arguments for launching SGLang, rendered from verl's config (target modules: ``target_modules``)."""

from __future__ import annotations

from typing import Any, Iterable

from verl_sglang_lora.runtime.lora_plan import LoRAPlan
from verl_sglang_lora.runtime.resident import LOADER_PATH
from verl_sglang_lora.sglang_contract.target_modules import LoRAConfigError, sglang_target_modules


def _fields() -> frozenset[str]:
    try:
        from verl_sglang_lora.sglang_contract.installed import server_args_fields

        return server_args_fields()
    except ImportError:  # no SGLang here: nothing to launch
        return frozenset()


def lora_launch_args(plan: LoRAPlan, max_lora_rank: int | None = None, resident: bool = False,
                     lora_backend: str | None = None) -> dict[str, Any]:
    """ServerArgs fields for adapter mode; empty in merge mode or without LoRA (SGLang then serves plain weights).

    ``lora_backend``: the kernel backend to launch with (``lora_backends.plugin_lora_backend()`` where SGLang runs);
    None leaves SGLang's own default."""
    if not plan.as_adapter:
        return {}
    rank = int(max_lora_rank or plan.rank)
    if rank < plan.rank:
        raise LoRAConfigError(
            f"max_lora_rank={rank} is below the LoRA rank {plan.rank}; SGLang would reject every adapter load as "
            "'incompatible with the current LoRA memory pool configuration'. Fix: raise "
            "actor_rollout_ref.rollout.engine_kwargs.sglang_lora.max_lora_rank or drop it."
        )
    targets = sglang_target_modules(plan.target_modules)
    experts = [p for p in plan.expert_projections if p not in targets]
    return {
        "enable_lora": True,
        "max_lora_rank": rank,
        # fused-expert LoRA (target_parameters) adds SGLang's MoE modules of the same names
        "lora_target_modules": targets + experts,
        # one A and B per expert, as PEFT trains them (not SGLang's shared-outer format)
        **({"experts_shared_outer_loras": False}
           if plan.expert_projections and "experts_shared_outer_loras" in _fields() else {}),
        # One adapter version serves while the next one loads; versions are swapped atomically. The resident path
        # pins two slots, and SGLang allows at most max_loras_per_batch - 1 pinned adapters.
        "max_loras_per_batch": 3 if resident else 2,
        **({"custom_weight_loader": [LOADER_PATH]} if resident else {}),
        # a default: engine_kwargs.sglang.lora_backend wins where set (verl_glue/server_args.py)
        **({"lora_backend": lora_backend} if lora_backend else {}),
    }
