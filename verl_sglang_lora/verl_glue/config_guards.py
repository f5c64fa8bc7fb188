"""Refuse, before any GPU is allocated, the verl settings that take a path where the adapter cannot work.

verl branches on the literal name "sglang" in several places (docs/verl_touchpoints.md); a new name either
falls into a branch that silently does the wrong thing or is rejected with a message that does not say why.
Each check here names the setting and the fix.
"""

from __future__ import annotations

from typing import Any

from verl_sglang_lora.verl_glue.config_access import cfg_get, cfg_path
from verl_sglang_lora.runtime.lora_plan import lora_plan


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
    if plan.enabled and plan.rank > 0 and str(cfg_get(rollout_config, "mode", "async")) != "async":
        problems.append("actor_rollout_ref.rollout.mode must be 'async' (verl's SGLang server mode). Fix: mode=async.")
    return problems


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
