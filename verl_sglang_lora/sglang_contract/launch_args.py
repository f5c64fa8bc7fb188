"""LoRA arguments for launching SGLang, rendered from verl's config.

SGLang runs ``set(lora_target_modules)``: a bare string is torn into characters and the server dies later
with ``get_hidden_dim not implemented for i`` (seed layer 1). So the value is always a list here, PEFT's
``all-linear`` becomes SGLang's own sentinel ``all`` (SGLang expands it per backend), and a regex string --
which PEFT matches against the whole module path and SGLang cannot serve -- is refused up front.
"""

from __future__ import annotations

from typing import Any, Iterable

from verl_sglang_lora.runtime.lora_plan import LoRAPlan

ALL_SENTINEL = "all"
PEFT_ALL_LINEAR = "all-linear"
TARGET_MODULES_SETTING = "actor_rollout_ref.model.target_modules (Megatron: actor_rollout_ref.model.lora.target_modules)"

# Megatron-core module names -> the HF projection names SGLang knows (facts of both code bases).
MEGATRON_TO_HF = {
    "linear_qkv": ("q_proj", "k_proj", "v_proj"),
    "linear_proj": ("o_proj",),
    "linear_fc1": ("gate_proj", "up_proj"),
    "linear_fc2": ("down_proj",),
}


class LoRAConfigError(ValueError):
    """A LoRA setting SGLang cannot serve; the message names the setting and the fix."""


def supported_target_modules() -> list[str] | None:
    """SGLang's own list of LoRA-capable module names, or None when SGLang is not importable here."""
    try:
        from sglang.srt.utils.common import SUPPORTED_LORA_TARGET_MODULES
    except Exception:  # a half-installed SGLang raises KeyError/AttributeError on re-import, not only ImportError
        return None
    return list(SUPPORTED_LORA_TARGET_MODULES)


def sglang_target_modules(target_modules: Any, supported: Iterable[str] | None = None) -> list[str]:
    """verl's ``target_modules`` as the list SGLang's ``--lora-target-modules`` expects."""
    if isinstance(target_modules, str):
        if target_modules in (PEFT_ALL_LINEAR, ALL_SENTINEL):
            return [ALL_SENTINEL]
        raise LoRAConfigError(
            f"{TARGET_MODULES_SETTING}={target_modules!r} is a string, which PEFT treats as a regex over the full "
            "module path; SGLang cannot serve a regex target. Fix: set it to `all-linear`, or to a list such as "
            "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]."
        )
    if target_modules is None:
        return [ALL_SENTINEL]
    try:
        names = list(target_modules)
    except TypeError:
        raise LoRAConfigError(f"{TARGET_MODULES_SETTING} must be `all-linear` or a list of module names, got {target_modules!r}")
    out: list[str] = []
    for name in names:
        if not isinstance(name, str):
            raise LoRAConfigError(f"{TARGET_MODULES_SETTING} entries must be strings, got {name!r}")
        leaf = name.rsplit(".", 1)[-1]  # PEFT matches the last path segment ("*.layers.0.*.linear_qkv" too)
        for mapped in MEGATRON_TO_HF.get(leaf, (leaf,)):
            if mapped not in out:
                out.append(mapped)
    if PEFT_ALL_LINEAR in out or ALL_SENTINEL in out:
        if len(out) > 1:
            raise LoRAConfigError(f"{TARGET_MODULES_SETTING}: `all-linear` must be the only entry, got {names}")
        return [ALL_SENTINEL]
    supported = list(supported) if supported is not None else supported_target_modules()
    if supported is not None:
        unknown = [n for n in out if n not in supported]
        if unknown:
            raise LoRAConfigError(
                f"{TARGET_MODULES_SETTING} has {unknown}, which the installed SGLang cannot serve as LoRA targets "
                f"(it supports {sorted(supported)}). Fix: drop them or use `all-linear`."
            )
    return out


def lora_launch_args(plan: LoRAPlan, max_lora_rank: int | None = None) -> dict[str, Any]:
    """ServerArgs fields for adapter mode; empty in merge mode or without LoRA (SGLang then serves plain weights)."""
    if not plan.as_adapter:
        return {}
    rank = int(max_lora_rank or plan.rank)
    if rank < plan.rank:
        raise LoRAConfigError(
            f"max_lora_rank={rank} is below the LoRA rank {plan.rank}; SGLang would reject every adapter load as "
            "'incompatible with the current LoRA memory pool configuration'. Fix: raise "
            "actor_rollout_ref.rollout.engine_kwargs.sglang_lora.max_lora_rank or drop it."
        )
    return {
        "enable_lora": True,
        "max_lora_rank": rank,
        "lora_target_modules": sglang_target_modules(plan.target_modules),
        # One adapter version serves while the next one loads; versions are swapped atomically.
        "max_loras_per_batch": 2,
    }
