"""Trainer names resolved against a real checkpoint's names; peft's own LoRA state-dict names accepted."""

from __future__ import annotations

import pytest

from verl_sglang_lora.sglang_contract.weight_names import (
    ModelWeightNames,
    UnknownWeightNameError,
    check_lora_pairs,
    safetensors_names,
)


def test_reads_names_from_safetensors_headers(tiny_qwen3):
    names = safetensors_names(tiny_qwen3)
    assert "model.layers.0.self_attn.q_proj.weight" in names and "lm_head.weight" in names


def test_fsdp_vllm_style_base_layer_names_resolve(tiny_qwen3):
    names = ModelWeightNames.from_model_path(tiny_qwen3)
    # verl's FSDP engine inserts vLLM's wrapper level (seed layer 6)
    assert names.resolve_base("model.layers.0.self_attn.q_proj.base_layer.weight") == "model.layers.0.self_attn.q_proj.weight"
    assert names.resolve_base("base_model.model.model.layers.1.mlp.gate_proj.base_layer.weight") == "model.layers.1.mlp.gate_proj.weight"
    assert names.resolve_base("_fsdp_wrapped_module.model.norm.weight") == "model.norm.weight"


def test_unknown_and_packed_base_names_are_errors(tiny_qwen3):
    names = ModelWeightNames.from_model_path(tiny_qwen3)
    with pytest.raises(UnknownWeightNameError, match="not a parameter of the served model"):
        names.resolve_base("model.layers.0.self_attn.qq_proj.weight")
    with pytest.raises(UnknownWeightNameError, match="already packed"):
        names.resolve_base("model.layers.0.self_attn.qkv_proj.weight")


def test_peft_state_dict_names_resolve(tiny_qwen3):
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    state = peft.get_peft_model_state_dict(lora)
    names = ModelWeightNames.from_model_path(tiny_qwen3)
    resolved = [names.resolve_lora(n) for n in state]
    assert len(resolved) == 2 * 2 * 7  # 2 layers x 7 projections x (A, B)
    check_lora_pairs([(m, ab) for _, m, ab in resolved])
    sent = {s for s, _, _ in resolved}
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in sent
    # the live module tree's names (adapter segment, wrapper) resolve to the same names
    live = [n for n, _ in lora.named_parameters() if "lora_" in n]
    assert {names.resolve_lora(n)[0] for n in live} == sent


def test_lora_name_errors(tiny_qwen3):
    names = ModelWeightNames.from_model_path(tiny_qwen3)
    with pytest.raises(UnknownWeightNameError, match="layer 7"):
        names.resolve_lora("base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight")
    with pytest.raises(UnknownWeightNameError, match="not a parameter"):
        names.resolve_lora("base_model.model.model.layers.0.self_attn.qq_proj.lora_A.weight")
    with pytest.raises(UnknownWeightNameError, match="not a LoRA tensor"):
        names.resolve_lora("model.layers.0.self_attn.q_proj.weight")
    with pytest.raises(UnknownWeightNameError, match="missing lora_A or lora_B"):
        check_lora_pairs([("m.q_proj", "A")])
