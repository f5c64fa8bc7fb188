"""The server actor must import verl's SGLang module without SGLang's CPU-engine switch.

Seen on the H200: importing verl's ``async_sglang_server`` through verl's replica loader (which sets
``SGLANG_USE_CPU_ENGINE=1`` for the import) inside the server actor made SGLang cache ``is_cpu() == True``;
the server launched with "CPU device enabled" and crashed at the first prefill ("cpu tensor?").
Each check runs in a fresh interpreter because SGLang caches the answer for the life of the process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import sglang_or_skip  # noqa: E402

sglang_or_skip("sglang")
pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[1]

# Records SGLANG_USE_CPU_ENGINE at the moment verl's server module is imported, then stops that import
# (the full module needs SGLang's GPU-only server stack); the loaders under test run for real around it.
_RECORD_IMPORT_ENV = r"""
import json, os, sys
from importlib.abc import MetaPathFinder
seen = []
class Recorder(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "verl.workers.rollout.sglang_rollout.async_sglang_server":
            seen.append(os.environ.get("SGLANG_USE_CPU_ENGINE"))
            raise ImportError("stopped by the test after recording the environment")
        return None
sys.meta_path.insert(0, Recorder())
"""


def _run(code: str, env_extra: dict[str, str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_verl_replica_loader_imports_with_the_cpu_engine_switch() -> None:
    """verl's loader: right for the trainer process, wrong in the server actor."""
    out = _run(_RECORD_IMPORT_ENV + r"""
from verl.workers.rollout.replica import RolloutReplicaRegistry
try:
    RolloutReplicaRegistry.get("sglang")
except ImportError:
    pass
print(json.dumps({"seen": seen}))
""")
    assert out["seen"] == ["1"]


def test_plugin_server_loader_imports_without_it() -> None:
    out = _run(_RECORD_IMPORT_ENV + r"""
from verl_sglang_lora.verl_glue.imports import load_verl_sglang_server
try:
    load_verl_sglang_server()
except ImportError as exc:
    err = str(exc)
print(json.dumps({"seen": seen, "err": err}))
""")
    assert out["seen"] == [None]
    assert "rollout.name=sglang_lora needs verl's SGLang rollout" in out["err"]  # a failed import names the fix


def test_cpu_engine_sglang_in_the_server_process_is_refused() -> None:
    out = _run(r"""
import json, os
from sglang.srt.utils.common import is_cpu
cached = is_cpu()                    # what a module-level `_is_cpu = is_cpu()` freezes during an import
del os.environ["SGLANG_USE_CPU_ENGINE"]
from verl_sglang_lora.verl_glue.imports import refuse_sglang_cpu_engine
try:
    refuse_sglang_cpu_engine()
    err = None
except RuntimeError as exc:
    err = str(exc)
print(json.dumps({"cached": cached, "err": err}))
""", {"SGLANG_USE_CPU_ENGINE": "1"})
    if not out["cached"]:
        pytest.skip("SGLang's is_cpu() needs an x86-64 or arm64 host")
    assert out["err"] and "SGLANG_USE_CPU_ENGINE=1" in out["err"] and "load_verl_sglang_server" in out["err"]


def test_clean_sglang_import_passes_the_check() -> None:
    out = _run(r"""
import json
from sglang.srt.utils.common import is_cpu
from verl_sglang_lora.verl_glue.imports import refuse_sglang_cpu_engine
refuse_sglang_cpu_engine()
print(json.dumps({"is_cpu": is_cpu()}))
""")
    assert out["is_cpu"] is False
