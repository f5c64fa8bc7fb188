"""The refusals of the resident setting. What each SGLang release supports is read from the release's own code by
the compat probe (tests/test_compat_matrix_on_cpu.py::test_resident_support_per_release)."""

from __future__ import annotations

import pytest

from tests.conftest import fake_nvidia_smi


def test_resident_setting_on_refuses_where_it_cannot_run() -> None:
    from verl_sglang_lora.runtime.resident.support import resident_enabled

    with pytest.raises(ValueError, match=r"engine_kwargs\.sglang_lora\.resident=on.*Fix: set it to auto"):
        resident_enabled("on", 2)
    with pytest.raises(ValueError, match=r"resident must be one of"):
        resident_enabled("sometimes", 1)
    assert resident_enabled("off", 1) is False and resident_enabled("auto", 2) is False


def test_a_base_the_weight_update_session_would_reprocess_is_named() -> None:
    """SGLang >= 0.5.23 re-processes the base weights at every session's end: quantized or MoE bases keep the
    versioned loads there (real transformers configs; the rollout config as verl's Hydra tree holds it)."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf
    from transformers import Qwen3Config, Qwen3MoeConfig

    from verl_sglang_lora.runtime.resident.support import session_unsafe_base, unsupported_reason

    rollout = OmegaConf.create({"quantization": None, "engine_kwargs": {"sglang": {"attention_backend": "triton"}}})
    dense = SimpleNamespace(hf_config=Qwen3Config())
    assert session_unsafe_base(dense, rollout) is None
    moe = session_unsafe_base(SimpleNamespace(hf_config=Qwen3MoeConfig()), rollout)
    assert moe is not None and "mixture of experts (num_experts=" in moe
    fp8 = Qwen3Config()
    fp8.quantization_config = {"quant_method": "fp8"}
    assert "checkpoint is quantized" in session_unsafe_base(SimpleNamespace(hf_config=fp8), rollout)
    for overrides in ({"quantization": "fp8"}, {"engine_kwargs": {"sglang": {"torchao_config": "int4wo-128"}}}):
        quantized = OmegaConf.merge(rollout, OmegaConf.create(overrides))
        assert "the rollout quantizes the base" in session_unsafe_base(dense, quantized)
    # the reason only matters where SGLang wraps updates in sessions; elsewhere the in-place path runs as before
    reason = unsupported_reason("auto", 1, base_unsafe=moe)
    assert reason is None or ("weight-update session" in reason and "mixture of experts" in reason)


def test_a_client_writes_only_the_slot_the_server_does_not_serve():
    """One serialization and stream sync per sync instead of two; unknown served slot: both, the server picks."""
    from verl_sglang_lora.runtime.resident.requests import SLOTS, write_targets

    assert write_targets(SLOTS[0]) == (SLOTS[1],) and write_targets(SLOTS[1]) == (SLOTS[0],)
    assert write_targets(None) == SLOTS and write_targets("verl_lora_v7") == SLOTS  # after an ordinary load


def test_mirror_bytes_is_the_adapters_flat_size() -> None:
    """One slot's read-back mirror is the adapter's flat buffer: Qwen3-0.6B r32 all-linear (28 layers, hidden 1024,
    16 x 128 query heads, 8 kv heads, MLP 3072) is 28 x 32 x 22,528 bf16 elements; attention-only LoRA is less."""
    from verl_sglang_lora.runtime.resident.support import mirror_bytes

    qwen3_06b = {"hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16, "head_dim": 128,
                 "num_key_value_heads": 8, "intermediate_size": 3072}
    assert mirror_bytes(qwen3_06b, 32, "all-linear") == 28 * 32 * 22528 * 2 == 40_370_176
    attention = (3072 + 2048 + 2048 + 3072) * 32 * 28 * 2
    assert mirror_bytes(qwen3_06b, 32, ["q_proj", "k_proj", "v_proj", "o_proj"]) == attention
    assert mirror_bytes({"model_type": "unknown"}, 32, "all-linear") is None


def test_the_slots_memory_comes_off_sglangs_fraction_of_the_gpu_nvidia_smi_reports(tiny_qwen3, tmp_path, monkeypatch,
                                                                                   caplog) -> None:
    """The GPU's size is read as SGLang reads it for its own defaults (nvidia-smi, its smallest GPU), never through
    torch.cuda.mem_get_info, which would create a CUDA context in the server actor; the real ServerArgs is built."""
    import logging
    import os

    import torch

    sa = pytest.importorskip("sglang.srt.server_args")
    from verl_sglang_lora.verl_glue import server_args as glue

    def no_context(*_: object) -> None:
        raise AssertionError("torch.cuda.mem_get_info would create a CUDA context in the server actor")

    monkeypatch.setattr(torch.cuda, "mem_get_info", no_context)
    bin_dir = fake_nvidia_smi(tmp_path, "printf '81559\\n40960\\n'")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert glue._gpu_total_bytes() == 40960 * 2**20
    reserve = 2048 * 2**20  # two mirrors of a 1 GiB adapter
    assert glue.reserve_memory({"mem_fraction_static": 0.5}, reserve, 40960 * 2**20)["mem_fraction_static"] == 0.45
    make = glue.wrap_server_args(sa.ServerArgs, {}, reserve_bytes=reserve)
    built = make(model_path=str(tiny_qwen3), device="cpu", mem_fraction_static=0.5, context_length=256)
    assert built.mem_fraction_static == 0.45

    # no nvidia-smi and no CUDA: the fraction stays and the launch log says what that leaves out
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert glue._gpu_total_bytes() == 0
    with caplog.at_level(logging.WARNING, logger=glue.logger.name):
        assert glue.reserve_memory({"mem_fraction_static": 0.5}, reserve, 0) == {"mem_fraction_static": 0.5}
    assert "total memory is unknown here" in caplog.text and "2048.0 MiB" in caplog.text
