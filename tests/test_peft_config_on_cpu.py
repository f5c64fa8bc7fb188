"""The adapter config from both producers (peft's LoraConfig for FSDP, verl's Megatron builder), normalized
and then judged by SGLang's own target-module normalization (what its memory-pool check uses)."""

from __future__ import annotations

import json

import pytest

from verl_sglang_lora.sglang_contract.target_modules import LoRAConfigError
from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config
from tests.conftest import sglang_or_skip


def _sglang_normalize(target_modules):
    from tests.conftest import sglang_or_skip

    return sglang_or_skip("sglang.srt.lora.utils").get_normalized_target_modules(target_modules)


def test_fsdp_lora_config_to_dict_becomes_json_with_sorted_list():
    peft = pytest.importorskip("peft")
    cfg = peft.LoraConfig(r=32, lora_alpha=32, target_modules={"q_proj", "v_proj", "down_proj"}, task_type="CAUSAL_LM")
    out = normalize_peft_config(cfg.to_dict())
    assert out["peft_type"] == "LORA" and out["r"] == 32 and out["lora_alpha"] == 32
    assert out["target_modules"] == ["down_proj", "q_proj", "v_proj"]
    json.dumps(out)
    assert _sglang_normalize(out["target_modules"]) == {"qkv_proj", "down_proj"}


def test_lora_config_object_accepted_too():
    peft = pytest.importorskip("peft")
    out = normalize_peft_config(peft.LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    assert out["target_modules"] == "all-linear" and out["r"] == 8


def test_all_linear_string_is_never_torn_into_characters():
    out = normalize_peft_config({"r": 32, "lora_alpha": 32, "target_modules": "all-linear"})
    assert out["target_modules"] == "all-linear"
    assert _sglang_normalize(out["target_modules"]) == {"all"}
    # what a blanket list() did (seed layer 7): SGLang then sees ten one-letter modules
    assert _sglang_normalize(list("all-linear")) != {"all"}


def test_megatron_builder_output_from_installed_verl():
    """verl's own Megatron peft-config builder (where this verl release has one) feeds the normalizer."""
    try:
        from verl.utils.megatron_peft_utils import build_peft_config_for_vllm
    except ImportError:
        pytest.skip("this verl release has no verl.utils.megatron_peft_utils.build_peft_config_for_vllm")
    import inspect

    params = inspect.signature(build_peft_config_for_vllm).parameters
    lora = {"rank": 16, "alpha": 32, "target_modules": ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]}
    produced = build_peft_config_for_vllm(lora) if len(params) == 1 else build_peft_config_for_vllm(**{next(iter(params)): lora})
    out = normalize_peft_config(produced, rank=16, alpha=32)
    assert out["peft_type"] == "LORA" and out["r"] == 16
    assert isinstance(out["target_modules"], (str, list))
    if isinstance(produced.get("target_modules"), str):
        assert out["target_modules"] == produced["target_modules"]
    normalized = _sglang_normalize(out["target_modules"])
    assert normalized == {"all"} or normalized <= {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}


def test_missing_peft_type_is_filled_missing_rank_refused():
    assert normalize_peft_config({"r": 4, "target_modules": ["q_proj"]})["peft_type"] == "LORA"
    with pytest.raises(LoRAConfigError, match="lora_rank"):
        normalize_peft_config({"target_modules": ["q_proj"]})


def test_regex_and_non_lora_refused():
    with pytest.raises(LoRAConfigError, match="regex"):
        normalize_peft_config({"r": 4, "target_modules": ".*attn.*"})
    with pytest.raises(LoRAConfigError, match="only LORA"):
        normalize_peft_config({"r": 4, "peft_type": "IA3"})


def test_all_linear_becomes_the_module_list_only_where_sglang_cannot_read_it(monkeypatch):
    """SGLang 0.5.8 tears the string apart (docs/compatibility.md); 0.5.12+ read it. Decided by asking SGLang."""
    from verl_sglang_lora.sglang_contract import target_modules

    cfg = {"r": 8, "target_modules": "all-linear"}
    monkeypatch.setattr(target_modules, "sglang_reads_all_linear_string", lambda: False)
    assert normalize_peft_config(cfg, modules=["q_proj", "v_proj", "q_proj"])["target_modules"] == ["q_proj", "v_proj"]
    assert normalize_peft_config(cfg)["target_modules"] == list(target_modules.ALL_LINEAR_HF)
    monkeypatch.setattr(target_modules, "sglang_reads_all_linear_string", lambda: True)
    assert normalize_peft_config(cfg, modules=["q_proj"])["target_modules"] == "all-linear"


def test_megatron_names_reach_the_adapter_config_as_the_hf_modules_sglang_serves():
    """The launch flag and the adapter config come from one normalisation: a Megatron list is HF leaves in both."""
    from verl_sglang_lora.sglang_contract.target_modules import sglang_target_modules

    megatron = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    adapter = normalize_peft_config({"r": 8, "target_modules": megatron})["target_modules"]
    assert adapter == sorted(sglang_target_modules(megatron, supported=None))
    assert adapter == ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]


def test_installed_sglang_is_asked_whether_it_reads_the_string():
    from verl_sglang_lora.sglang_contract.target_modules import sglang_reads_all_linear_string

    utils = sglang_or_skip("sglang.srt.lora.utils")
    assert sglang_reads_all_linear_string() is (utils.get_normalized_target_modules("all-linear") == {"all"})


def test_trainer_scaling_is_read_before_the_rslora_fold_and_agrees_with_what_sglang_gets() -> None:
    """The scaling the served slot is checked against comes from the config as handed over: peft's formula, not
    the normalized config's own lora_alpha / r (which a wrong fold would make agree with itself)."""
    from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config, trainer_scaling

    for raw, want in (({"r": 16, "lora_alpha": 32, "target_modules": ["q_proj"]}, 2.0),
                      ({"r": 16, "lora_alpha": 32, "use_rslora": True, "target_modules": ["q_proj"]}, 8.0),
                      ({"rank": 8, "alpha": 4, "target_modules": ["q_proj"]}, 0.5)):
        assert trainer_scaling(raw) == pytest.approx(want)
        served = normalize_peft_config(raw)
        assert served["lora_alpha"] / served["r"] == pytest.approx(want)  # what SGLang's lora_alpha / r gives
    assert trainer_scaling({}, rank=32, alpha=64) == 2.0  # a producer that hands over no config fields
