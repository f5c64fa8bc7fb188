"""scripts/device/learning.sh: every arm x seed runs the example with the arm's rollout and LoRA, the seed in the data
and the rollout, and an equal share of the GPU (the trainer replaced by a stand-in ``$PYTHON`` that records its
argv, as tests/test_examples_on_cpu.py does); the overrides compose in verl's own config with the plugin's overlay,
for the FSDP example and the Megatron one; each run becomes a learning record whose command reproduces it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.test_examples_on_cpu import run_device_script
from tests.test_scale_runner_on_cpu import composed

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "device" / "learning.sh"


def run_learning(tmp_path: Path, **env_extra: str) -> tuple[Path, Path]:
    """learning.sh with the stand-in trainer: (the run logs folder, the records folder)."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    run_device_script(SCRIPT, tmp_path, {"LEARN_LOGS": str(logs), "LEARN_ASSETS": str(tmp_path / "assets"),
                                         "OUT": str(out), "STAGGER_S": "0", **env_extra},
                      ("MODEL_PATH", "DATA", "STEPS", "LR", "N", "TRAINER", "ARMS", "SEEDS"))
    return logs, out / "results"


def test_each_arm_and_seed_runs_the_example_with_its_overrides(tmp_path: Path) -> None:
    pytest.importorskip("verl")
    logs, results = run_learning(tmp_path, STEPS="25")
    want = {"adapter": ("sglang_lora", 32, False), "merge": ("sglang_lora", 32, True), "reference": ("sglang", 0, False)}
    for arm, (name, rank, merge) in want.items():
        for seed in (1, 2):
            cfg = composed(logs, f"learn_fsdp_{arm}_s{seed}", "ppo_trainer")
            a = cfg.actor_rollout_ref
            assert (a.rollout.name, a.model.lora_rank, bool(a.model.lora.merge)) == (name, rank, merge), arm
            assert (cfg.data.seed, a.rollout.seed) == (seed, seed)
            assert a.rollout.gpu_memory_utilization == pytest.approx(0.133)  # 0.8 of the GPU over six servers
            assert cfg.trainer.total_training_steps == 25 and a.actor.optim.lr == pytest.approx(2e-4)
            # the learnable offline task, in an assets folder of the run's own
            assert cfg.reward.custom_reward_function.path == "pkg://verl_sglang_lora.tools.offline_reward"
            assert a.model.path == str(tmp_path / "assets" / f"{arm}_s{seed}" / "model")
    recs = json.loads((results / "learning.json").read_text())
    assert sorted((r["figures"]["arm"], r["figures"]["seed"]) for r in recs) == sorted(
        (arm, seed) for arm in want for seed in (1, 2))
    assert {r["command"] for r in recs} == {
        "TRAINER=fsdp STEPS=25 LR=2e-4 ARMS='adapter merge reference' SEEDS='1 2' bash scripts/device/learning.sh"}
    assert (results.parent / "learning_logs.tgz").exists()


def test_the_megatron_arms_run_the_megatron_example(tmp_path: Path) -> None:
    pytest.importorskip("verl")
    site = tmp_path / "mcore_site"
    (site / "megatron" / "bridge").mkdir(parents=True)  # an installed stack: nothing to install
    logs, results = run_learning(tmp_path, TRAINER="megatron", ARMS="adapter merge", SEEDS="1", MCORE_SITE=str(site))
    for arm, merge in (("adapter", False), ("merge", True)):
        cfg = composed(logs, f"learn_megatron_{arm}_s1", "ppo_megatron_trainer")
        a = cfg.actor_rollout_ref
        assert (a.rollout.name, a.model.lora.rank, bool(a.model.lora.merge)) == ("sglang_lora", 32, merge), arm
        assert a.rollout.gpu_memory_utilization == pytest.approx(0.4)
    recs = json.loads((results / "learning.json").read_text())
    assert [(r["figures"]["trainer"], r["figures"]["arm"]) for r in recs] == [("megatron", "adapter"),
                                                                             ("megatron", "merge")]


def test_megatron_without_its_stack_stops_before_any_run(tmp_path: Path) -> None:
    empty = tmp_path / "mcore"
    empty.mkdir()
    env = {**os.environ, "TRAINER": "megatron", "MCORE_SITE": str(tmp_path / "none"), "MCORE_DIR": str(empty),
           "OUT": str(tmp_path / "out"), "LEARN_LOGS": str(tmp_path / "logs"), "PYTHON": "false"}
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "the Megatron stack is not in" in proc.stderr
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())
