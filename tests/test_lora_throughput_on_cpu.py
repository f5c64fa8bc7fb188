"""The LoRA-throughput benchmark's CPU-checkable parts: backend discovery, arithmetic, table and JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys

import pytest

from tests.conftest import per_release_fixture, release_result
from verl_sglang_lora.releases import SGLANG_RELEASES
from verl_sglang_lora.tools import lora_throughput as lt


_DISCOVER = """
import dataclasses, json, sglang
from verl_sglang_lora.sglang_contract.lora_backends import declared_lora_backends, plugin_lora_backend
from sglang.srt.server_args import ServerArgs
try:
    declared = dataclasses.fields(ServerArgs)
except TypeError:  # a msgspec struct
    import msgspec
    declared = msgspec.structs.fields(ServerArgs)
choices, default = declared_lora_backends()
# where the release refuses triton_v2 (0.5.23's own check), against the plugin's reading of the same arguments
from types import SimpleNamespace
from verl_sglang_lora.sglang_contract.lora_backends import triton_v2_refusal
try:
    from sglang.srt.arg_groups.lora_hook import _check_v2_lora_modes
except ImportError:
    _check_v2_lora_modes = None
refusals = []
for case in ({"attn_dp_size": 2}, {"attn_dp_size": 1}, {"enable_two_batch_overlap": True}, {"enable_pdmux": True}, {}):
    cfg = SimpleNamespace(**{"attn_dp_size": 1, "enable_pdmux": False, "enable_two_batch_overlap": False, **case})
    if _check_v2_lora_modes is None:
        break
    try:
        _check_v2_lora_modes(cfg, "--lora-backend triton_v2")
        sglang_refuses = False
    except ValueError:
        sglang_refuses = True
    refusals.append([case, sglang_refuses, triton_v2_refusal(case) is not None])
# expert LoRA: whether the release's MoE LoRA layer pairs triton_v2 with a LoRA MoE runner only, and what the plugin
# launches an expert-LoRA server (and a dense one) with
import pathlib
from verl_sglang_lora.sglang_contract.lora_backends import chosen_backend
layers = pathlib.Path(sglang.__file__).parent / "srt" / "lora" / "layers.py"
pairs = "must pair --lora-backend triton_v2 with" in layers.read_text()
backends = {"expert": chosen_backend(plugin_lora_backend(), {"experts_shared_outer_loras": False}),
            "expert_lora_runner": chosen_backend(plugin_lora_backend(), {"experts_shared_outer_loras": False,
                                                                         "moe_runner_backend": "lora_triton"}),
            "dense": chosen_backend(plugin_lora_backend(), {})}
print(json.dumps({"version": sglang.__version__, "choices": choices, "default": default, "pairs": pairs,
                  "backends": backends, "plugin": plugin_lora_backend(), "refusals": refusals,
                  "field_default": next(f.default for f in declared if f.name == "lora_backend")}))
