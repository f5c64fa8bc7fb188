"""The benchmark's inputs, checked on CPU before a GPU run depends on them: the checkpoint it serves SGLang
(real weights, not ``--load-format dummy``, under which SGLang refuses disk adapter loads) and the table it prints
when one path fails."""

from __future__ import annotations

import asyncio

import pytest

from verl_sglang_lora.tools import benchmarks

TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, vocab_size=512, tie_word_embeddings=True)


def test_checkpoint_loads_in_transformers_with_every_parameter(tmp_path, monkeypatch) -> None:
    transformers = pytest.importorskip("transformers")
    monkeypatch.setitem(benchmarks.SHAPES, "tiny", TINY)
    out = benchmarks.write_checkpoint("tiny", tmp_path / "m", shard_bytes=64 << 10)
    assert len(list(out.glob("*.safetensors"))) > 1  # sharded
    model, info = transformers.AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert all(float(p.abs().sum()) == 0.0 for p in model.parameters())
    # the names SGLang's weight map is resolved against are the checkpoint's
    names = benchmarks.model_names(out)
    _, module, ab = names.resolve_lora("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight")
    assert (module, ab) == ("model.layers.1.mlp.down_proj", "B")


def test_a_failing_path_is_a_table_row_not_the_end_of_the_run(capsys) -> None:
    from verl_sglang_lora.sglang_contract.errors import SGLangRequestError

    async def disk_load():
        raise SGLangRequestError("load_lora_adapter", 400, '{"error_message":"DUMMY load_format"}')

    async def plugin_load():
        return [12.0, 10.0, 11.0]

    plugin = asyncio.run(benchmarks.guarded(plugin_load()))
    disk = asyncio.run(benchmarks.guarded(disk_load()))
    result = {"shape": "tiny", "adapter_MiB": 1.0, "tensors": 4, "plugin_ms": benchmarks.summary(*plugin),
              "plugin_wire": "flattened_bucket", "plugin_phases_p50_ms": {"collect": 4.0, "load": 6.0},
              "plugin_per_tensor_ms": benchmarks.summary([20.0, 21.0], None),
              "disk_ms": benchmarks.summary(*disk), "verl_stock_ms": benchmarks.summary([], "TypeError: x"),
              "base_sync": {"error": "not run"}}
    assert result["plugin_ms"] == {"p50": 11.0, "p95": 12.0, "n": 3}
    benchmarks.print_table([result], 80.0)
    table = capsys.readouterr().out
    assert "| plugin (flattened_bucket, versioned) | 11.0 | 12.0 |" in table
    assert "| plugin (per-tensor dict, versioned) | 20.0 | 21.0 |" in table
    assert "tiny plugin phases, p50 ms: {'collect': 4.0, 'load': 6.0}" in table
    assert "save to disk + /load_lora_adapter | fails: SGLangRequestError" in table and "DUMMY load_format" in table
    assert "verl stock ServerAdapter | fails: TypeError: x" in table


def test_the_disk_adapter_folder_is_what_sglang_reads(tmp_path, monkeypatch) -> None:
    """The folder every disk path writes: SGLang's own adapter reader takes its config and every tensor back."""
    pytest.importorskip("transformers")
    from safetensors.torch import load_file

    from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config

    monkeypatch.setitem(benchmarks.SHAPES, "tiny", TINY)
    model = benchmarks.write_checkpoint("tiny", tmp_path / "m", shard_bytes=64 << 10)
    adapter = benchmarks.random_adapter(model, 4, seed=0)
    config = normalize_peft_config({"r": 4, "lora_alpha": 8, "target_modules": "all-linear"})
    (tmp_path / "a").mkdir()
    out = benchmarks.save_peft_adapter(adapter, config, tmp_path / "a")
    back = load_file(str(out / "adapter_model.safetensors"))
    assert set(back) == {n for n, _ in adapter}
    assert all(back[n].equal(t) for n, t in adapter)
    from sglang.srt.lora.lora_config import LoRAConfig

    served = LoRAConfig(str(out))
    assert served.r == 4 and served.lora_alpha == 8
