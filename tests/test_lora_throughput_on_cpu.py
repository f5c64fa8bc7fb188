"""The LoRA-throughput benchmark's CPU-checkable parts: backend discovery, arithmetic, table and JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys

import pytest

from verl_sglang_lora.tools import lora_throughput as lt


def argparse_choices() -> tuple[list[str] | None, str]:
    """The ``--lora-backend`` choices and default as SGLang's own parser declares them."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    action = next(a for a in parser._actions if "--lora-backend" in a.option_strings)
    default = {f.name: f.default for f in dataclasses.fields(ServerArgs)}["lora_backend"]
    return (list(action.choices) if action.choices else None), default


def test_discovery_matches_installed_sglang() -> None:
    choices, default = argparse_choices()
    found, found_default = lt.declared_backends()
    assert found_default == default
    assert found == (choices or [default])
    assert default in found


def test_select_backends() -> None:
    assert lt.select_backends(["a", "b", "c"], None) == ["a", "b", "c"]
    assert lt.select_backends(["a", "b", "c"], ["c", "a"]) == ["a", "c"]
    with pytest.raises(SystemExit):
        lt.select_backends(["a"], ["z"])


def test_tokens_per_s() -> None:
    assert lt.tokens_per_s(64, 256, [2.0, 2.0]) == pytest.approx(64 * 256 / 2.0)
    assert lt.tokens_per_s(1, 100, [0.5, 1.5]) == pytest.approx(100.0)
    with pytest.raises(ValueError):
        lt.tokens_per_s(1, 1, [])


def synthetic_rows() -> list[dict]:
    return [lt.make_row("triton", 64, 256, [1.0], [1.25], True),          # 0.8
            lt.make_row("csgmv", 64, 256, [1.0], [1.1], True),            # ~0.909
            lt.make_row("ascend", 64, 256, None, None, None, error="RuntimeError: no NPU | here")]


def test_rows_fastest_table_json() -> None:
    rows = synthetic_rows()
    assert rows[0]["base_tok_s"] == 16384.0 and rows[0]["adapter_tok_s"] == 13107.2
    assert rows[0]["adapter_over_base"] == 0.8 and rows[0]["meets_goal"] is False
    assert rows[1]["meets_goal"] is True
    assert lt.fastest(rows) == "csgmv"
    assert lt.fastest(rows[2:]) is None
    ignored = lt.make_row("csgmv", 64, 256, [1.0], [1.0], False)  # as fast as base: the adapter was not applied
    assert lt.fastest([rows[0], ignored]) == "triton"
    table = lt.format_table(rows)
    lines = table.splitlines()
    assert lines[0].startswith("| backend | base tok/s | adapter tok/s | adapter/base")
    assert "| triton | 16384.0 | 13107.2 | 0.800 | - | yes |" in table  # no LoRA-off row: no second ratio
    assert "RuntimeError: no NPU / here" in table
    assert lines[-1].startswith("fastest: csgmv")
    # the engine without LoRA: its base is the plain model's, each adapter is also set against it
    plain = lt.make_row(lt.LORA_OFF, 64, 256, [0.5], None)
    assert plain["adapter_over_base"] is None and plain["adapter_changes_logprobs"] is None
    assert lt.fastest([*rows, plain]) == "csgmv"  # never the fastest: it serves no adapter
    with_plain = lt.format_table([rows[0], plain])
    assert "| triton | 16384.0 | 13107.2 | 0.800 | 0.400 | yes |" in with_plain
    assert "| lora off | 32768.0 | - | - | - | - |" in with_plain
    doc = json.loads(json.dumps(lt.report(rows, {"shape": "qwen3-8b"})))
    assert doc["fastest"] == "csgmv" and doc["shape"] == "qwen3-8b" and len(doc["rows"]) == 3
    assert doc["goal_adapter_over_base"] == 0.85


def test_help_exits_zero() -> None:
    out = subprocess.run([sys.executable, "-m", "verl_sglang_lora.tools.lora_throughput", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--backend" in out.stdout and "--gen-len" in out.stdout


def test_engine_args_are_server_args_fields() -> None:
    """``--engine-arg`` pairs reach ``sglang.Engine`` as keywords its ServerArgs declares (a GPU without FA3 needs
    ``attention_backend=triton``)."""
    from sglang.srt.server_args import ServerArgs

    from verl_sglang_lora.benchmarks import engine_args

    args = lt.parse_args(["--engine-arg", "attention_backend=triton", "--engine-arg", "sampling_backend=pytorch"])
    kwargs = engine_args(args.engine_arg, cuda_graph=True)
    fields = {f.name for f in dataclasses.fields(ServerArgs)}
    assert kwargs == {"disable_cuda_graph": False, "attention_backend": "triton", "sampling_backend": "pytorch"}
    assert set(kwargs) <= fields


def test_attention_only_adapter_is_what_sglang_reads(tmp_path) -> None:
    """``--target-modules q_proj,k_proj,v_proj,o_proj`` writes only those projections, and SGLang's own LoRA config
    reader sees exactly them (the launch args name them too)."""
    import transformers
    from safetensors import safe_open
    from sglang.srt.lora.lora_config import LoRAConfig

    from verl_sglang_lora.runtime.lora_plan import lora_plan
    from verl_sglang_lora.sglang_contract.launch_args import lora_launch_args

    model = tmp_path / "model"
    transformers.Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=16, vocab_size=128).save_pretrained(model)
    modules = lt.target_modules("q_proj,k_proj,v_proj,o_proj")
    out = lt.write_adapter(model, 8, tmp_path / "adapter", modules)
    with safe_open(str(out / "adapter_model.safetensors"), "pt") as f:
        names = list(f.keys())
    assert len(names) == 2 * 2 * 4  # layers x (A, B) x projections
    assert {n.split(".")[-3] for n in names} == set(modules)
    assert set(LoRAConfig(str(out)).target_modules) == set(modules)
    launch = lora_launch_args(lora_plan({"lora_rank": 8, "target_modules": modules, "lora": {}}))
    assert set(launch["lora_target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    full = lt.write_adapter(model, 8, tmp_path / "full")
    with safe_open(str(full / "adapter_model.safetensors"), "pt") as f:
        assert {n.split(".")[-3] for n in f.keys()} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                         "up_proj", "down_proj"}
