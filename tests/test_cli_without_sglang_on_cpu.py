"""The package's command-line entry points in an interpreter without SGLang.

How "without SGLang" is made: every command runs in a subprocess whose ``PYTHONPATH`` starts with a temporary
directory holding a ``sitecustomize.py``. At interpreter start it wraps each finder on ``sys.meta_path`` so that
``sglang``, ``sgl_kernel`` and their submodules are not found, and their distributions (sglang, sglang-kernel,
sgl-kernel) are not listed by ``importlib.metadata``. So ``import sglang`` raises ``ModuleNotFoundError``,
``importlib.util.find_spec("sglang")`` is ``None`` and ``importlib.metadata.version("sglang")`` raises
``PackageNotFoundError`` -- the three ways this package and the libraries it imports (verl, transformers) ask for
SGLang -- exactly as where SGLang was never installed; everything else (verl, torch, transformers, Ray) is the
installed one. The interpreters a command starts (doctor's probes, a server subprocess) inherit ``PYTHONPATH`` and
are just as blind. A fresh virtual environment would be the literal form, but it cannot be filled offline, and one
made with ``--system-site-packages`` would see SGLang again. What stays visible is the files themselves, to code
that lists site-packages by hand; nothing in this package does.

Asserted: on the example's default one-GPU config (its own overrides, on the tiny offline model
``python -m verl_sglang_lora.tools.offline_assets`` writes) doctor exits with the environment-incomplete code,
reports the missing SGLang in one row, and every config row still runs; a bad config exits 1 with the setting
named; each command that needs SGLang ends with one line naming the missing module and the install commands, a
non-zero exit and no traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("hydra")

from tests.test_examples_on_cpu import example_overrides  # noqa: E402
from verl_sglang_lora.install_advice import INSTALL_GPU_SET, INSTALL_SGLANG  # noqa: E402
from verl_sglang_lora.tools.doctor import ENVIRONMENT_ROWS, EXIT_CONFIG, EXIT_ENVIRONMENT, FAIL, OK, WARN  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

HIDE_SGLANG = textwrap.dedent('''
    """Makes this interpreter one without SGLang (tests/test_cli_without_sglang_on_cpu.py)."""
    import re
    import sys

    _MODULES = ("sglang", "sgl_kernel")
    _DISTRIBUTIONS = frozenset({"sglang", "sglang-kernel", "sgl-kernel"})


    def _hidden_module(name):
        return any(name == m or name.startswith(m + ".") for m in _MODULES)


    def _hidden_distribution(dist):
        return re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower() in _DISTRIBUTIONS


    class _WithoutSGLang:
        """A meta-path finder as it is, except that it finds neither SGLang's modules nor its distributions."""

        def __init__(self, inner):
            self._inner = inner

        def find_spec(self, name, path=None, target=None):
            find = getattr(self._inner, "find_spec", None)
            return None if _hidden_module(name) or find is None else find(name, path, target)

        def find_distributions(self, *args, **kwargs):
            find = getattr(self._inner, "find_distributions", None)
            return (d for d in (find(*args, **kwargs) if find else ()) if not _hidden_distribution(d))

        def invalidate_caches(self):
            if hasattr(self._inner, "invalidate_caches"):
                self._inner.invalidate_caches()

        def __getattr__(self, name):
            return getattr(self._inner, name)


    sys.meta_path[:] = [_WithoutSGLang(f) for f in sys.meta_path]