"""


discovered = per_release_fixture(SGLANG_RELEASES, ["-c", _DISCOVER], with_root=True)


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_discovery_reads_each_releases_own_cli(discovered, version) -> None:
    """Choices and default from the release's parser: a dataclass ServerArgs (<= 0.5.18) or a msgspec struct (0.5.23,
    where ``dataclasses.fields`` raises); the default is the field's, what a launch without the flag gets."""
    out = release_result(discovered, version)
    assert out["version"] == version
    assert out["default"] == out["field_default"] and out["default"] in out["choices"]
    assert {"triton", "csgmv"} <= set(out["choices"])
    # the plugin's launch default: the first of FASTEST_FIRST the release declares, except where SGLang fixes the
    # `all` target set at launch per backend (0.5.8: SGLang's own default stays)
    assert out["plugin"] == (None if version == "0.5.8" else
                             "triton_v2" if "triton_v2" in out["choices"] else "triton")
    # the plugin refuses triton_v2 exactly where the release's own check does (releases that have triton_v2)
    assert bool(out["refusals"]) is ("triton_v2" in out["choices"])
    for case, sglang_refuses, plugin_refuses in out["refusals"]:
        assert sglang_refuses is plugin_refuses, case


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_expert_lora_launches_with_a_backend_its_moe_layer_accepts(discovered, version) -> None:
    """A release whose MoE LoRA layer pairs triton_v2 only with a LoRA MoE runner (0.5.23, FusedMoEWithLoRA) gets
    triton for expert LoRA on the MoE runner SGLang picks, triton_v2 with a LoRA runner or without expert LoRA."""
    out = release_result(discovered, version)
    backends = out["backends"]
    assert out["pairs"] is ("triton_v2" in out["choices"])  # the check exists exactly where triton_v2 does
    assert backends["dense"] == out["plugin"] and backends["expert_lora_runner"] == out["plugin"]
    assert backends["expert"] == ("triton" if out["plugin"] == "triton_v2" else out["plugin"])


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
    assert lines[0].startswith("| backend | batch | base tok/s | adapter tok/s | adapter/base")
    assert "| triton | 64 | 16384.0 | 13107.2 | 0.800 | - | yes |" in table  # no LoRA-off row: no second ratio
    assert "RuntimeError: no NPU / here" in table
    assert lines[-1].startswith("fastest at batch 64: csgmv")
    # the engine without LoRA: its base is the plain model's, each adapter is also set against it
    plain = lt.make_row(lt.LORA_OFF, 64, 256, [0.5], None)
    assert plain["adapter_over_base"] is None and plain["adapter_changes_logprobs"] is None
    assert lt.fastest([*rows, plain]) == "csgmv"  # never the fastest: it serves no adapter
    with_plain = lt.format_table([rows[0], plain])
    assert "| triton | 64 | 16384.0 | 13107.2 | 0.800 | 0.400 | yes |" in with_plain
    assert "| lora off | 64 | 32768.0 | - | - | - | - |" in with_plain
    doc = json.loads(json.dumps(lt.report(rows, {"shape": "qwen3-8b"})))
    assert doc["fastest"] == "csgmv" and doc["shape"] == "qwen3-8b" and len(doc["rows"]) == 3
    assert doc["fastest_by_batch"] == {"64": "csgmv"}


def test_the_adapters_cost_per_decode_step() -> None:
    rows = synthetic_rows()
    # (1.25 - 1.0) s per batch over 256 new tokens, and nothing for a row without both timings
    assert lt.adapter_ms_per_step(rows[0], 256) == pytest.approx(250 / 256)
    assert lt.adapter_ms_per_step(lt.make_row("triton", 64, 256, [1.0, 3.0], [2.5, 2.5], True), 100) == 5.0
    assert lt.adapter_ms_per_step(rows[2], 256) is None
    table = lt.format_table(rows, 256)
    assert table.splitlines()[0].endswith("| error | adapter ms per decode step |")
    assert "| triton | 64 | 16384.0 | 13107.2 | 0.800 | - | yes |  | 0.977 |" in table
    assert "| ascend | 64 | - | - | - | - | - | RuntimeError: no NPU / here | - |" in table
    assert "adapter ms" not in lt.format_table(rows)  # a record without its gen_len keeps the old columns


@pytest.mark.parametrize("modules", ["all-linear", ["q_proj", "k_proj", "v_proj", "o_proj"], ["down_proj"]])
def test_adapter_bytes_are_what_peft_builds_on_the_shape(modules) -> None:
    import peft
    import torch
    import transformers

    from verl_sglang_lora.tools.benchmarks import shape_config

    with torch.device("meta"):  # the 8B shape's modules with no memory behind them
        model = transformers.AutoModelForCausalLM.from_config(shape_config("qwen3-8b"), torch_dtype=torch.bfloat16)
    model = peft.get_peft_model(model, peft.LoraConfig(r=32, lora_alpha=64, target_modules=modules))
    built = sum(p.numel() for n, p in model.named_parameters() if ".lora_" in n)  # PEFT keeps them in fp32
    assert lt.adapter_bytes_per_step("qwen3-8b", 32, modules) == 2 * built  # SGLang serves them in bf16


