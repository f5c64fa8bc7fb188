"""Expert LoRA (PEFT ``target_parameters`` on transformers 5's fused MoE experts) converted for SGLang
(``sglang_contract/expert_lora.py``): the layout against PEFT's own deltas, and each release's real LoRA pool loaded
with the converted tensors (``tests/expert_pool_probe.py``), a wrong conversion failing the same comparison."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import per_release_fixture, release_result
from tests.expert_pool_probe import E, H, I, R, peft_adapter
from verl_sglang_lora.sglang_contract.expert_lora import (
    ExpertDims,
    ExpertLoRAError,
    expert_deltas,
    to_sglang_experts,
)

MOE_RELEASES = ("0.5.12", "0.5.18", "0.5.23")  # those with MoE LoRA code (target_modules.sglang_serves_expert_lora)
DIMS = ExpertDims(E, H, I)
BF16_REL = 1e-2  # SGLang pre-scales the expert B by alpha/r in bf16: the pool's delta rounds (measured 2.1e-3..2.8e-3)


@pytest.fixture(scope="module")
def adapter():
    return peft_adapter()


def test_conversion_reproduces_peft_deltas_and_names(adapter) -> None:
    state, deltas, cfg = adapter
    out = to_sglang_experts(state, DIMS)
    scaling = cfg["lora_alpha"] / cfg["r"]
    experts = sorted(k for k in out if ".mlp.experts." in k)
    assert experts == sorted(f"base_model.model.model.layers.{i}.mlp.experts.{p}.lora_{ab}.weight"
                             for i in range(2) for p in ("gate_up_proj", "down_proj") for ab in "AB")
    assert {k: v for k, v in out.items() if ".mlp.experts." not in k}.keys() == \
        {k for k in state if ".mlp.experts." not in k}  # attention tensors pass through untouched
    for i in range(2):
        for proj, (fan_in, fan_out) in (("gate_up_proj", (H, 2 * I)), ("down_proj", (I, H))):
            a = out[f"base_model.model.model.layers.{i}.mlp.experts.{proj}.lora_A.weight"]
            b = out[f"base_model.model.model.layers.{i}.mlp.experts.{proj}.lora_B.weight"]
            assert a.shape == (E, R, fan_in) and b.shape == (E, fan_out, R)
            got = scaling * (b.float() @ a.float())  # SGLang's per-expert math, scaling on B
            assert torch.allclose(got, deltas[(i, proj)], atol=1e-5), proj


def test_expert_deltas_is_peft_layout(adapter) -> None:
    state, deltas, cfg = adapter
    a = state["base_model.model.model.layers.0.mlp.experts.lora_A.weight"]
    b = state["base_model.model.model.layers.0.mlp.experts.lora_B.weight"]
    scaling = cfg["lora_alpha"] / cfg["r"]
    assert torch.allclose(expert_deltas(a, b, E, scaling), deltas[(0, "down_proj")], atol=1e-5)
    # the other plausible reading of B (expert-major columns) is not PEFT's
    wrong = torch.stack([scaling * b[:, e * R:(e + 1) * R].float() @ a[e * R:(e + 1) * R].float() for e in range(E)])
    assert not torch.allclose(wrong, deltas[(0, "down_proj")], atol=1e-3)


def test_projection_read_from_shapes_not_nesting(adapter) -> None:
    state, _, _ = adapter
    # the wrapper nesting swapped (another registration order): the same conversion
    swapped = {k.replace("experts.base_layer.lora", "experts.TMP").replace("experts.lora", "experts.base_layer.lora")
               .replace("experts.TMP", "experts.lora"): v for k, v in state.items()}
    a, b = to_sglang_experts(state, DIMS), to_sglang_experts(swapped, DIMS)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_broken_expert_tensors_are_refused(adapter) -> None:
    state, _, _ = adapter
    half = {k: v for k, v in state.items() if not k.endswith("layers.0.mlp.experts.lora_B.weight")}
    with pytest.raises(ExpertLoRAError, match="only lora_A"):
        to_sglang_experts(half, DIMS)
    with pytest.raises(ExpertLoRAError, match="matches neither"):
        to_sglang_experts(state, ExpertDims(E, H + 8, I))  # the adapter of another model
    with pytest.raises(ExpertLoRAError, match="not a"):
        to_sglang_experts(state, ExpertDims(E + 1, H, I))  # r*E not divisible
    both_down = dict(state)
    both_down["base_model.model.model.layers.0.mlp.experts.base_layer.lora_A.weight"] = \
        state["base_model.model.model.layers.0.mlp.experts.lora_A.weight"]
    both_down["base_model.model.model.layers.0.mlp.experts.base_layer.lora_B.weight"] = \
        state["base_model.model.model.layers.0.mlp.experts.lora_B.weight"]
    with pytest.raises(ExpertLoRAError, match="two adapters for down_proj"):
        to_sglang_experts(both_down, DIMS)


probes = per_release_fixture(MOE_RELEASES, ["-m", "tests.expert_pool_probe"], with_root=True)
probes_tp2 = per_release_fixture(MOE_RELEASES, ["-m", "tests.expert_pool_probe", "--tp", "2", "--tp-rank", "1"],
                                 with_root=True)


@pytest.mark.parametrize("version", MOE_RELEASES)
@pytest.mark.parametrize("tp", [1, 2])
def test_each_releases_pool_serves_the_converted_experts(probes, probes_tp2, version, tp) -> None:
    out = release_result(probes if tp == 1 else probes_tp2, version)
    assert out["version"] == version and out["tp"][0] == tp
    converted, wrong = out["converted"], out["wrong"]
    assert converted["loaded"], converted.get("error")
    assert converted["buffers"] == ["down_proj_moe", "gate_up_proj_moe"]
    assert len(converted["rel_err"]) == 4 and max(converted["rel_err"].values()) < BF16_REL
    assert wrong["loaded"] and min(wrong["rel_err"].values()) > 0.5  # the comparison catches a wrong layout


@pytest.mark.parametrize("version", MOE_RELEASES)
@pytest.mark.parametrize("tp", [1, 2])
def test_loader_verifies_expert_bytes_on_each_releases_pool(probes, probes_tp2, version, tp) -> None:
    """The loader's verify reads SGLang's expert buffers (B as SGLang stores it, times the scaling) against the
    tensors sent: the load passes; each structured corruption fails; an in-place attach of experts is refused."""
    loader = release_result(probes if tp == 1 else probes_tp2, version)["converted"]["loader"]
    assert loader["sent"]["ok"], loader["sent"]
    corrupted = {k: v for k, v in loader.items() if k not in ("sent", "attach", "layer_without_experts")}
    assert len(corrupted) == 4
    for what, verdict in corrupted.items():
        assert not verdict["ok"] and verdict["error"] == "the slot's bytes differ from the trainer's", what
    assert not loader["attach"]["ok"] and "expert LoRA B multiplied by the scaling" in loader["attach"]["message"]
    partial = loader["layer_without_experts"]
    assert not partial["ok"] and "without a tensor" in partial["message"], partial


def test_dims_read_from_a_saved_checkpoint_config(tmp_path) -> None:
    """transformers 5 writes Qwen3-MoE's expert count as num_local_experts in config.json; the object says
    num_experts: both give the same dims (the sync client reads verl's loaded config, the guard the file)."""
    import json

    import transformers

    from tests.expert_pool_probe import hf_config

    transformers.Qwen3MoeForCausalLM(hf_config()).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert ExpertDims.from_hf_config(saved) == ExpertDims.from_hf_config(hf_config().to_dict()) == DIMS
    with pytest.raises(ExpertLoRAError, match="lacks"):
        ExpertDims.from_hf_config({"hidden_size": H})


def test_only_every_layers_fused_experts_count_as_expert_lora() -> None:
    from verl_sglang_lora.sglang_contract.expert_lora import expert_projections

    assert expert_projections(["mlp.experts.gate_up_proj", "experts.down_proj"]) == (["down_proj", "gate_up_proj"], [])
    assert expert_projections(["model.layers.0.mlp.experts.gate_up_proj", "mlp.gate.weight", "gate_up_proj"]) == \
        ([], ["model.layers.0.mlp.experts.gate_up_proj", "mlp.gate.weight", "gate_up_proj"])
