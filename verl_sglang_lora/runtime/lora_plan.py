"""How LoRA is served, decided once from the config.

verl keeps two LoRA blocks that are never synced: FSDP reads the flat ``model.lora_rank/lora_alpha/
target_modules``, Megatron reads ``model.lora.{rank,alpha,target_modules}``; both read ``model.lora.merge``.
Every decision that depends on "is the adapter hot-swapped into SGLang" (launch args, sleep level and memory
tags in ``runtime.memory``, ``lora_path`` on requests) derives from :func:`lora_plan` so they can never
disagree: two of them deciding separately is how the first step released one tag and resumed another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl_sglang_lora.verl_glue.config_access import cfg_get, to_plain


@dataclass(frozen=True)
class LoRAPlan:
    """The LoRA facts the rollout needs, normalized across the FSDP and Megatron config blocks."""

    rank: int
    alpha: float
    target_modules: Any
    merge: bool
    megatron_block: bool = False  # the settings came from model.lora.* (Megatron) rather than the flat FSDP keys
    lora_type: str = "lora"  # Megatron-Bridge's model.lora.type: lora, vlm_lora, canonical_lora, dora
    target_parameters: tuple[str, ...] = ()  # FSDP's model.target_parameters (PEFT LoRA on nn.Parameter)

    @property
    def expert_projections(self) -> list[str]:
        """The fused MoE expert weights the adapter trains (``gate_up_proj``, ``down_proj``), served as SGLang's
        expert LoRA (sglang_contract/expert_lora.py); empty for a dense adapter."""
        from verl_sglang_lora.sglang_contract.expert_lora import expert_projections

        return expert_projections(self.target_parameters)[0] if not self.megatron_block else []

    @property
    def alpha_setting(self) -> str:
        """The Hydra key the alpha was read from."""
        return "actor_rollout_ref.model.lora.alpha" if self.megatron_block else "actor_rollout_ref.model.lora_alpha"

    @property
    def target_modules_setting(self) -> str:
        """The Hydra key the target modules were read from."""
        return ("actor_rollout_ref.model.lora.target_modules" if self.megatron_block
                else "actor_rollout_ref.model.target_modules")

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @property
    def as_adapter(self) -> bool:
        """Adapter mode: SGLang keeps the base weights resident and receives only LoRA tensors."""
        return self.enabled and not self.merge


def lora_plan(model_config: Any) -> LoRAPlan:
    """Read the LoRA settings from whichever block carries them (``model.lora.*`` wins when set).

    An unset alpha (only possible in a hand-made dict: verl's configs default it) means the rank; an alpha of 0 or
    below is kept as given, for ``config_guards`` to refuse (it used to become the rank here while the adapter config
    sent 0)."""
    block = to_plain(cfg_get(model_config, "lora", {})) or {}
    flat_rank = int(cfg_get(model_config, "lora_rank", 0) or 0)
    block_rank = int(block.get("rank", 0) or 0)
    rank = max(flat_rank, block_rank)
    if block_rank > 0:
        alpha = block.get("alpha", cfg_get(model_config, "lora_alpha", rank))
        target = block.get("target_modules", cfg_get(model_config, "target_modules", "all-linear"))
    else:
        alpha = cfg_get(model_config, "lora_alpha", rank)
        target = cfg_get(model_config, "target_modules", "all-linear")
    return LoRAPlan(
        rank=rank,
        alpha=float(rank if alpha is None else alpha),
        target_modules=to_plain(target) if target is not None else "all-linear",
        merge=bool(block.get("merge", False)),
        megatron_block=block_rank > 0,
        lora_type=str(block.get("type") or "lora") if block_rank > 0 else "lora",
        target_parameters=tuple(str(p) for p in to_plain(cfg_get(model_config, "target_parameters", None)) or ()),
    )