def test_each_batch_size_against_the_lora_off_engine_of_its_own_size() -> None:
    rows = [lt.make_row("triton", 64, 256, [1.0], [1.25], True), lt.make_row("csgmv", 64, 256, [1.0], [1.3], True),
            lt.make_row("triton", 256, 256, [2.0], [2.1], True), lt.make_row("csgmv", 256, 256, [2.0], [2.0], True),
            lt.make_row(lt.LORA_OFF, 64, 256, [0.5], None), lt.make_row(lt.LORA_OFF, 256, 256, [1.0], None)]
    table = lt.format_table(rows)
    assert "| triton | 256 | 32768.0 | 31207.6 | 0.952 | 0.476 | yes |" in table  # against the 256 LoRA-off row
    assert "| triton | 64 | 16384.0 | 13107.2 | 0.800 | 0.400 | yes |" in table
    assert table.splitlines()[-2:] == ["fastest at batch 64: triton (goal: adapter/base >= 0.85)",
                                       "fastest at batch 256: csgmv (goal: adapter/base >= 0.85)"]
    doc = lt.report(rows, {})
    assert doc["fastest_by_batch"] == {"64": "triton", "256": "csgmv"} and doc["fastest"] == "triton"
    assert lt.parse_args([]).batch == [64] and lt.parse_args(["--batch", "64", "--batch", "256"]).batch == [64, 256]
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


class _Engine:
    """Stand-in for ``sglang.Engine`` (the loop and error rows only; the wire is SGLang's own engine, on a GPU):
    generation fails once a batch is larger than ``fail_above``."""

    fail_above = 10**9
    shut = 0

    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs

    def load_lora_adapter(self, name: str, path: str) -> dict:
        return {"success": True, "error_message": ""}

    def generate(self, input_ids, sampling_params, lora_path=None, **kw) -> dict:
        if isinstance(input_ids[0], list) and len(input_ids) > self.fail_above:
            raise RuntimeError(f"CUDA out of memory at batch {len(input_ids)}")
        shift = 0.5 if lora_path else 0.0  # the adapter changes the prompt's log-probs
        return {"meta_info": {"input_token_logprobs": [[-1.0 - shift, 0]], "output_token_logprobs": [[-2.0, 1]]}}

    def shutdown(self) -> None:
        type(self).shut += 1


def test_every_batch_size_on_one_engine_and_an_error_row_from_the_size_it_hit(tmp_path, monkeypatch) -> None:
    import sglang

    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 100}))
    monkeypatch.setattr(sglang, "Engine", _Engine, raising=False)
    args = lt.parse_args(["--batch", "4", "--batch", "16", "--batch", "64", "--iters", "2", "--rank", "8"])
    rows = lt.measure_backend("triton", tmp_path, tmp_path, args)
    assert [(r["batch"], r["error"], r["adapter_changes_logprobs"]) for r in rows] == [
        (4, None, True), (16, None, True), (64, None, True)]
    assert all(len(r["base_s"]) == 2 and len(r["adapter_s"]) == 2 for r in rows) and _Engine.shut == 1
    monkeypatch.setattr(_Engine, "fail_above", 8)
    rows = lt.measure_backend("triton", tmp_path, tmp_path, args)
    assert [(r["batch"], r["base_tok_s"] is not None) for r in rows] == [(4, True), (16, False), (64, False)]
    assert rows[0]["error"] is None
    assert rows[1]["error"] == rows[2]["error"] == "RuntimeError: CUDA out of memory at batch 16"
    assert _Engine.shut == 2  # shut down after the error too
    plain = lt.measure_backend(lt.LORA_OFF, tmp_path, tmp_path, args)
    assert [(r["batch"], r["adapter_s"], r["adapter_changes_logprobs"], r["error"] is None) for r in plain] == [
        (4, None, None, True), (16, None, None, False), (64, None, None, False)]
