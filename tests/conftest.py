"""Shared fixtures: a tiny real Qwen3 checkpoint (safetensors) built locally with transformers."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory) -> Path:
    """A 2-layer random Qwen3 saved as safetensors: real parameter names, no download."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("tiny_qwen3")
    cfg = transformers.Qwen3Config(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(cfg)
    model.save_pretrained(path, safe_serialization=True)
    assert json.loads((path / "config.json").read_text())["model_type"] == "qwen3"
    return path


def sglang_or_skip(module: str = "sglang.srt.managers.io_struct"):
    """Import an SGLang module; skip without SGLang, except where the suite demands it.

    scripts/run_cpu_tests.sh sets VERL_SGLANG_LORA_REQUIRE_SGLANG=1, so in CI a broken SGLang install fails
    the contract tests instead of skipping them.
    """
    import importlib
    import os

    if os.environ.get("VERL_SGLANG_LORA_REQUIRE_SGLANG") == "1":
        return importlib.import_module(module)
    try:
        return importlib.import_module(module)
    except Exception as exc:  # a half-installed SGLang raises KeyError on re-import, not only ImportError
        pytest.skip(f"SGLang not importable here: {type(exc).__name__}: {exc}")


ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "scripts" / "offline_bundle"


def sglang_release_dir(version: str) -> Path:
    """``.cache/sglang/<version>`` (scripts/sglang_release.sh); skipped where it is missing, failed where the suite's
    own run (VERL_SGLANG_LORA_REQUIRE_SGLANG=1, scripts/run_cpu_tests.sh) should have prepared it."""
    path = ROOT / ".cache" / "sglang" / version
    if not (path / "sglang").is_dir():
        message = f"SGLang {version} is not prepared (bash scripts/sglang_release.sh {version})"
        if os.environ.get("VERL_SGLANG_LORA_REQUIRE_SGLANG") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def start_per_release(versions, argv: list[str], with_root: bool = False) -> dict:
    """One interpreter per SGLang release at once, the release first on PYTHONPATH (the project after it where
    ``with_root``): {version: Popen, or None where the release is missing}."""
    procs = {}
    for version in versions:
        path = ROOT / ".cache" / "sglang" / version
        if not (path / "sglang").is_dir():
            procs[version] = None
            continue
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = os.pathsep.join([str(path), str(ROOT)] if with_root else [str(path)])
        procs[version] = subprocess.Popen([sys.executable, "-W", "ignore", *argv], cwd=ROOT, env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return procs


def release_result(procs: dict, version: str, timeout: float = 240) -> dict:
    """The last stdout line (JSON) of ``version``'s interpreter, which must have exited 0."""
    sglang_release_dir(version)
    proc = procs[version]
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


def stop_all(procs: dict) -> None:
    for proc in procs.values():
        if proc is not None and proc.poll() is None:
            proc.kill()


def per_release_fixture(versions, argv: list[str], with_root: bool = False):
    """A module-scoped fixture (assign it to the name tests ask for): ``argv`` in one interpreter per release of
    ``versions``, all started when the module's first test asks, killed after its last; read each with
    ``release_result``."""

    @pytest.fixture(scope="module")
    def procs() -> Iterator[dict]:
        started = start_per_release(versions, argv, with_root)
        try:
            yield started
        finally:
            stop_all(started)

    return procs


def fake_nvidia_smi(tmp_path: Path, body: str) -> Path:
    """A folder holding an ``nvidia-smi`` that runs the bash ``body``, to put first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/usr/bin/env bash\n{body}\n")
    smi.chmod(0o755)
    return bin_dir


def load_script(path: Path, name: str):
    """A script (not a package module: constraints/generate.py, constraints/check_resolve.py, ...) loaded by path."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lock_pin(lock: str, dist: str) -> str:
    """The version a GPU bundle lock (scripts/offline_bundle/LOCK) pins for ``dist``."""
    return re.search(rf"^{re.escape(dist)}==(\S+)", (LOCKS / lock).read_text(), re.M).group(1)


def megatron_bridge_release_or_skip() -> Path:
    """.cache/megatron_bridge/<the Megatron carry's> (scripts/megatron_bridge_release.sh): megatron-core and
    megatron-bridge under SGLang 0.5.23's transformers. Skip without it, except where the suite demands it."""
    import os

    version = lock_pin("requirements-megatron.lock", "megatron-bridge")
    path = ROOT / ".cache" / "megatron_bridge" / version
    if not (path / "megatron" / "core").is_dir() or not (path / "megatron" / "bridge").is_dir():
        if os.environ.get("VERL_SGLANG_LORA_REQUIRE_SGLANG") == "1":  # scripts/run_cpu_tests.sh builds it
            pytest.fail(f"{path} lacks megatron/core or megatron/bridge: "
                        f"bash scripts/megatron_bridge_release.sh {version}")
        pytest.skip(f"{path} missing (bash scripts/megatron_bridge_release.sh {version})")
    return path


# ---- xdist scheduling (scripts/run_cpu_tests.sh runs `-n <cores> --dist loadfile`) ---------------------------
# A test file is one unit of work, so a module's fixtures (the 7 release probes, the resident selfchecks) run once, on
# one worker -- except that the files which run the doctor in-process are one unit together: the doctor's
# fresh-interpreter probes (~10 s of SGLang/verl imports each) are answered once per process (tools/doctor.py, Probe),
# so on one worker they are paid once instead of once per file.
# The units go out slowest first, each to the next free worker (xdist's own order is by number of tests, which sent
# the one-test Ray files, 30-50 s each, last, with one worker idle meanwhile). The order only schedules: within a file
# the tests keep their order. Seconds: a 2-core run of the suite; a file not listed counts as fast.
_DOCTOR_UNIT = ("test_doctor_on_cpu", "test_bad_lora_settings_on_cpu", "test_topology_on_cpu")
_SLOW_UNITS = {
    "doctor": 135, "test_compat_matrix_on_cpu": 55, "test_server_actor_on_cpu": 50, "test_weight_sync_client_on_cpu": 50,
    "test_fault_scripts_on_cpu": 45, "test_topology_launch_on_cpu": 40, "test_resident_actor_on_cpu": 38,
    "test_sync_faults_on_cpu": 35, "test_registration_on_cpu": 33, "test_sync_metrics_on_cpu": 25,
    "test_resident_slot_on_cpu": 25, "test_server_import_on_cpu": 23, "test_restart_recovery_on_cpu": 30,
    "test_update_session_on_cpu": 20, "test_stock_lora_pattern_on_cpu": 12,
    "test_cli_without_sglang_on_cpu": 80, "test_examples_on_cpu": 18, "test_served_effect_on_cpu": 17, "test_megatron_bridge_lora_on_cpu": 15,
}


def _unit(path: str) -> str:
    module = Path(path.split("::", 1)[0]).stem
    return "doctor" if module in _DOCTOR_UNIT else module


def pytest_collection_modifyitems(config, items):
    # stable: files and tests keep their relative order within one weight
    items.sort(key=lambda item: -_SLOW_UNITS.get(_unit(item.nodeid), 0))


if importlib.util.find_spec("xdist") is not None:

    def pytest_xdist_make_scheduler(config, log):
        if config.getvalue("dist") != "loadfile":
            return None
        from xdist.scheduler import LoadFileScheduling

        class SlowestFirstFiles(LoadFileScheduling):
            def _split_scope(self, nodeid: str) -> str:
                scope = super()._split_scope(nodeid)
                return "tests/doctor-in-process" if _unit(scope) == "doctor" else scope

        config.option.loadscopereorder = False  # keep the collection order set above
        return SlowestFirstFiles(config, log)
