"""sleep_level, the memory-tag plan and the ledger, derived from verl's real config trees."""

from __future__ import annotations

import pytest

from verl_sglang_lora.runtime.lora_plan import lora_plan
from verl_sglang_lora.runtime.memory import MemoryTagLedger
from verl_sglang_lora.runtime.memory import sleep_level as memory_sleep_level


@pytest.mark.parametrize(
    "model, as_adapter, sleep_level",
    [
        ({"lora_rank": 32, "lora_alpha": 32, "target_modules": "all-linear", "lora": {}}, True, 1),  # FSDP flat keys
        ({"lora_rank": 0, "lora": {"rank": 16, "alpha": 32}}, True, 1),  # Megatron block
        ({"lora_rank": 32, "lora": {"merge": True}}, False, 2),  # merge mode
        ({"lora_rank": 0, "lora": {}}, False, 2),  # no LoRA
    ],
)
def test_plan_from_both_config_blocks(model, as_adapter, sleep_level):
    plan = lora_plan(model)
    assert plan.as_adapter is as_adapter
    assert memory_sleep_level(plan.as_adapter) == sleep_level


def test_megatron_block_wins_for_alpha_and_targets():
    plan = lora_plan({"lora_rank": 0, "lora_alpha": 8, "lora": {"rank": 16, "alpha": 32, "target_modules": ["linear_qkv"]}})
    assert (plan.rank, plan.alpha, plan.target_modules) == (16, 32.0, ["linear_qkv"])


def test_adapter_mode_never_resumes_weights_it_did_not_release():
    ledger = MemoryTagLedger(as_adapter=True)
    assert ledger.to_release() == ["kv_cache"]
    # verl 0.9.1 sends resume(tags=["weights"]) for any rollout name but "sglang" (seed layer 4)
    assert ledger.to_resume(["weights"]) == []
    assert ledger.to_resume(["kv_cache"]) == ["kv_cache"]
    assert ledger.to_resume(["kv_cache"]) == []  # a second resume is a no-op, not SGLang's KeyError


def test_merge_mode_round_trip_and_undo():
    ledger = MemoryTagLedger(as_adapter=False)
    assert ledger.to_release() == ["kv_cache", "weights"]
    assert ledger.to_release() == []  # already released
    assert ledger.to_resume(["weights"]) == ["weights"]
    ledger.undo_resume(["weights"])  # the resume call failed inside SGLang
    assert sorted(ledger.released) == ["kv_cache", "weights"]
    assert ledger.to_resume(None) == ["kv_cache", "weights"]


def test_unknown_tag_is_an_error():
    with pytest.raises(ValueError, match="unknown SGLang memory tag"):
        MemoryTagLedger(as_adapter=True).to_resume(["kv"])


def test_plan_from_verl_rollout_and_model_dataclasses(tiny_qwen3):
    """verl's own HFModelConfig (the object the server actor sees) yields the same plan."""
    verl_cfg = pytest.importorskip("verl.workers.config")
    from omegaconf import OmegaConf

    from verl.utils.config import omega_conf_to_dataclass

    model = omega_conf_to_dataclass(
        OmegaConf.create({"path": str(tiny_qwen3), "lora_rank": 8, "lora_alpha": 16, "target_modules": "all-linear"}),
        dataclass_type=verl_cfg.HFModelConfig,
    )
    plan = lora_plan(model)
    assert (plan.rank, plan.alpha, plan.target_modules, plan.as_adapter) == (8, 16.0, "all-linear", True)


def test_config_guards_name_setting_and_fix():
    from verl_sglang_lora.verl_glue.config_guards import UnsupportedConfigError, check_config, refuse_raw_video

    adapter_model = {"lora_rank": 32, "lora": {}}
    check_config({"mode": "async", "checkpoint_engine": {"backend": "naive"}}, adapter_model)
    with pytest.raises(UnsupportedConfigError, match=r"checkpoint_engine\.backend=nccl.*Fix"):
        check_config({"checkpoint_engine": {"backend": "nccl"}}, adapter_model)
    # merge mode pushes full weights, which every backend carries
    check_config({"checkpoint_engine": {"backend": "nccl"}}, {"lora_rank": 32, "lora": {"merge": True}})
    with pytest.raises(UnsupportedConfigError, match="pipeline_model_parallel_size=2"):
        check_config({"pipeline_model_parallel_size": 2}, adapter_model)
    with pytest.raises(UnsupportedConfigError, match="disaggregation"):
        check_config({"disaggregation": {"enabled": True}}, adapter_model)
    with pytest.raises(UnsupportedConfigError, match="raw video"):
        refuse_raw_video([object()])
    refuse_raw_video([{"format": "processor_output"}])
    # restart recovery restores adapters only
    recovering = {"engine_kwargs": {"sglang_lora": {"server_max_restarts": 1}}}
    check_config(recovering, adapter_model)
    with pytest.raises(UnsupportedConfigError, match=r"server_max_restarts=1 without LoRA adapter mode.*Fix"):
        check_config(recovering, {"lora_rank": 32, "lora": {"merge": True}})


def test_overlay_applied_detects_a_skipped_overlay():
    from verl_sglang_lora.verl_glue.config_guards import overlay_applied

    assert overlay_applied({"external_lib": "verl_sglang_lora.register"})
    assert overlay_applied({"external_lib": ["my_models", "verl_sglang_lora.register"]})
    assert not overlay_applied({"external_lib": None})
