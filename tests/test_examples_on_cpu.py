"""The two example scripts, run up to verl's entry point (a stand-in ``$PYTHON`` records the trainer's argv; the
offline assets are written for real): their overrides compose in verl's own Hydra trees with the plugin's overlay,
and on the offline default verl's own reward loader picks the plugin's graded reward, whose scores differ within a
GRPO group of samples from the random tiny model (else every advantage is 0 and the adapter never trains)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIM = """#!/usr/bin/env bash
# the offline assets are written by the real interpreter; verl's trainer is not started, its argv is recorded
if [ "$2" = "verl.trainer.main_ppo" ]; then shift 2; "{py}" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@"
elif [ "$2" = "verl_sglang_lora.tools.preflight" ]; then exit 0  # this CPU host has no GPU: tested on its own below
else exec "{py}" "$@"; fi
"""
EXAMPLES = {"run_qwen3_lora_fsdp.sh": "ppo_trainer", "run_qwen3_lora_megatron.sh": "ppo_megatron_trainer"}


def example_overrides(script: str, tmp_path: Path) -> list[str]:
    shim = tmp_path / "python"
    shim.write_text(SHIM.format(py=sys.executable))
    shim.chmod(0o755)
    env = {**os.environ, "PYTHON": str(shim), "ASSETS": str(tmp_path / "assets"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("MODEL_PATH", None)
    env.pop("DATA", None)
    proc = subprocess.run(["bash", str(ROOT / "examples" / script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_composes_and_its_offline_reward_varies_within_a_group(script: str, tmp_path: Path) -> None:
    pytest.importorskip("verl")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pd = pytest.importorskip("pandas")
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from verl_sglang_lora.tools.doctor import compose_config

    argv = example_overrides(script, tmp_path)
    names = [a.split("=", 1)[1] for a in argv if a.startswith("--config-name=")]
    assert names in ([], [EXAMPLES[script]])  # the megatron example names its tree
    cfg = compose_config(EXAMPLES[script], [a for a in argv if not a.startswith("--")])
    assert cfg.actor_rollout_ref.rollout.name == "sglang_lora"
    assert "verl_sglang_lora.register" in str(cfg.actor_rollout_ref.model.external_lib)
    model_dir = Path(cfg.actor_rollout_ref.model.path)
    assert model_dir.is_relative_to(tmp_path / "assets")

    score = get_custom_reward_fn(cfg)  # verl's own loader, on the composed config
    assert score is not None
    rows = pd.read_parquet(cfg.data.train_files)
    row = rows.iloc[0]
    gt = row["reward_model"]["ground_truth"]
    assert score(data_source=row["data_source"], solution_str=row["extra_info"]["answer"], ground_truth=gt) == 1.0

    # a GRPO group as the rollout makes it: n samples of the random tiny model for one prompt
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = tok.apply_chat_template(list(row["prompt"]), add_generation_prompt=True, return_tensors="pt", return_dict=True)
    torch.manual_seed(0)
    n = int(cfg.actor_rollout_ref.rollout.n)
    out = model.generate(**ids, do_sample=True, max_new_tokens=48, num_return_sequences=n, pad_token_id=tok.pad_token_id)
    texts = tok.batch_decode(out[:, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    scores = [score(data_source=row["data_source"], solution_str=t, ground_truth=gt) for t in texts]
    assert all(0.0 <= s < 1.0 for s in scores)  # the random model does not answer right
    assert len(set(scores)) > 1, scores  # non-zero GRPO advantages


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_stops_in_seconds_with_one_message_without_a_gpu(script: str, tmp_path: Path) -> None:
    """The real preflight on this GPU-less host: exit 2 before any asset is written or verl starts, no traceback."""
    env = {**os.environ, "PYTHON": sys.executable, "ASSETS": str(tmp_path / "assets"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(["bash", str(ROOT / "examples" / script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)  # a hang fails here
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "preflight: no usable CUDA GPU" in proc.stderr and "verl-sglang-lora doctor" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "assets").exists()
