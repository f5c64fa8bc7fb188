"""Each guard and resolver fed an input that really has the defect it guards against (the mutation audit's
survivors): a checkpoint with more layers than the model serves, a packed LoRA module whose checkpoint lacks one
of its parts, a wrapper name in the middle of a path, the strings a YAML or a JSON export gives for booleans, and the
rollout guards on verl's own composed config."""

from __future__ import annotations

import math

import pytest

from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config, trainer_scaling
from verl_sglang_lora.sglang_contract.weight_names import ModelWeightNames, UnknownWeightNameError

LAYER0 = "model.layers.{i}.self_attn.{p}.weight"


def _names(layers: int, projections=("q_proj", "k_proj", "v_proj", "o_proj")) -> frozenset[str]:
    return frozenset(LAYER0.format(i=i, p=p) for i in range(layers) for p in projections)


def test_a_layer_the_checkpoint_has_but_the_model_does_not_serve_is_refused() -> None:
    """An MTP-style extra layer: the checkpoint holds layer 2, the served model has 2 decoder layers (0 and 1), so
    SGLang's LoRA pool has no layer 2 to put it in."""
    names = ModelWeightNames(_names(3), num_layers=2)
    assert names.resolve_lora("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight")[2] == "A"
    with pytest.raises(UnknownWeightNameError, match="names layer 2 but the model has 2 layers"):
        names.resolve_lora("base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight")


def test_a_packed_module_needs_every_part_in_the_checkpoint() -> None:
    """A LoRA on SGLang's packed qkv_proj resolves only where the checkpoint has q, k and v; a checkpoint without
    k_proj (as a wrong model path would give) is refused, not half-matched."""
    full = ModelWeightNames(_names(1), num_layers=1)
    assert full.resolve_lora("base_model.model.model.layers.0.self_attn.qkv_proj.lora_B.weight")[1].endswith("qkv_proj")
    no_k = ModelWeightNames(_names(1, ("q_proj", "v_proj", "o_proj")), num_layers=1)
    with pytest.raises(UnknownWeightNameError, match="not a parameter of the served model"):
        no_k.resolve_lora("base_model.model.model.layers.0.self_attn.qkv_proj.lora_B.weight")


@pytest.mark.parametrize("wrapper", ["._checkpoint_wrapped_module.", "._fsdp_wrapped_module.", "._orig_mod."])
def test_wrapper_levels_in_the_middle_of_a_path_are_dropped(wrapper: str) -> None:
    names = ModelWeightNames(_names(1), num_layers=1)
    raw = f"base_model.model.model.layers.0{wrapper}self_attn.q_proj.lora_A.weight"
    assert names.resolve_lora(raw)[0] == "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"


@pytest.mark.parametrize("false", ["false", "False", "0", False, 0, None])
def test_boolean_strings_are_read_as_their_value(false) -> None:
    """A peft config from YAML or a JSON export carries use_rslora as a string: "false" must not turn rsLoRA on."""
    config = {"r": 16, "lora_alpha": 32, "target_modules": ["q_proj"], "peft_type": "LORA", "use_rslora": false}
    assert trainer_scaling(config) == 2.0
    assert normalize_peft_config(config)["lora_alpha"] == 32
    on = {**config, "use_rslora": "true"}
    assert trainer_scaling(on) == pytest.approx(32 / math.sqrt(16))


def test_the_canary_bound_carries_the_lora_scaling() -> None:
    """A non-zero adapter whose scaling makes its weight delta too small to move bf16 log-probs is inconclusive, not
    a failure; the same tensors at a real scaling that change nothing stop the run."""
    import torch

    from verl_sglang_lora.runtime.sync.canary import CanaryError, CanaryExpectation, judge_canary

    prefix = "base_model.model.model.layers.0.self_attn.q_proj"
    tensors = {f"{prefix}.lora_A.weight": torch.full((8, 64), 0.1), f"{prefix}.lora_B.weight": torch.full((64, 8), 0.1)}
    unmoved = {"max_abs_diff": 0.0, "tokens": 16.0}
    assert judge_canary(unmoved, CanaryExpectation.of(tensors, scaling=1e-6), "tiny") == "inconclusive"
    with pytest.raises(CanaryError, match="did not change the served log-probs"):
        judge_canary(unmoved, CanaryExpectation.of(tensors, scaling=2.0), "real")


def test_each_prompt_of_a_request_is_given_the_adapter_it_reads() -> None:
    """A batch request names one adapter per prompt; the prompts that leave it to the plugin (None, or verl's fixed
    name) get the active version, explicit choices are kept and leased by name."""
    from verl_sglang_lora.runtime.sync.versions import (VERL_FIXED_ADAPTER_NAME, explicit_adapters, fill_adapter,
                                                         wants_active)

    batch = [None, "eval_adapter", VERL_FIXED_ADAPTER_NAME]
    assert explicit_adapters(batch) == ["eval_adapter"] and wants_active(batch)
    assert fill_adapter(batch, "verl_lora_v3") == ["verl_lora_v3", "eval_adapter", "verl_lora_v3"]
    assert fill_adapter(VERL_FIXED_ADAPTER_NAME, "verl_lora_v3") == "verl_lora_v3"
    assert fill_adapter("eval_adapter", "verl_lora_v3") == "eval_adapter" and not wants_active("eval_adapter")
    assert fill_adapter([None, None], None) == [None, None]  # before the first sync: the base policy, said once
