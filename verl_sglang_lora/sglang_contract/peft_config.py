"""The adapter config sent with every LoRA load, from either producer.

FSDP hands over ``LoraConfig.to_dict()``: enums for ``peft_type``/``task_type`` and a *set* of target modules
(not JSON-serializable). verl's Megatron builder hands over a plain dict whose ``target_modules`` is the string
``"all-linear"`` and which, before verl 0.9.1, has no ``peft_type``. A blanket ``list()`` tears that string
into characters and SGLang rejects the adapter (seed layer 7); ``dataclasses.asdict`` on the dict crashes
(seed layer 2). This module accepts dicts (and LoraConfig objects), keeps a string a string, turns sets and
lists into sorted lists, and guarantees ``peft_type``, ``r`` and ``lora_alpha``.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

from verl_sglang_lora.verl_glue.config_access import to_plain
from verl_sglang_lora.sglang_contract.target_modules import LoRAConfigError, adapter_target_modules


def _plain_value(value: Any) -> Any:
    value = getattr(value, "value", value)  # enum -> its string
    if isinstance(value, (set, frozenset)):
        return sorted(_plain_value(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_plain_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain_value(v) for k, v in value.items()}
    return value


def normalize_peft_config(
    peft_config: Any,
    *,
    rank: int | None = None,
    alpha: float | None = None,
    modules: Iterable[str] | None = None,
) -> dict[str, Any]:
    """A JSON-ready adapter config SGLang's loader accepts; ``rank``/``alpha`` fill in what a producer left out.

    ``modules`` (the module names the adapter's tensors carry) replaces ``all-linear`` on SGLang releases that
    cannot read the string; without it, PEFT's all-linear set for decoder LMs is used.
    """
    if peft_config is None:
        raise LoRAConfigError("no adapter config was handed to the LoRA sync (peft_config=None) in adapter mode")
    if hasattr(peft_config, "to_dict") and not isinstance(peft_config, Mapping):
        peft_config = peft_config.to_dict()  # a peft LoraConfig object
    peft_config = to_plain(peft_config)
    if not isinstance(peft_config, Mapping):
        raise LoRAConfigError(f"adapter config must be a dict or peft LoraConfig, got {type(peft_config).__name__}")
    out = {str(k): _plain_value(v) for k, v in peft_config.items()}

    out["peft_type"] = str(out.get("peft_type") or "LORA").upper()
    if out["peft_type"] != "LORA":
        raise LoRAConfigError(f"adapter peft_type={out['peft_type']!r}; SGLang serves only LORA adapters")
    r = out.get("r", out.get("rank", rank))
    if not r or int(r) <= 0:
        raise LoRAConfigError(
            "adapter config has no positive rank `r`; set actor_rollout_ref.model.lora_rank (FSDP) or "
            "actor_rollout_ref.model.lora.rank (Megatron)"
        )
    out["r"] = int(r)
    out.pop("rank", None)
    out["lora_alpha"] = out.get("lora_alpha", out.pop("alpha", alpha if alpha is not None else out["r"]))

    out["target_modules"] = adapter_target_modules(out.get("target_modules"), modules)
    try:
        json.dumps(out)
    except TypeError as exc:
        raise LoRAConfigError(f"adapter config is not JSON-serializable after normalization: {exc}") from exc
    return out
