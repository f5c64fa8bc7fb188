"""Config refusals happen in verl's driver, before Ray starts: the real ``python -m verl.trainer.main_ppo`` with the
overlay and a config the plugin cannot run exits with the plugin's message naming the setting and the fix, and Ray
is never initialized (no worker, no model loaded)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[1]
OVERLAY = ["hydra.searchpath=[pkg://verl_sglang_lora.configs]", "+sglang_lora=default"]
FSDP2 = ["actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2",
         "actor_rollout_ref.ref.fsdp_config.strategy=fsdp2"]


def _main_ppo(model: Path, *overrides: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "verl.trainer.main_ppo", *OVERLAY, f"actor_rollout_ref.model.path={model}",
            "actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=8",
            "data.train_files=/nonexistent.parquet", "data.val_files=/nonexistent.parquet", *overrides]
    env = {**os.environ, "RAY_ADDRESS": "", "PYTHONPATH": str(ROOT)}
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=240, env=env)


@pytest.mark.parametrize("overrides, named", [
    ([], "actor_rollout_ref.actor.strategy=fsdp (FSDP1"),
    ([*FSDP2, "actor_rollout_ref.model.target_modules=.*proj"], "PEFT treats as a regex"),
    ([*FSDP2, "actor_rollout_ref.rollout.engine_kwargs.sglang_lora.resident=sometimes"], "resident must be auto, on or off, got 'sometimes'"),
    ([*FSDP2, "actor_rollout_ref.rollout.tensor_model_parallel_size=3"], "tensor_model_parallel_size=3"),
], ids=["fsdp1", "regex_targets", "bad_setting", "tp_heads"])
def test_refused_in_the_driver_before_ray_starts(tiny_qwen3, overrides, named) -> None:
    proc = _main_ppo(tiny_qwen3, *overrides)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert "refused before any worker starts" in out and named in out, out[-3000:]
    assert "Fix:" in out or "must be auto, on or off" in out
    assert "Started a local Ray instance" not in out and "ray.init" not in out  # nothing was started


def test_driver_problems_on_the_composed_config(tiny_qwen3) -> None:
    """The same check on verl's composed ppo_trainer and ppo_megatron_trainer trees with the overlay."""
    from hydra import compose, initialize_config_module

    from verl_sglang_lora.verl_glue.driver_check import driver_problems

    common = [*OVERLAY[1:], f"actor_rollout_ref.model.path={tiny_qwen3}", "actor_rollout_ref.model.lora_rank=8"]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        fsdp1 = compose(config_name="ppo_trainer", overrides=common)
        fsdp2 = compose(config_name="ppo_trainer", overrides=[*common, *FSDP2])
        megatron = compose(config_name="ppo_megatron_trainer", overrides=[*OVERLAY[1:],
                           f"actor_rollout_ref.model.path={tiny_qwen3}", "actor_rollout_ref.model.lora.rank=8"])
    assert any("FSDP1" in p for p in driver_problems(fsdp1))
    assert driver_problems(fsdp2) == []
    assert driver_problems(megatron) == []


@pytest.mark.parametrize("override, named", [
    ("actor_rollout_ref.rollout.quantization=fp8", "actor_rollout_ref.rollout.quantization is set"),
    ("actor_rollout_ref.rollout.mode=sync", "actor_rollout_ref.rollout.mode must be 'async'"),
    ("actor_rollout_ref.rollout.pipeline_model_parallel_size=2", "pipeline_model_parallel_size=2"),
    ("actor_rollout_ref.rollout.checkpoint_engine.backend=nccl", "checkpoint_engine.backend=nccl"),
])
def test_rollout_guards_on_verls_composed_config(tiny_qwen3, override, named) -> None:
    """Each rollout guard refuses verl's own composed ppo_trainer config (with the overlay) that has the problem, and
    the same config without it passes."""
    from hydra import compose, initialize_config_module

    from verl_sglang_lora.verl_glue.driver_check import driver_problems

    common = [*OVERLAY[1:], f"actor_rollout_ref.model.path={tiny_qwen3}", "actor_rollout_ref.model.lora_rank=8", *FSDP2]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        bad = compose(config_name="ppo_trainer", overrides=[*common, override])
        good = compose(config_name="ppo_trainer", overrides=common)
    assert any(named in p for p in driver_problems(bad)), driver_problems(bad)
    assert driver_problems(good) == []
