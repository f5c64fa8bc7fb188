"""The two example scripts, run up to verl's entry point (a stand-in ``$PYTHON`` records the trainer's argv; the
offline assets are written for real): their overrides compose in verl's own Hydra trees with the plugin's overlay,
and on the offline default verl's own reward loader picks the plugin's graded reward, whose scores differ within a
GRPO group of samples from the random tiny model (else every advantage is 0 and the adapter never trains).
Their set-up order: the GPU check first (on this GPU-less host: exit 2 in seconds, one message, no env built), then
the env set-up (tests/test_gpu_env_on_cpu.py), then the package check and the run with the env's python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import fake_nvidia_smi

ROOT = Path(__file__).resolve().parents[1]
SHIM = """#!/usr/bin/env bash
# the offline assets are written by the real interpreter; verl's trainer is not started, its argv is recorded
[ "$1" = "-m" ] && echo "$0 $*" >> "{log}"
if [ "$2" = "verl.trainer.main_ppo" ]; then shift 2; "{py}" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@"
elif [ "$2" = "verl_sglang_lora.tools.preflight" ]; then exit 0  # this CPU host has no GPU: tested on its own below
elif [ "$2" = "verl_sglang_lora.tools.gpu_env" ]; then echo "$0"  # "the tested set is here": this python runs it
elif [ "$2" = "ray.scripts.scripts" ]; then exit 0  # recorded only: a real `ray stop` ends every Ray on the host
else exec "{py}" "$@"; fi
"""


def run_device_script(script: Path, tmp_path: Path, env: dict[str, str], unset: tuple[str, ...]) -> None:
    """A scripts/device/ runner with the stand-in trainer (``SHIM`` as ``$PYTHON``, its calls in tmp_path/calls.log),
    ``env`` on top of this process's environment less the ``unset`` keys the caller did not set; it must exit 0."""
    shim = tmp_path / "python"
    shim.write_text(SHIM.format(py=sys.executable, log=tmp_path / "calls.log"))
    shim.chmod(0o755)
    full = {**os.environ, "PYTHON": str(shim), "VSL_COMMIT": "c0",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **env}
    for key in unset:
        if key not in env:
            full.pop(key, None)
    proc = subprocess.run(["bash", str(script)], cwd=ROOT, env=full, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
EXAMPLES = {"run_qwen3_lora_fsdp.sh": "ppo_trainer", "run_qwen3_lora_megatron.sh": "ppo_megatron_trainer"}


def example_overrides(script: str, tmp_path: Path, **extra_env: str) -> list[str]:
    shim = tmp_path / "python"
    shim.write_text(SHIM.format(py=sys.executable, log=tmp_path / "calls.log"))
    shim.chmod(0o755)
    env = {**os.environ, "PYTHON": str(shim), "ASSETS": str(tmp_path / "assets"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **extra_env}
    env.pop("MODEL_PATH", None)
    env.pop("DATA", None)
    proc = subprocess.run(["bash", str(ROOT / "examples" / script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def calls(tmp_path: Path) -> list[str]:
    """The `python -m MODULE ARGS` lines the example ran, in order, without the interpreter's path."""
    return [line.split(" -m ", 1)[1] for line in (tmp_path / "calls.log").read_text().splitlines()]


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
def test_example_sets_up_then_checks_packages_then_runs_with_the_envs_python(script: str, tmp_path: Path) -> None:
    """GPU check, set-up (whose python runs everything after it), the package check against the tested set, the
    assets, the trainer; the Megatron example asks the set-up to say its stack is not in the set and checks it."""
    example_overrides(script, tmp_path)
    ran = calls(tmp_path)
    assert ran[0] == "verl_sglang_lora.tools.preflight --gpu-only --gpus 1"
    assert ran[1].startswith("verl_sglang_lora.tools.gpu_env --skip-gpu-check --gpus 1")
    megatron = ["--megatron", "--attn-backend", "flash"] if "megatron" in script else []
    assert ran[2].split() == ["verl_sglang_lora.tools.preflight", "--gpus", "1", "--constraints", "auto", *megatron]
    assert ("--megatron" in ran[1]) == bool(megatron)
    assert ran[3].startswith("verl_sglang_lora.tools.offline_assets") and ran[4].startswith("verl.trainer.main_ppo")


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_without_setup_uses_python_as_it_is(script: str, tmp_path: Path) -> None:
    """VSL_SKIP_SETUP=1 (people who manage their own env): no set-up, the recipe's packages checked, not the pins."""
    example_overrides(script, tmp_path, VSL_SKIP_SETUP="1", NGPUS="2")
    ran = calls(tmp_path)
    assert not any("gpu_env" in line for line in ran)
    assert ran[0] == "verl_sglang_lora.tools.preflight --gpu-only --gpus 2"
    assert ran[1].startswith("verl_sglang_lora.tools.preflight --gpus 2") and "--constraints" not in ran[1]


def run_example(script: str, tmp_path: Path, path_dirs: list[Path] = (),
                **extra: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHON": sys.executable, "ASSETS": str(tmp_path / "assets"),
           "VSL_GPU_ENV": str(tmp_path / "gpu-env"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **extra}
    env["PATH"] = os.pathsep.join([*map(str, path_dirs), env["PATH"]])
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(ROOT / "examples" / script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)  # a hang fails here
    return proc, time.monotonic() - t0


def assert_one_message_nothing_built(proc: subprocess.CompletedProcess, elapsed: float, tmp_path: Path) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("verl-sglang-lora preflight: no usable CUDA GPU"), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not (tmp_path / "assets").exists() and not (tmp_path / "gpu-env").exists()  # no env, no assets
    assert elapsed < 20, elapsed  # seconds: the driver is asked before anything is imported or built
    return lines[0]


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_stops_in_seconds_with_one_message_without_a_gpu(script: str, tmp_path: Path) -> None:
    """The real preflight on this GPU-less host: exit 2 before any env or asset is built or verl starts."""
    before = (ROOT / ".venv-gpu").exists()
    proc, elapsed = run_example(script, tmp_path)
    line = assert_one_message_nothing_built(proc, elapsed, tmp_path)
    assert "nvidia-smi not found" in line and "verl-sglang-lora doctor" in line
    assert (ROOT / ".venv-gpu").exists() == before  # nor the default env in the checkout


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_stops_when_the_host_torch_cannot_use_the_gpu(script: str, tmp_path: Path) -> None:
    """A driver that lists a GPU, but this host's torch is the CPU build: the same one message, no env built."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this host's torch can use a GPU")
    bin_dir = fake_nvidia_smi(tmp_path, 'echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"')
    proc, elapsed = run_example(script, tmp_path, [bin_dir])
    line = assert_one_message_nothing_built(proc, elapsed, tmp_path)
    assert f"torch {torch.__version__}" in line and "cannot use them" in line and "Fix:" in line


@pytest.mark.parametrize("body, words", [
    ('echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; exit 9',
     "nvidia-smi fails"),
    ('echo "No devices were found"; exit 6', "nvidia-smi fails"),
    ("exit 0", "lists no device"),
])
def test_example_stops_on_a_driver_without_a_device(body: str, words: str, tmp_path: Path) -> None:
    bin_dir = fake_nvidia_smi(tmp_path, body)
    proc, elapsed = run_example("run_qwen3_lora_fsdp.sh", tmp_path, [bin_dir])
    assert words in assert_one_message_nothing_built(proc, elapsed, tmp_path)


def test_example_stops_with_fewer_gpus_than_ngpus(tmp_path: Path) -> None:
    bin_dir = fake_nvidia_smi(tmp_path, 'echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"')
    proc, _ = run_example("run_qwen3_lora_megatron.sh", tmp_path, [bin_dir], NGPUS="4")
    assert proc.returncode == 2 and "NGPUS=4 but this machine has 1 GPU(s)" in proc.stderr
    assert "Fix: NGPUS=1" in proc.stderr
    assert not (tmp_path / "gpu-env").exists()