''')

DOCTOR_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def no_sglang_env(tmp_path_factory) -> dict[str, str]:
    """os.environ for a subprocess without SGLang, importing this checkout's package."""
    site = tmp_path_factory.mktemp("without_sglang")
    (site / "sitecustomize.py").write_text(HIDE_SGLANG)
    env = {k: v for k, v in os.environ.items() if k != "VERL_SGLANG_LORA_REQUIRE_SGLANG"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def run(env: dict[str, str], *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def rows(report: str) -> list[tuple[str, str, str]]:
    """(check, status, detail) of each row of doctor's table."""
    out = []
    for line in report.splitlines():
        parts = [p.strip() for p in line.split(" | ", 2)]
        if len(parts) == 3 and parts[1] in (OK, WARN, FAIL):
            out.append((parts[0], parts[1], parts[2]))
    return out


def fixes(report: str) -> list[str]:
    return [ln.strip() for ln in report.split("How to fix:", 1)[-1].splitlines() if ln.strip().startswith("[")]


def test_the_subprocess_has_no_sglang_and_everything_else(no_sglang_env, tmp_path) -> None:
    """The hiding is what the module docstring says: SGLang's modules and distributions are gone, torch's are not
    (a check that the stand-in environment is the one the other tests mean)."""
    code = textwrap.dedent("""
        import importlib.metadata as md, importlib.util, json
        out = {"find_spec": importlib.util.find_spec("sglang") is None,
               "kernel_spec": importlib.util.find_spec("sgl_kernel") is None}
        try:
            md.version("sglang")
            out["metadata"] = False
        except md.PackageNotFoundError:
            out["metadata"] = True
        try:
            import sglang.srt.server_args
            out["import"] = "imported"
        except ModuleNotFoundError as exc:
            out["import"] = exc.name
        out["torch"] = md.version("torch") and importlib.util.find_spec("torch") is not None
        import verl_sglang_lora
        out["package"] = verl_sglang_lora.__file__
        print(json.dumps(out))
    """)
    proc = run(no_sglang_env, "-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["find_spec"] and out["kernel_spec"] and out["metadata"], out
    assert out["import"] == "sglang", out
    assert out["torch"] is True
    assert out["package"].startswith(str(ROOT / "verl_sglang_lora")), out


@pytest.fixture(scope="module")
def example_config(no_sglang_env, tmp_path_factory) -> list[str]:
    """The FSDP example's default (one GPU, tiny offline model) trainer overrides, its assets written without
    SGLang by the real ``offline_assets`` command."""
    tmp = tmp_path_factory.mktemp("example")
    proc = run(no_sglang_env, "-m", "verl_sglang_lora.tools.offline_assets", "--out", str(tmp / "assets"), cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    assert (tmp / "assets" / "model" / "model.safetensors").is_file()
    overrides = example_overrides("run_qwen3_lora_fsdp.sh", tmp, PYTHONPATH=no_sglang_env["PYTHONPATH"])
    assert f"actor_rollout_ref.model.path={tmp / 'assets' / 'model'}" in overrides
    assert "trainer.n_gpus_per_node=1" in overrides and "actor_rollout_ref.rollout.tensor_model_parallel_size=1" \
        in overrides
    return overrides


def doctor_command() -> list[str]:
    """The installed console script where there is one (it imports this checkout's package through PYTHONPATH),
    else ``python -m verl_sglang_lora``."""
    script = Path(sys.executable).parent / "verl-sglang-lora"
    return [str(script)] if script.exists() else [sys.executable, "-m", "verl_sglang_lora"]


# bad configs, each with the setting its FAIL row names: a regex target, a module the checkpoint lacks, a TP size
# that does not divide the model's 4 attention heads
BAD = {
    "regex target": (["actor_rollout_ref.model.target_modules=.*proj"], "actor_rollout_ref.model.target_modules"),
    "unknown target": (["actor_rollout_ref.model.target_modules=[q_proj,attn_out]"],
                       "actor_rollout_ref.model.target_modules"),
    "tp vs heads": (["actor_rollout_ref.rollout.tensor_model_parallel_size=3", "trainer.n_gpus_per_node=3"],
                    "actor_rollout_ref.rollout.tensor_model_parallel_size"),
}


@pytest.fixture(scope="module")
def doctor_runs(example_config, no_sglang_env, tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """doctor on the example's config and on each bad variant, run side by side (~15 s each)."""
    cwd = tmp_path_factory.mktemp("doctor")
    configs = {"example": example_config, **{k: example_config + extra for k, (extra, _) in BAD.items()}}

    def one(overrides: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([*doctor_command(), "doctor", *overrides], env=no_sglang_env, cwd=cwd,
                              capture_output=True, text=True, timeout=DOCTOR_TIMEOUT_S)

    with ThreadPoolExecutor(len(configs)) as pool:
        return dict(zip(configs, pool.map(one, configs.values())))


def test_doctor_on_the_example_says_only_that_sglang_is_missing(doctor_runs) -> None:
    proc = doctor_runs["example"]
    table = rows(proc.stdout)
    assert proc.returncode == EXIT_ENVIRONMENT == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    failed = [r for r in table if r[1] == FAIL]
    assert failed == [("version sglang", FAIL, "not installed")], failed
    not_ok_about_sglang = [r for r in table if r[1] != OK and "sglang" in f"{r[0]} {r[2]}".lower()]
    assert not_ok_about_sglang == failed, "SGLang's absence is said in more than one row"
    fix = [f for f in fixes(proc.stdout) if f.startswith("[FAIL] version sglang:")]
    assert len(fix) == 1 and INSTALL_GPU_SET in fix[0] and INSTALL_SGLANG in fix[0], fix
    # the config rows ran, and passed, without SGLang
    names = {r[0] for r in table}
    for check in ("config compose", "overlay", "rollout config", "lora", "plugin settings", "verl guards",
                  "tp vs heads", "launch args", "model", "target modules", "memory tags"):
        assert check in names, f"no {check!r} row: {sorted(names)}"
    config_rows = [r for r in table if not r[0].startswith(ENVIRONMENT_ROWS)]
    assert config_rows and all(r[1] == OK for r in config_rows), config_rows
    assert "unexpected error" not in proc.stdout
    target = next(r for r in table if r[0] == "target modules")
    assert all(m in target[2] for m in ("q_proj", "down_proj")), target


@pytest.mark.parametrize("case", sorted(BAD))
def test_doctor_on_a_bad_config_exits_1_naming_the_setting(doctor_runs, case: str) -> None:
    proc = doctor_runs[case]
    setting = BAD[case][1]
    assert proc.returncode == EXIT_CONFIG == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "unexpected error" not in proc.stdout
    config_fails = [r for r in rows(proc.stdout) if r[1] == FAIL and not r[0].startswith(ENVIRONMENT_ROWS)]
    assert config_fails and all(setting in r[2] for r in config_fails), config_fails
    assert any(f.startswith("[FAIL]") and setting in f for f in fixes(proc.stdout)), fixes(proc.stdout)
    # the missing SGLang is still said, once
    assert [r for r in rows(proc.stdout) if r[0] == "version sglang"] == [("version sglang", FAIL, "not installed")]


# every command of the package that needs SGLang, as a user or a script types it
NEEDS_SGLANG = {
    "sync matrix": ["-m", "verl_sglang_lora.benchmarks", "--iters", "1"],
    "HTTP benchmark": ["-m", "verl_sglang_lora.benchmarks", "--http", "--iters", "1"],
    "HTTP benchmark, direct": ["-m", "verl_sglang_lora.tools.benchmarks", "--iters", "1"],
    "cuda-graph flag": ["-m", "verl_sglang_lora.sglang_contract.installed", "cuda-graph-flag"],
    "frozen model server": ["-m", "verl_sglang_lora.topology.serve", "{}"],
}


@pytest.mark.parametrize("name", sorted(NEEDS_SGLANG))
def test_a_command_that_needs_sglang_stops_with_one_line(no_sglang_env, tmp_path, name: str) -> None:
    proc = run(no_sglang_env, *NEEDS_SGLANG[name], cwd=tmp_path)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines, "no message"
    last = lines[-1]
    assert "No module named 'sglang'" in last and INSTALL_GPU_SET in last and INSTALL_SGLANG in last, last


def test_commands_that_do_not_need_sglang_still_run(no_sglang_env, tmp_path) -> None:
    """The CPU-side commands stay usable on a machine without SGLang."""
    for args, expect in ((["-m", "verl_sglang_lora", "--version"], "verl-sglang-lora "),
                         (["-m", "verl_sglang_lora", "doctor", "--help"], "Hydra overrides"),
                         (["-m", "verl_sglang_lora.benchmarks", "--help"], "--shape"),
                         (["-m", "verl_sglang_lora.tools.benchmarks", "--pinning-only"], "version pinning")):
        proc = run(no_sglang_env, *args, cwd=tmp_path)
        assert proc.returncode == 0 and expect in proc.stdout, (args, proc.stdout, proc.stderr)
