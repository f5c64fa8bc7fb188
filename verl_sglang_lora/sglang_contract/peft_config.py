"""The adapter config sent with every LoRA load, from either producer.

FSDP hands over ``LoraConfig.to_dict()``: enums for ``peft_type``/``task_type`` and a *set* of target modules
(not JSON-serializable). verl's Megatron builder hands over a plain dict whose ``target_modules`` is the string
``"all-linear"`` and which, before verl 0.9.1, has no ``peft_type``. A blanket ``list()`` tears that string
into characters and SGLang rejects the adapter (seed layer 7); ``dataclasses.asdict`` on the dict crashes
(seed layer 2). This module accepts dicts (and LoraConfig objects), keeps a string a string, turns sets and
lists into sorted lists, and guarantees ``peft_type``, ``r`` and ``lora_alpha``.

It also decides what the served adapter is, against what the trainer trains:
- rsLoRA (``use_rslora=True``, peft scales by ``lora_alpha / sqrt(r)``) is *served*: SGLang (every release from 0.5.8
  to 0.5.23) scales by ``lora_alpha / r`` from the config dict and ignores ``use_rslora``, so the served config
  carries ``lora_alpha * sqrt(r)`` and ``use_rslora=False``. The canary's expected scaling is computed from the same
  dict (``lora_alpha / r``), so it follows. Normalizing twice (restart recovery) changes nothing.
- what SGLang cannot serve as an adapter is refused (:func:`adapter_config_problems`): DoRA, ``modules_to_save``,
  trained biases, per-module rank/alpha patterns, LoRA on parameters (``target_parameters``) other than the fused MoE
  expert weights (served as SGLang's expert LoRA, ``expert_lora.py``), trainable tokens,
  ``lora_alpha <= 0``, embedding / output-head targets and an empty target list. With verl 0.9.1 these reach the
  FSDP trainer only through ``actor_rollout_ref.model.lora_adapter_path`` (its ``adapter_config.json``: verl builds
  a fresh ``LoraConfig`` from ``lora_rank``/``lora_alpha``/``target_modules``/``target_parameters``/
  ``exclude_modules`` with ``bias="none"`` only), which ``verl_glue.config_guards`` reads before any GPU is taken.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Mapping

from verl_sglang_lora.verl_glue.config_access import to_plain
from verl_sglang_lora.sglang_contract.expert_lora import expert_projections
from verl_sglang_lora.sglang_contract.target_modules import (
    LoRAConfigError,
    adapter_target_modules,
    adapter_target_problems,
)

ALPHA_SETTING = "actor_rollout_ref.model.lora_alpha (Megatron: actor_rollout_ref.model.lora.alpha)"
ADAPTER_PATH_SETTING = "actor_rollout_ref.model.lora_adapter_path"
MERGE_FIX = "actor_rollout_ref.model.lora.merge=True (verl merges it into the weights it sends)"


def _plain_value(value: Any) -> Any:
    value = getattr(value, "value", value)  # enum -> its string
    if isinstance(value, (set, frozenset)):
        return sorted(_plain_value(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_plain_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain_value(v) for k, v in value.items()}
    return value


def _truthy(value: Any) -> bool:
    return bool(value) and value not in ("false", "False", "0")


def served_lora_alpha(config: Mapping[str, Any]) -> float:
    """The ``lora_alpha`` that makes SGLang's ``lora_alpha / r`` equal the trainer's scaling.

    peft: ``lora_alpha / sqrt(r)`` with ``use_rslora``, else ``lora_alpha / r``."""
    alpha, r = float(config["lora_alpha"]), int(config["r"])
    return alpha * math.sqrt(r) if _truthy(config.get("use_rslora")) else alpha


def adapter_config_problems(config: Mapping[str, Any], where: str, *, as_adapter: bool = True) -> list[str]:
    """What the served policy could not match in an adapter config (peft ``LoraConfig`` fields), each naming
    ``where`` the setting lives and the fix. ``as_adapter=False`` (merge mode) keeps only what verl's merged sync
    cannot carry either."""
    problems: list[str] = []
    alpha = config.get("lora_alpha", config.get("alpha"))
    if alpha is not None and float(alpha) <= 0:
        problems.append(
            f"{where}: lora_alpha={alpha} ({ALPHA_SETTING}): the LoRA scaling lora_alpha/r is then "
            f"{'zero (the adapter trains and changes nothing)' if float(alpha) == 0 else 'negative'}. "
            "Fix: set lora_alpha > 0 (commonly the rank or twice the rank)."
        )
    modules_to_save = config.get("modules_to_save")
    if modules_to_save:
        problems.append(
            f"{where}: modules_to_save={_plain_value(modules_to_save)}: these modules are trained in full next to "
            "the adapter. SGLang has no modules_to_save, and verl 0.9.1's merged sync (lora.merge=True, verl's only "
            "switch between adapter and merged weights) sends them as '<module>.modules_to_save.default.weight' / "
            "'<module>.original_module.weight', which the served model does not have. Fix: save the adapter "
            "without modules_to_save, or merge it into the checkpoint offline (peft merge_and_unload), point "
            f"actor_rollout_ref.model.path at the merged model and unset {ADAPTER_PATH_SETTING}."
        )
    if config.get("trainable_token_indices"):
        problems.append(
            f"{where}: trainable_token_indices is set: the trained embedding rows (peft's trainable_tokens_delta) "
            "are no lora_A/lora_B pair the adapter sync carries, and verl 0.9.1's merge folds in LoRA layers only, so "
            "no mode serves them. Fix: save the adapter without trainable tokens."
        )
    if _truthy(config.get("lora_bias")):
        problems.append(
            f"{where}: lora_bias=True: lora_B has a bias, which SGLang's LoRA does not apply, and peft cannot merge it "
            "into a base layer without a bias (\"Impossible to merge LoRA with `lora_bias=True`\", e.g. Qwen3's "
            "projections). Fix: save the adapter with lora_bias=False."
        )
    if not as_adapter:
        return problems
    if _truthy(config.get("use_dora")):
        problems.append(
            f"{where}: use_dora=True: SGLang serves no DoRA adapter (its LoRAManager refuses use_dora) and the "
            f"adapter sync carries no magnitude vectors. Fix: {MERGE_FIX}, or an adapter without use_dora."
        )
    bias = config.get("bias", "none")
    if bias not in (None, "none"):
        problems.append(
            f"{where}: bias={bias!r}: base-layer biases are trained, but the adapter sync carries only lora_A/lora_B "
            f"and SGLang's LoRA has no bias. Fix: bias='none', or {MERGE_FIX}."
        )
    r = config.get("r", config.get("rank"))
    for key, base in (("rank_pattern", r), ("alpha_pattern", alpha)):
        pattern = config.get(key) or {}
        odd = {k: v for k, v in dict(pattern).items() if base is None or float(v) != float(base)}
        if odd:
            problems.append(
                f"{where}: {key}={odd}: per-module ranks/alphas, but SGLang applies one scaling lora_alpha/r and one "
                f"rank per adapter. Fix: drop {key}, or {MERGE_FIX}."
            )
    _, other = expert_projections(_plain_value(config.get("target_parameters") or []))
    if other:
        problems.append(
            f"{where}: target_parameters={other}: LoRA on an nn.Parameter that is not a fused MoE expert weight "
            "(mlp.experts.gate_up_proj / mlp.experts.down_proj, which are served as SGLang's expert LoRA) has no "
            "SGLang adapter form. Fix: drop those entries from actor_rollout_ref.model.target_parameters and target "
            "linear modules instead."
        )
    problems += adapter_target_problems(config.get("target_modules"), f"{where}: target_modules")
    return problems


def _plain_config(peft_config: Any) -> Mapping[str, Any]:
    if hasattr(peft_config, "to_dict") and not isinstance(peft_config, Mapping):
        peft_config = peft_config.to_dict()  # a peft LoraConfig object
    peft_config = to_plain(peft_config)
    if not isinstance(peft_config, Mapping):
        raise LoRAConfigError(f"adapter config must be a dict or peft LoraConfig, got {type(peft_config).__name__}")
    return peft_config


def trainer_scaling(peft_config: Any, *, rank: int | None = None, alpha: float | None = None) -> float:
    """The scaling the trainer's peft applies, read from the config as handed over (before ``normalize_peft_config``
    folds rsLoRA into ``lora_alpha``): what the served slot's ``lora_alpha / r`` must equal. Independent of the fold,
    so a wrong fold shows as a mismatch instead of agreeing with itself."""
    config = _plain_config(peft_config)
    r = int(config.get("r", config.get("rank", rank)) or 0)
    a = config.get("lora_alpha", config.get("alpha", alpha if alpha is not None else r))
    if r <= 0:
        raise LoRAConfigError("adapter config has no positive rank `r`")
    return float(a) / (math.sqrt(r) if _truthy(config.get("use_rslora")) else r)


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
    out = {str(k): _plain_value(v) for k, v in _plain_config(peft_config).items()}

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
    problems = adapter_config_problems(out, "the adapter config the trainer handed over (FSDP: from "
                                       f"{ADAPTER_PATH_SETTING}'s adapter_config.json when set)")
    if problems:
        raise LoRAConfigError("\n  - ".join(["the adapter cannot be served as trained:", *problems]))
    if _truthy(out.get("use_rslora")):
        out["lora_alpha"] = served_lora_alpha(out)  # SGLang's lora_alpha / r is then peft's lora_alpha / sqrt(r)
        out["use_rslora"] = False  # folded into lora_alpha: a reader honouring both would scale twice

    out["target_modules"] = adapter_target_modules(out.get("target_modules"), modules)
    experts, _ = expert_projections(out.pop("target_parameters", None) or [])
    if experts:  # served as SGLang's expert LoRA modules (the tensors are converted: sglang_contract/expert_lora.py)
        listed = [out["target_modules"]] if isinstance(out["target_modules"], str) else out["target_modules"]
        out["target_modules"] = sorted({*listed, *experts})
    try:
        json.dumps(out)
    except TypeError as exc:
        raise LoRAConfigError(f"adapter config is not JSON-serializable after normalization: {exc}") from exc
    return out
