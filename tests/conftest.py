"""Shared fixtures: a tiny real Qwen3 checkpoint (safetensors) built locally with transformers."""

from __future__ import annotations

import json
from pathlib import Path

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
