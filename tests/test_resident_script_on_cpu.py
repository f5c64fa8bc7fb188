"""scripts/device/resident_check.py stays importable and ``--help``-able on CPU, and the adapters it writes are
read by SGLang's own ``LoRAConfig`` (the GPU run itself needs an H200: docs/resident_sync.md)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import sglang_or_skip

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "device" / "resident_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("resident_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_help_runs_without_gpu_or_sglang_imports():
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for flag in ("--model", "--rank", "--max-lora-rank", "--iters", "--out", "--session"):
        assert flag in out.stdout
    assert "verl_sglang_lora.runtime.resident.loader.apply" in out.stdout


def test_adapters_it_writes_are_peft_dirs_sglang_reads(tmp_path):
    lora_config = sglang_or_skip("sglang.srt.lora.lora_config")
    mod = _module()
    (tmp_path / "config.json").write_text(json.dumps(dict(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128,
        num_hidden_layers=2)))
    tensors = mod.make_adapter(str(tmp_path), 8, seed=1)
    assert len(tensors) == 2 * 7 * 2
    assert tensors["base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight"].shape == (32, 8)
    path = mod.save_peft(tmp_path / "adapter", tensors, rank=8, alpha=16)
    cfg = lora_config.LoRAConfig(path)
    assert (cfg.r, cfg.lora_alpha, sorted(cfg.target_modules)) == (8, 16, sorted(mod.TARGETS))
    assert mod.LOADER == "verl_sglang_lora.runtime.resident.loader.apply"
    # the loader path resolves the way SGLang's dynamic_import resolves it
    module, func = mod.LOADER.rsplit(".", 1)
    assert callable(getattr(importlib.import_module(module), func))



