"""The megatron-bridge registration guard (runtime/bridge_registrations.py) against real transformers.

- megatron-bridge 0.5.1's own Qwen3-ASR registration module, under the transformers that SGLang 0.5.23 pins
  (.cache/megatron_bridge/, scripts/megatron_bridge_release.sh). Without the guard it raises, as it did on the H200.
  With the guard it imports, and transformers' own class serves ``qwen3_asr``.
- The guard's rules under the venv's transformers, with the guard installed by ``import verl_sglang_lora.register``.
  A bridge class that re-registers a model type transformers ships is skipped with a warning. A new bridge model
  type registers. Any other module's collision still raises.

Each case runs in a fresh interpreter, because a registration changes transformers' tables for the whole process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import lock_pin, megatron_bridge_release_or_skip

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, pythonpath: list[Path], **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "VERL_SGLANG_LORA_BRIDGE_REGISTRATIONS"}
    environ.update(env, PYTHONPATH=os.pathsep.join(str(p) for p in [*pythonpath, ROOT]))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environ, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr}


QWEN3_ASR = """
import importlib, json, os, sys
import transformers
from verl_sglang_lora.runtime import bridge_registrations
armed = bridge_registrations.install() if os.environ["GUARD"] == "1" else False
auto_loaded = "transformers.models.auto.processing_auto" in sys.modules  # the guard waits for the bridge's import
try:
    importlib.import_module("megatron.bridge.models.qwen3_asr.hf_qwen3_asr")
    error = None
except ValueError as exc:
    error = str(exc)
print(json.dumps({
    "transformers": transformers.__version__, "armed": armed, "auto_loaded_before": auto_loaded,
    "guarded": bridge_registrations.guarded, "error": error,
    "served_by": type(transformers.AutoConfig.for_model("qwen3_asr")).__module__,
    "skipped": bridge_registrations.skipped,
}))
"""


def _overlay(tmp_path: Path, bridge: Path) -> Path:
    """megatron.bridge with its package __init__s left out (they import megatron.core and every model), its real
    Qwen3-ASR registration package linked in: ``import megatron.bridge`` still goes through the import system."""
    pkg = tmp_path / "megatron" / "bridge" / "models" / "qwen3_asr"
    pkg.mkdir(parents=True)
    for d in (pkg.parents[1], pkg.parents[0], pkg):
        (d / "__init__.py").write_text("")
    (pkg / "hf_qwen3_asr").symlink_to(bridge / "megatron" / "bridge" / "models" / "qwen3_asr" / "hf_qwen3_asr")
    return tmp_path


@pytest.mark.parametrize("guard", ["0", "1"])
def test_megatron_bridge_qwen3_asr_under_sglang_0523_transformers(guard: str, tmp_path: Path) -> None:
    bridge = megatron_bridge_release_or_skip()
    out = _run(QWEN3_ASR, [_overlay(tmp_path, bridge), bridge], GUARD=guard)
    assert out["transformers"] == lock_pin("requirements-sglang0.5.23.lock", "transformers")
    assert out["served_by"].startswith("transformers.models.qwen3_asr.")
    if guard == "0":  # the failure without the guard
        assert out["error"] and "'qwen3_asr' is already used by a Transformers config" in out["error"]
        assert out["skipped"] == []
        return
    assert out["error"] is None and out["armed"] and not out["auto_loaded_before"]
    assert out["guarded"] == ["AutoConfig", "_BaseAutoModelClass", "AutoProcessor"]
    assert [(auto, model_type) for auto, model_type, _ in out["skipped"]] == [
        ("AutoConfig", "qwen3_asr"), ("AutoModel", "qwen3_asr"), ("AutoProcessor", "qwen3_asr")]
    assert all(cls.startswith("megatron.bridge.models.qwen3_asr.") for _, _, cls in out["skipped"])
    assert out["stderr"].count("is not registered with transformers'") == 3


def test_opt_out_leaves_transformers_alone(tmp_path: Path) -> None:
    bridge = megatron_bridge_release_or_skip()
    out = _run(QWEN3_ASR, [_overlay(tmp_path, bridge), bridge], GUARD="1", VERL_SGLANG_LORA_BRIDGE_REGISTRATIONS="0")
    assert not out["armed"] and out["guarded"] == [] and out["skipped"] == []
    assert out["error"] and "already used" in out["error"]


RULES = """
import json, logging
import verl_sglang_lora.register  # installs the guard, as in every verl process
from verl_sglang_lora.runtime import bridge_registrations
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig
from megatron.bridge.vendored import Qwen3Config, BridgeNewConfig, Qwen3ForCausalLM
import other_vendor

results = {}
def attempt(name, fn):
    try:
        fn()
        results[name] = "ok"
    except ValueError as exc:
        results[name] = "ValueError: " + str(exc)

attempt("bridge_native_config", lambda: AutoConfig.register("qwen3", Qwen3Config))
attempt("bridge_native_model", lambda: AutoModelForCausalLM.register(Qwen3Config, Qwen3ForCausalLM))
attempt("bridge_new_type", lambda: AutoConfig.register("vsl_bridge_new", BridgeNewConfig))
attempt("other_native_config", lambda: AutoConfig.register("qwen3", other_vendor.Qwen3Config))
results["served_qwen3"] = type(AutoConfig.for_model("qwen3")).__module__
results["served_new"] = type(AutoConfig.for_model("vsl_bridge_new")).__module__
results["skipped"] = bridge_registrations.skipped
print(json.dumps(results))
"""

# vendored copies named as transformers names its own (as megatron-bridge's Qwen3ASRConfig), and a new model type
VENDORED = """
from transformers import PretrainedConfig, PreTrainedModel

class Qwen3Config(PretrainedConfig):
    model_type = "qwen3"

class BridgeNewConfig(PretrainedConfig):
    model_type = "vsl_bridge_new"

class Qwen3ForCausalLM(PreTrainedModel):
    config_class = Qwen3Config
"""


def test_guard_rules_with_the_venv_transformers(tmp_path: Path) -> None:
    bridge = tmp_path / "megatron" / "bridge"
    bridge.mkdir(parents=True)
    (bridge / "__init__.py").write_text("")
    (bridge / "vendored.py").write_text(VENDORED)
    (tmp_path / "other_vendor.py").write_text(VENDORED)
    out = _run(RULES, [tmp_path])
    assert out["bridge_native_config"] == "ok"  # skipped, transformers' Qwen3Config kept
    assert out["bridge_native_model"] == "ok"
    assert out["served_qwen3"].startswith("transformers.models.qwen3.")
    assert out["bridge_new_type"] == "ok" and out["served_new"] == "megatron.bridge.vendored"  # passed through
    assert out["other_native_config"].startswith("ValueError:") and "qwen3" in out["other_native_config"]
    assert [(a, t) for a, t, _ in out["skipped"]] == [("AutoConfig", "qwen3"), ("AutoModelForCausalLM", "qwen3")]
    assert "megatron-bridge's own Qwen3Config for model type 'qwen3'" in out["stderr"]
