"""Refuse, before any GPU is allocated, the verl settings that take a path where the adapter cannot work.

verl branches on the literal name "sglang" in several places (docs/verl_touchpoints.md); a new name either
falls into a branch that silently does the wrong thing or is rejected with a message that does not say why.
Each check here names the setting and the fix.

The LoRA variants (:func:`lora_problems`) are judged here from the config alone -- the Hydra keys, the model's
``config.json`` and, for FSDP, the ``adapter_config.json`` under ``model.lora_adapter_path`` -- so that the server
actor and the weight-sync client refuse them in ``__init__``, and ``verl-sglang-lora doctor`` on a CPU host.
The matrix of what is served and what is refused is docs/reliability.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from verl_sglang_lora.verl_glue.config_access import cfg_get, cfg_path, to_plain
from verl_sglang_lora.runtime.lora_plan import LoRAPlan, lora_plan
from verl_sglang_lora.sglang_contract.expert_lora import (EXPERT_LORA_MODEL_TYPES, ExpertDims, ExpertLoRAError,
                                                         PROJECTIONS as EXPERT_PROJECTIONS, expert_projections)
from verl_sglang_lora.sglang_contract.peft_config import ADAPTER_PATH_SETTING, adapter_config_problems
from verl_sglang_lora.sglang_contract.target_modules import (
    ATTENTION_TARGETS,
    EXPERT_LORA_MODULE,
    adapter_target_problems,
    sglang_serves_expert_lora,
)
from verl_sglang_lora.topology.run_checks import topology_problems

TP_SETTING = "actor_rollout_ref.rollout.tensor_model_parallel_size"
# Megatron-Bridge LoRA types (verl 0.9.1's hf_model.yaml: lora, vlm_lora, canonical_lora, dora) and why each one other
# than plain LoRA is not served as an adapter.
MEGATRON_TYPE_WHY = {
    "dora": "DoRA adds a magnitude vector per module; SGLang serves no DoRA adapter (its LoRAManager refuses use_dora) "
            "and verl's rollout adapter config (build_peft_config_for_vllm) does not even say it is DoRA",
    "canonical_lora": "canonical LoRA trains separate adapters on linear_q/linear_k/linear_v and linear_fc1_up/"
                      "linear_fc1_gate; verl's rollout adapter config still says target_modules=all-linear and the "
                      "plugin's name mapping knows only the fused linear_qkv/linear_fc1 adapters, so it is not served "
                      "(not validated)",
    "vlm_lora": "the VLM variant is not validated with this plugin (video is refused and image inputs are untested)",
}
# LoRA-variant keys that verl 0.9.1 does not read from the Hydra config (FSDP: HFModelConfig has no such field and
# verl fails with "unexpected keyword argument"; Megatron: verl's rollout adapter config never carries them).
VARIANT_KEYS = ("use_rslora", "use_dora", "modules_to_save", "lora_bias", "bias")
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


class UnsupportedConfigError(ValueError):
    """A verl setting the sglang_lora rollout cannot serve; the message names the setting and the fix."""


def config_problems(rollout_config: Any, model_config: Any) -> list[str]:
    """Every problem found (empty when the combination is served)."""
    problems: list[str] = []
    plan = lora_plan(model_config)
    pp = int(cfg_get(rollout_config, "pipeline_model_parallel_size", 1) or 1)
    if pp > 1:
        # verl's own PP guard lists vllm/sglang/trtllm only and lets a new name through silently
        problems.append(
            f"actor_rollout_ref.rollout.pipeline_model_parallel_size={pp}: SGLang rollouts in verl do not support "
            "pipeline parallelism. Fix: set it to 1 and use tensor_model_parallel_size."
        )
    if bool(cfg_path(rollout_config, "disaggregation.enabled", False)):
        problems.append(
            "actor_rollout_ref.rollout.disaggregation.enabled=True: prefill/decode disaggregation is not supported "
            "for sglang_lora (verl's PD replica is bound to the name 'sglang'). Fix: disable it."
        )
    backend = str(cfg_path(rollout_config, "checkpoint_engine.backend", "naive") or "naive")
    if plan.as_adapter and backend != "naive":
        problems.append(
            f"actor_rollout_ref.rollout.checkpoint_engine.backend={backend}: only the 'naive' (hybrid, in-process) "
            "sync carries the LoRA adapter config in verl; other backends drop it and the rollout would serve a stale "
            "adapter. Fix: checkpoint_engine.backend=naive, or actor_rollout_ref.model.lora.merge=True."
        )
    if plan.as_adapter and cfg_get(rollout_config, "quantization", None):
        problems.append(
            "actor_rollout_ref.rollout.quantization is set: SGLang LoRA adapters are not served on quantized base "
            "weights by this plugin. Fix: drop quantization or use lora.merge=True."
        )
    restarts = cfg_path(rollout_config, "engine_kwargs.sglang_lora.server_max_restarts", 0) or 0
    if int(restarts) > 0 and not plan.as_adapter:
        problems.append(
            f"actor_rollout_ref.rollout.engine_kwargs.sglang_lora.server_max_restarts={restarts} without LoRA adapter "
            "mode: a restarted server holds the checkpoint's weights, not the trained ones (only adapters are "
            "snapshotted). Fix: server_max_restarts=0, or serve LoRA as an adapter (rank > 0, lora.merge=False)."
        )
    # the topology YAML: accepted when its actor matches this rollout config and the frozen models fit, else each
    # reason with the YAML key path and the fix (verl_sglang_lora/topology/run_checks.py)
    problems += topology_problems(rollout_config, model_config)
    if plan.enabled and plan.rank > 0 and str(cfg_get(rollout_config, "mode", "async")) != "async":
        problems.append("actor_rollout_ref.rollout.mode must be 'async' (verl's SGLang server mode). Fix: mode=async.")
    hf = model_hf_config(model_config)
    problems += tp_problems(rollout_config, hf)
    problems += lora_problems(plan, model_config, hf, rollout_config)
    return problems


# ---- the model's own config ------------------------------------------------------------------------------------
def model_hf_config(model_config: Any) -> dict[str, Any] | None:
    """The model's HF config as a dict: verl's loaded ``hf_config`` where the model config carries one (the
    HFModelConfig of the server actor and the sync client), else ``config.json`` under the local model path;
    None where neither is at hand (a hub id or a remote path on a CPU host)."""
    hf = getattr(model_config, "hf_config", None) if not isinstance(model_config, Mapping) else None
    if hf is not None and hasattr(hf, "to_dict"):
        try:
            return hf.to_dict()
        except Exception:  # a config class that cannot serialize itself: fall back to the file
            pass
    for key in ("local_hf_config_path", "local_path", "hf_config_path", "path"):
        raw = cfg_get(model_config, key, None)
        if not isinstance(raw, str) or not raw:
            continue
        file = Path(os.path.expanduser(raw)) / "config.json"
        if file.is_file():
            try:
                return json.loads(file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
    return None


def _text_config(hf: Mapping[str, Any]) -> Mapping[str, Any]:
    text = hf.get("text_config")
    return text if isinstance(text, Mapping) else hf


def num_experts(hf: Mapping[str, Any] | None) -> int:
    """Routed experts per MoE layer (0 for a dense model)."""
    if not hf:
        return 0
    for cfg in (_text_config(hf), hf):
        for key in EXPERT_KEYS:
            value = cfg.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return 0


def tp_problems(rollout_config: Any, hf: Mapping[str, Any] | None) -> list[str]:
    """SGLang's own rule (``QKVParallelLinear``): the query heads split evenly over the TP ranks, and so do the KV
    heads -- or, with more ranks than KV heads, each KV head is replicated on a whole number of ranks."""
    tp = int(cfg_get(rollout_config, "tensor_model_parallel_size", 1) or 1)
    if tp <= 1 or not hf:
        return []
    text = _text_config(hf)
    heads, kv = text.get("num_attention_heads"), text.get("num_key_value_heads")
    if not isinstance(heads, int) or heads <= 0:
        return []
    kv = kv if isinstance(kv, int) and kv > 0 else heads
    good = [d for d in range(1, heads + 1) if heads % d == 0 and (kv % d == 0 or d % kv == 0)]
    if heads % tp == 0 and (kv % tp == 0 or tp % kv == 0):
        return []
    what = (f"does not divide the model's num_attention_heads={heads}" if heads % tp else
            f"neither divides nor is a multiple of the model's num_key_value_heads={kv}")
    return [
        f"{TP_SETTING}={tp} {what} (from the model's config): SGLang splits the query heads evenly over the TP ranks and "
        "the KV heads evenly or into whole replicas, and would fail at launch, after the GPUs are taken. "
        f"Fix: {TP_SETTING} one of {good}."
    ]


# ---- LoRA variants ---------------------------------------------------------------------------------------------
def read_adapter_config(model_config: Any) -> tuple[str | None, dict[str, Any] | None]:
    """(``model.lora_adapter_path``, its ``adapter_config.json``) -- the config is None where the path is not a
    local directory (verl copies remote paths on the worker; the sync then judges the config verl hands over)."""
    raw = cfg_get(model_config, "lora_adapter_path", None)
    if not raw:
        return None, None
    file = Path(os.path.expanduser(str(raw))) / "adapter_config.json"
    if not file.is_file():
        return str(raw), None
    try:
        return str(raw), json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return str(raw), None


def lora_problems(plan: LoRAPlan, model_config: Any, hf: Mapping[str, Any] | None,
                  rollout_config: Any = None) -> list[str]:
    """LoRA settings the rollout would not serve as trained (see the module docstring)."""
    problems: list[str] = []
    problems += _variant_keys(model_config)
    adapter_path, adapter = read_adapter_config(model_config)
    if adapter is not None:
        where = f"{ADAPTER_PATH_SETTING}={adapter_path} (its adapter_config.json)"
        r = int(adapter.get("r") or 0)
        if plan.rank == 0 or (plan.as_adapter and r > plan.rank):
            problems.append(
                f"{where} has r={r} but actor_rollout_ref.model.lora_rank={plan.rank}: verl trains the loaded adapter, "
                f"while the rollout {'serves no LoRA' if plan.rank == 0 else f'launches SGLang with max_lora_rank={plan.rank}'}. "
                f"Fix: actor_rollout_ref.model.lora_rank={r}."
            )
        if plan.enabled:
            problems += adapter_config_problems(adapter, where, as_adapter=plan.as_adapter)
            trained = expert_projections(to_plain(adapter.get("target_parameters")) or [])[0]
            if plan.as_adapter and not plan.megatron_block and trained != plan.expert_projections:
                problems.append(
                    f"{where} adapts the experts {trained or 'not at all'} (its target_parameters), but "
                    f"actor_rollout_ref.model.target_parameters says {plan.expert_projections or 'none'}: the rollout "
                    "converts and launches for the setting, so the trained experts would not be served as trained. "
                    "Fix: set actor_rollout_ref.model.target_parameters to the adapter's "
                    f"({adapter.get('target_parameters')})."
                )
    if not plan.enabled:
        return problems
    if plan.alpha <= 0:
        problems.append(
            f"{plan.alpha_setting}={plan.alpha:g}: the LoRA scaling lora_alpha/r is then "
            f"{'zero (the adapter trains and changes nothing)' if plan.alpha == 0 else 'negative'}. Fix: set "
            f"{plan.alpha_setting} > 0 (commonly the rank, {plan.rank}, or twice the rank)."
        )
    target = to_plain(plan.target_modules)
    exclude = to_plain(cfg_path(model_config, "lora.exclude_modules", None)) if plan.megatron_block else None
    if target == [] and exclude:
        if plan.as_adapter:  # Megatron-Bridge reads [] + exclude_modules as "every linear layer but these"
            problems.append(
                f"{plan.target_modules_setting}=[] with actor_rollout_ref.model.lora.exclude_modules={exclude}: "
                "Megatron-Bridge then adapts every linear layer but those, which SGLang's --lora-target-modules "
                "cannot express. Fix: list the modules in lora.target_modules and clear lora.exclude_modules."
            )
    elif target == [] and plan.expert_projections:
        problems.append(f"{plan.target_modules_setting}=[] with expert target_parameters: an adapter on the experts "
                        "alone is not served (SGLang's launch needs at least one module target besides them). Fix: "
                        f"{plan.target_modules_setting}=[q_proj,k_proj,v_proj,o_proj].")
    elif target == []:  # PEFT refuses it on the training GPUs (NoMatchingPeftModuleError), in either mode
        problems += adapter_target_problems(target, plan.target_modules_setting)
    experts = num_experts(hf)
    if not plan.as_adapter:
        if experts and not plan.megatron_block:
            problems.append(
                f"actor_rollout_ref.model.lora.merge=True on a mixture-of-experts model ({experts} experts per layer, "
                "from the model's config) with FSDP: verl 0.9.1's merged LoRA stream sends transformers 5's packed "
                "'mlp.experts.gate_up_proj' / 'mlp.experts.down_proj' (it unfuses them only on the unmerged path), "
                "which the served checkpoint's per-expert names do not match; the first sync would fail on the GPU. "
                "Fix: actor_rollout_ref.model.lora.merge=False with actor_rollout_ref.model.target_modules="
                "[q_proj,k_proj,v_proj,o_proj] (attention only)."
            )
        return problems
    if plan.megatron_block and plan.lora_type != "lora":
        why = MEGATRON_TYPE_WHY.get(plan.lora_type, "not a Megatron-Bridge LoRA type this plugin knows")
        problems.append(
            f"actor_rollout_ref.model.lora.type={plan.lora_type}: {why}. Fix: actor_rollout_ref.model.lora.type=lora, "
            "or serve merged weights with actor_rollout_ref.model.lora.merge=True."
        )
    if target != []:  # an empty list is judged above, for both modes
        problems += adapter_target_problems(target, plan.target_modules_setting)
    if plan.target_parameters and not plan.megatron_block:
        problems += _target_parameter_problems(plan, experts, rollout_config, hf)
    if experts:
        problems += _moe_problems(plan, experts)
    return problems


def _variant_keys(model_config: Any) -> list[str]:
    """LoRA-variant keys written into the Hydra tree, which verl 0.9.1 never turns into the trained adapter."""
    out = []
    if isinstance(model_config, Mapping) or hasattr(model_config, "keys"):  # dict / DictConfig, not the dataclass
        for key in VARIANT_KEYS:
            if cfg_get(model_config, key, None) is not None:
                out.append(
                    f"actor_rollout_ref.model.{key} is not a verl 0.9.1 setting: verl's HFModelConfig has no such "
                    "field (verl fails with 'unexpected keyword argument' when it builds the model config) and its "
                    "FSDP engine builds the LoraConfig from lora_rank/lora_alpha/target_modules/target_parameters/"
                    "exclude_modules only. Fix: remove it; an adapter with LoRA variants reaches verl only through "
                    f"{ADAPTER_PATH_SETTING} (its adapter_config.json, which this plugin checks)."
                )
    block = to_plain(cfg_get(model_config, "lora", {})) or {}
    if isinstance(block, Mapping) and int(block.get("rank", 0) or 0) > 0:
        for key in VARIANT_KEYS:
            if block.get(key) is not None:
                out.append(
                    f"actor_rollout_ref.model.lora.{key}={block[key]}: verl's rollout adapter config for Megatron "
                    "(build_peft_config_for_vllm) carries only rank, alpha and dropout, so whatever Megatron-Bridge "
                    "makes of this key, the rollout would not serve it. Fix: remove it (DoRA is "
                    "actor_rollout_ref.model.lora.type=dora, which adapter mode refuses)."
                )
    return out


def _target_parameter_problems(plan: LoRAPlan, experts: int, rollout_config: Any,
                               hf: Mapping[str, Any] | None) -> list[str]:
    """LoRA on parameters (FSDP's ``model.target_parameters``): served only as fused MoE expert LoRA, and only where
    the plugin's loader can check the bytes SGLang holds against the trainer's before the version is served."""
    setting = f"actor_rollout_ref.model.target_parameters={list(plan.target_parameters)}"
    projections, other = expert_projections(plan.target_parameters)
    if other:
        return [f"{setting}: {other} are not every layer's fused MoE expert weights (mlp.experts.gate_up_proj / "
                "mlp.experts.down_proj); LoRA on any other nn.Parameter has no SGLang adapter form. Fix: drop them and "
                "target linear modules instead, or serve merged weights with actor_rollout_ref.model.lora.merge=True."]
    if hf is None:  # no model config at hand (a hub id on a CPU host): judged where the model is loaded
        return []
    if not experts:
        return [f"{setting}: the model has no experts (no num_experts in its config), so PEFT finds no such parameter "
                "and refuses the model on the training GPUs. Fix: unset actor_rollout_ref.model.target_parameters."]
    if projections != sorted(EXPERT_PROJECTIONS):
        return [f"{setting}: only {projections} of the experts: SGLang wraps a layer's experts for LoRA only when both "
                "gate_up_proj and down_proj are LoRA targets, so this adapter would never reach them. Fix: "
                "actor_rollout_ref.model.target_parameters=[mlp.experts.gate_up_proj,mlp.experts.down_proj]."]
    model_type = str(hf.get("model_type"))
    try:
        ExpertDims.from_hf_config(hf)
        known = model_type in EXPERT_LORA_MODEL_TYPES
    except ExpertLoRAError:
        known = False
    if not known:
        return [f"{setting} on a model of type {model_type!r}: expert LoRA is converted for the fused expert layout "
                f"of {list(EXPERT_LORA_MODEL_TYPES)} only. Fix: unset actor_rollout_ref.model.target_parameters (an "
                "attention-only adapter)."]
    why = []
    if sglang_serves_expert_lora() is False:
        why.append(f"the installed SGLang has no MoE LoRA code (no sglang/{EXPERT_LORA_MODULE})")
    why += expert_verify_problems(rollout_config)
    if not why:
        return []
    return [f"{setting} on a mixture-of-experts model ({experts} experts per layer): the expert adapter is served "
            "only where its bytes in SGLang's expert buffers are checked against the trainer's before it serves, "
            f"and here {'; and '.join(why)}. Fix: unset actor_rollout_ref.model.target_parameters (an attention-only "
            "adapter, target_modules=[q_proj,k_proj,v_proj,o_proj]), or meet the condition named."]


def expert_verify_problems(rollout_config: Any) -> list[str]:
    """Why the plugin's loader could not check an expert adapter here (empty: it can). The check is the loader's
    ``verify``, a tensor update SGLang runs through the plugin's custom weight loader in one scheduler process."""
    from verl_sglang_lora.runtime.resident.support import SETTING, unsupported_reason
    from verl_sglang_lora.runtime.settings import PluginSettings
    from verl_sglang_lora.sglang_contract.installed import weight_update_session
    from verl_sglang_lora.verl_glue.config_access import sglang_rank_count

    out = []
    if weight_update_session():
        out.append("the installed SGLang runs every tensor update in a weight-update session whose end re-processes "
                   "the mixture-of-experts base weights, so the check cannot run per sync")
    mode, ranks = PluginSettings.from_rollout_config(rollout_config).resident, sglang_rank_count(rollout_config)
    # without SGLang here (a CPU driver) only the settings are judged; the GPU host's check reads SGLang too
    reason = unsupported_reason(mode, ranks) if sglang_serves_expert_lora() is not None or mode == "off" or \
        ranks != 1 else None
    if reason is not None:
        out.append(f"the loader that runs the check is not launched ({reason}; {SETTING}=auto launches it where it "
                   "can run)")
    return out


def _moe_problems(plan: LoRAPlan, experts: int) -> list[str]:
    """A mixture-of-experts model: only attention targets are served as an adapter.

    transformers 5 fuses each layer's experts into 3-D parameters (``mlp.experts.gate_up_proj``), so PEFT adapts
    them (and the router's ``gate.weight``) through ``target_parameters`` -- adapters named
    ``mlp.experts.base_layer.lora_A`` that the served checkpoint (per-expert ``experts.N.gate_proj``) does not know.
    Megatron's linear_fc1/linear_fc2 are the grouped expert GEMMs. Whether SGLang itself could serve expert LoRA is
    read from the installed package, so the refusal says which side is missing."""
    target = to_plain(plan.target_modules)
    if isinstance(target, str):
        mlp = [f"{target} (PEFT then adapts the fused experts and the router)"]
    else:
        mlp = [t for t in target or [] if str(t).rsplit(".", 1)[-1] not in ATTENTION_TARGETS]
    if not mlp:
        return []
    if plan.megatron_block:
        trainer_side = "Megatron's linear_fc1/linear_fc2 there are the grouped expert GEMMs"
        attention = "[linear_qkv,linear_proj]"
    else:
        trainer_side = ("transformers 5 fuses the experts into 3-D parameters, which PEFT adapts through "
                        "target_parameters as 'mlp.experts.base_layer.lora_A/B', names the served checkpoint's "
                        "per-expert weights do not match")
        attention = "[q_proj,k_proj,v_proj,o_proj]"
    serves = sglang_serves_expert_lora()
    if serves is False:
        sglang_side = (f"and the installed SGLang has no MoE LoRA code (no sglang/{EXPERT_LORA_MODULE}): its LoRA "
                       "memory pool holds dense projections only")
    elif serves:
        sglang_side = (f"; the installed SGLang has MoE LoRA code (sglang/{EXPERT_LORA_MODULE}): the experts are "
                       "adapted through actor_rollout_ref.model.target_parameters=[mlp.experts.gate_up_proj,"
                       "mlp.experts.down_proj] instead, which this plugin converts into SGLang's expert LoRA and checks "
                       "byte for byte where its loader runs (one scheduler rank, no weight-update session)")
    else:
        sglang_side = "(no SGLang is installed here to ask whether it could serve expert LoRA)"
    return [
        f"{plan.target_modules_setting}: {mlp} on a mixture-of-experts model ({experts} experts per layer, from the "
        f"model's config): {trainer_side} {sglang_side}. Fix: {plan.target_modules_setting}={attention} "
        "(attention only)."
    ]


def overlay_applied(model_config: Any) -> bool:
    """Whether the Hydra overlay reached this config (it sets model.external_lib to the register module).

    If ``hydra.searchpath`` does not resolve, Hydra reads ``+sglang_lora=default`` as a plain key and the overlay
    is silently skipped (seen on the H200 before the overlay moved inside the package)."""
    libs = cfg_get(model_config, "external_lib", None)
    libs = [libs] if isinstance(libs, str) else list(libs or [])
    return "verl_sglang_lora.register" in libs


def check_config(rollout_config: Any, model_config: Any) -> None:
    problems = config_problems(rollout_config, model_config)
    if problems:
        raise UnsupportedConfigError("rollout.name=sglang_lora cannot run this config:\n  - " + "\n  - ".join(problems))


def refuse_raw_video(video_data: Any) -> None:
    """verl 0.9.1 converts video for SGLang only when the name is exactly 'sglang'; raw frames would reach
    SGLang, which cannot parse them."""
    if not video_data:
        return
    items = video_data if isinstance(video_data, list) else [video_data]
    if not all(isinstance(v, dict) and v.get("format") == "processor_output" for v in items):
        raise UnsupportedConfigError(
            "sglang_lora received raw video frames: verl converts video for SGLang only under rollout.name=sglang. "
            "Video inputs are not supported with sglang_lora; use a text-only dataset."
        )
