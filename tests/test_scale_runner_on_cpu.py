"""scripts/device/scale.sh and the scale records: each arm's overrides (recorded by a stand-in ``$PYTHON`` in
place of verl's trainer, as tests/test_examples_on_cpu.py does for the examples) compose in verl's own config with
the plugin's overlay and set the arm's rollout, LoRA and offload; a verl console log becomes the record's figures;
docs/benchmarks.md shows scale records as a table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import load_script
from tests.test_examples_on_cpu import SHIM

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "device" / "scale.sh"
records = load_script(ROOT / "scripts" / "records.py", "records")


def step(i: int, gen: float, sync: str = "") -> str:
    return (f"(TaskRunner) step:{i} - timing_s/step:{10.0 + i} - timing_s/gen:{gen} - timing_s/old_log_prob:1.5 - "
            f"timing_s/ref:{1.0 + i} - timing_s/update_actor:4.0 - timing_s/update_weights:0.5{sync} - "
            f"actor/perf/max_memory_allocated_gb:{30.0 + i} - actor/perf/cpu_memory_used_gb:{60.0 - i} - "
            "response_length/mean:256.0 - response_length/clip_ratio:1.0 - perf/throughput:900.0")


def test_a_console_log_becomes_the_scale_figures() -> None:
    log = "\n".join([step(1, 20.0, " - sglang_lora/sync_total_ms:300.0"), step(2, 8.0, " - sglang_lora/sync_total_ms:12.0"),
                     step(3, 4.0, " - sglang_lora/sync_total_ms:10.0"), step(4, 16.0, " - sglang_lora/sync_total_ms:14.0")])
    f = records.scale_figures(log, "qwen3-8b", "adapter", "fsdp", 64, "csgmv")
    assert (f["shape"], f["arm"], f["trainer"], f["lora_backend"], f["steps"], f["measured_steps"]) == \
        ("qwen3-8b", "adapter", "fsdp", "csgmv", 4, 3)
    assert f["step_s_p50"] == 13.0  # steps 2..4: 12, 13, 14 (step 1 left out)
    assert f["parts_s"] == {"gen": 8.0, "old_log_prob": 1.5, "ref": 4.0, "update_actor": 4.0, "update_weights": 0.5}
    assert f["sync_ms_p50"] == 12.0
    assert f["peak_gpu_gib"] == {"trainer": 34.0, "sglang": None} and f["host_rss_gib"] == 59.0
    assert f["rollout_tokens_per_s"] == 256.0 * 64 / 8.0  # median of 256*64/{8, 4, 16}
    assert f["response_clip_ratio_min"] == 1.0 and f["base_tokens_per_s"] is None and f["tracebacks"] == 0
    none = records.scale_figures("\n".join(step(i, 5.0) for i in (1, 2)), "qwen3-8b", "no_lora", "fsdp", 64, "")
    assert none["sync_ms_p50"] is None and none["lora_backend"] is None and none["measured_steps"] == 1
    empty = records.scale_figures("", "qwen3-8b", "merge", "fsdp", 64)
    assert empty["steps"] == 0 and empty["step_s_p50"] is None and empty["rollout_tokens_per_s"] is None


def test_scale_records_render_as_a_table_and_none_renders_nothing() -> None:
    f = records.scale_figures("\n".join(step(i, 5.0) for i in (1, 2)), "qwen3-8b", "merge", "fsdp", 64)
    rec = {"kind": "scale", "date": "2026-01-01", "commit": "c0", "gpu": "G", "versions": {}, "command": "x",
           "figures": f}
    page = records.render_benchmarks({"scale": [rec]})
    assert "## One-GPU scale runs" in page and "| qwen3-8b | merge | - | 2 | 12 | 5 |" in page
    assert "One-GPU scale" not in records.render_benchmarks({})


def test_scale_script_parses() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


def test_each_arm_passes_its_overrides_and_they_compose(tmp_path: Path) -> None:
    pytest.importorskip("verl")
    from verl_sglang_lora.tools.doctor import compose_config

    shim = tmp_path / "python"
    shim.write_text(SHIM.format(py=sys.executable, log=tmp_path / "calls.log"))
    shim.chmod(0o755)
    scale_dir, logs, out = tmp_path / "scale", tmp_path / "logs", tmp_path / "out"
    model = scale_dir / "qwen3-8b"
    model.mkdir(parents=True)  # an existing checkpoint is reused (none is written here)
    (model / "model.safetensors.index.json").write_text("{}")
    (model / "config.json").write_text("{}")
    env = {**os.environ, "PYTHON": str(shim), "SCALE_DIR": str(scale_dir), "SCALE_LOGS": str(logs), "OUT": str(out),
           "VSL_COMMIT": "c0", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("MODEL_PATH", None)
    env.pop("DATA", None)
    env.pop("LORA_BACKEND", None)
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    cfg_json = json.loads((model / "config.json").read_text())
    assert cfg_json["eos_token_id"] == 2 and (model / "tokenizer.json").exists()  # the offline tokenizer beside it
    want = {"adapter": ("sglang_lora", 32, False, False), "merge": ("sglang_lora", 32, True, False),
            "no_lora": ("sglang", 0, False, True)}
    for arm, (name, rank, merge, offload) in want.items():
        argv = json.loads((logs / f"scale_qwen3-8b_{arm}.log").read_text().strip().splitlines()[-1])
        cfg = compose_config("ppo_trainer", [a for a in argv if not a.startswith("--")])
        a = cfg.actor_rollout_ref
        assert (a.rollout.name, a.model.lora_rank, bool(a.model.lora.merge)) == (name, rank, merge), arm
        assert (a.actor.fsdp_config.param_offload, a.actor.fsdp_config.optimizer_offload) == (offload, offload), arm
        assert a.ref.fsdp_config.param_offload and a.rollout.ignore_eos and a.rollout.gpu_memory_utilization == 0.5
        assert (cfg.data.max_response_length, cfg.data.train_batch_size, a.rollout.n) == (256, 16, 4), arm
        assert cfg.trainer.total_training_steps == 5 and a.model.path == str(model)
        assert cfg.data.train_files == str(scale_dir / "offline" / "testset" / "train.parquet")
        assert cfg.reward.custom_reward_function.name == "compute_score"
    recs = json.loads((out / "results" / "scale.json").read_text())
    assert [r["figures"]["arm"] for r in recs] == ["adapter", "merge", "no_lora"]
    assert recs[0]["figures"]["lora_backend"] and recs[1]["figures"]["lora_backend"] is None
    assert all(r["figures"]["responses"] == 64 and r["commit"] == "c0" for r in recs)
