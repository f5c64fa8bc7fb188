"""Every bad LoRA setting is served as trained or refused before any GPU is taken.

Driven through verl 0.9.1's real config trees (``compose_config``: ``ppo_trainer`` / ``ppo_megatron_trainer`` plus the
plugin's overlay), real peft adapters saved with ``save_pretrained`` (what ``model.lora_adapter_path`` points at) and
SGLang's own classes where they run on a CPU (``LoRAConfig``, ``LoRAAdapter.scaling``, ``LoRAManager``'s adapter check,
the ``divide`` rule of its parallel linears). Each refusal asserts that the message names the Hydra key and the fix;
``check_config`` is what the server actor and the weight-sync client call in ``__init__``, and the doctor runs the
same judgement on a CPU host. The matrix with these node ids is docs/reliability.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("verl")
pytest.importorskip("hydra")
peft = pytest.importorskip("peft")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.conftest import sglang_or_skip, sglang_release_dir  # noqa: E402
from verl_sglang_lora.releases import SGLANG_RELEASES  # noqa: E402
from verl_sglang_lora.runtime.lora_plan import lora_plan  # noqa: E402
from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config  # noqa: E402
from verl_sglang_lora.sglang_contract.target_modules import (  # noqa: E402
    LoRAConfigError,
    sglang_serves_expert_lora,
    sglang_target_modules,
)
from verl_sglang_lora.sglang_contract.weight_names import ModelWeightNames, UnknownWeightNameError  # noqa: E402
from verl_sglang_lora.tools.cli import main  # noqa: E402
from verl_sglang_lora.tools.doctor import (  # noqa: E402
    FAIL,
    FSDP2_FIX,
    INSTALL_GPU_SET,
    INSTALL_RECIPE,
    INSTALL_SGLANG,
    OK,
    Doctor,
    compose_config,
    format_table,
)
from verl_sglang_lora.verl_glue.config_guards import (  # noqa: E402
    UnsupportedConfigError,
    check_config,
    config_problems,
    tp_problems,
)

ROOT = Path(__file__).resolve().parents[1]
FSDP = ["actor_rollout_ref.model.lora_rank=32", "actor_rollout_ref.model.lora_alpha=32", "actor_rollout_ref.actor.strategy=fsdp2"]
MEGATRON = ["actor_rollout_ref.model.lora.rank=32", "actor_rollout_ref.model.lora.alpha=32"]
MERGE = "actor_rollout_ref.model.lora.merge=True"


def compose(model: Path | str, *overrides: str, megatron: bool = False):
    base = MEGATRON if megatron else FSDP
    return compose_config("ppo_megatron_trainer" if megatron else "ppo_trainer",
                          [f"actor_rollout_ref.model.path={model}", *base, *overrides])


def problems(cfg) -> list[str]:
    return config_problems(cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.model)


def refused(cfg, key: str, *fix: str) -> str:
    """check_config (server actor / sync client __init__) refuses, naming ``key`` and each ``fix`` fragment."""
    with pytest.raises(UnsupportedConfigError) as info:
        check_config(cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.model)
    text = str(info.value)
    line = next((ln for ln in text.splitlines() if key in ln), None)
    assert line is not None, f"{key!r} not named in:\n{text}"
    assert "Fix:" in line, line
    for part in fix:
        assert part in line.split("Fix:", 1)[1], f"{part!r} not in the fix of:\n{line}"
    return line


def served(cfg) -> None:
    assert problems(cfg) == []


def save_adapter(model_dir: Path, out: Path, **lora) -> Path:
    """A real peft adapter (adapter_config.json + weights) as verl's lora_adapter_path loads it."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    lora.setdefault("target_modules", "all-linear")
    pm = peft.get_peft_model(model, peft.LoraConfig(r=lora.pop("r", 32), lora_alpha=lora.pop("lora_alpha", 32), **lora))
    pm.save_pretrained(out)
    assert (out / "adapter_config.json").is_file()
    return out


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory) -> Path:
    """A 2-layer random Qwen3-MoE (transformers 5 fuses its experts in memory; the checkpoint is per-expert)."""
    path = tmp_path_factory.mktemp("tiny_moe")
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    transformers.Qwen3MoeForCausalLM(cfg).save_pretrained(path, safe_serialization=True)
    return path


def heads_only_model(tmp_path: Path, heads: int, kv: int) -> Path:
    """A model directory with only config.json (what the TP check reads)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "qwen3", "num_attention_heads": heads, "num_key_value_heads": kv, "hidden_size": 16 * heads}))
    return tmp_path


# ---- rsLoRA: served with the trainer's scaling ----------------------------------------------------------------------
@pytest.mark.parametrize("r, alpha", [(16, 32), (8, 16), (32, 8)])
def test_rslora_served_scaling_equals_peft(tiny_qwen3, r, alpha):
    """peft scales an rsLoRA adapter by alpha/sqrt(r); SGLang by lora_alpha/r of the config dict. The adapter config the
    plugin sends makes SGLang's own LoRAAdapter compute peft's scaling, and a layer's served delta equal the trained one."""
    sglang_or_skip("sglang.srt.lora.lora")
    from sglang.srt.lora.lora import LoRAAdapter
    from sglang.srt.lora.lora_config import LoRAConfig

    def sglang_scaling(config: dict) -> float:
        return LoRAAdapter("v", LoRAConfig.from_dict(config), SimpleNamespace(num_hidden_layers=2), None, None).scaling

    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float32)
    pm = peft.get_peft_model(model, peft.LoraConfig(r=r, lora_alpha=alpha, use_rslora=True, target_modules=["q_proj"]))
    layer = pm.base_model.model.model.layers[0].self_attn.q_proj
    trainer_scaling = layer.scaling["default"]
    assert trainer_scaling == pytest.approx(alpha / math.sqrt(r), rel=1e-12)

    handed_over = pm.peft_config["default"].to_dict()  # what verl's FSDP engine hands the rollout every sync
    assert sglang_scaling(normalize_peft_config(dict(handed_over))) == pytest.approx(trainer_scaling, rel=1e-12)
    # the bug: the raw config served as is would scale by alpha/r
    raw = {**handed_over, "peft_type": "LORA", "target_modules": ["q_proj"]}
    assert sglang_scaling(raw) == pytest.approx(alpha / r) and alpha / r != pytest.approx(trainer_scaling)

    config = normalize_peft_config(dict(handed_over))
    assert config["use_rslora"] is False  # folded: a reader honouring both would scale twice
    assert normalize_peft_config(config) == config  # restart recovery normalizes the snapshot's config again
    # the canary's expectation (sync_client: lora_alpha / r of the same dict) follows
    assert float(config["lora_alpha"]) / float(config["r"]) == pytest.approx(trainer_scaling, rel=1e-12)

    with torch.no_grad():
        torch.nn.init.normal_(layer.lora_B["default"].weight)
        x = torch.randn(3, layer.in_features)
        trained = layer(x) - layer.base_layer(x)
        a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
        served_delta = sglang_scaling(config) * (x @ a.T @ b.T)
    torch.testing.assert_close(served_delta, trained, rtol=1e-5, atol=1e-6)


def test_rslora_adapter_path_is_served(tiny_qwen3, tmp_path):
    adapter = save_adapter(tiny_qwen3, tmp_path / "rslora", use_rslora=True)
    served(compose(tiny_qwen3, f"actor_rollout_ref.model.lora_adapter_path={adapter}"))


def test_rslora_hydra_key_refused(tiny_qwen3):
    """verl 0.9.1 has no use_rslora key: HFModelConfig refuses it, and FSDP builds LoraConfig without it."""
    cfg = compose(tiny_qwen3, "+actor_rollout_ref.model.use_rslora=true")
    refused(cfg, "actor_rollout_ref.model.use_rslora", "remove it", "actor_rollout_ref.model.lora_adapter_path")
    from verl.utils.config import omega_conf_to_dataclass

    with pytest.raises(Exception, match="use_rslora"):
        omega_conf_to_dataclass(cfg.actor_rollout_ref.model)


# ---- DoRA -------------------------------------------------------------------------------------------------------
def test_dora_adapter_refused_in_adapter_mode_served_merged(tiny_qwen3, tmp_path):
    adapter = save_adapter(tiny_qwen3, tmp_path / "dora", use_dora=True)
    key = f"actor_rollout_ref.model.lora_adapter_path={adapter}"
    line = refused(compose(tiny_qwen3, key), "actor_rollout_ref.model.lora_adapter_path", "lora.merge=True")
    assert "use_dora=True" in line
    served(compose(tiny_qwen3, key, MERGE))
    # the sync-time backstop names it too
    with pytest.raises(LoRAConfigError, match=r"use_dora=True.*Fix: actor_rollout_ref\.model\.lora\.merge=True"):
        normalize_peft_config(json.loads((adapter / "adapter_config.json").read_text()))


def test_sglang_itself_refuses_dora():
    """Why DoRA is refused: SGLang's own adapter check (LoRAManager.validate_new_adapter)."""
    sglang_or_skip("sglang.srt.lora.lora_manager")
    from sglang.srt.lora.lora_config import LoRAConfig
    from sglang.srt.lora.lora_manager import LoRAManager

    config = LoRAConfig.from_dict({"peft_type": "LORA", "r": 8, "lora_alpha": 8, "target_modules": "all-linear",
                                   "use_dora": True})
    with pytest.raises(ValueError, match="DoRA"):
        LoRAManager.validate_new_adapter(SimpleNamespace(lora_refs={}), config, SimpleNamespace(lora_name="v", lora_path="p"))


@pytest.mark.parametrize("lora_type", ["dora", "canonical_lora", "vlm_lora"])
def test_megatron_lora_type_refused(tiny_qwen3, lora_type):
    cfg = compose(tiny_qwen3, f"actor_rollout_ref.model.lora.type={lora_type}", megatron=True)
    refused(cfg, f"actor_rollout_ref.model.lora.type={lora_type}", "actor_rollout_ref.model.lora.type=lora",
            "lora.merge=True")
    served(compose(tiny_qwen3, f"actor_rollout_ref.model.lora.type={lora_type}", MERGE, megatron=True))
    served(compose(tiny_qwen3, "actor_rollout_ref.model.lora.type=lora", megatron=True))


def test_megatron_variant_key_refused(tiny_qwen3):
    cfg = compose(tiny_qwen3, "+actor_rollout_ref.model.lora.use_dora=true", megatron=True)
    refused(cfg, "actor_rollout_ref.model.lora.use_dora", "remove it", "lora.type=dora")


# ---- modules_to_save: verl's own rule is lora.merge alone -------------------------------------------------------------
def test_verl_switches_lora_mode_on_lora_merge_only():
    """verl 0.9.1 has no modules_to_save rule: the word is absent from its source, and both engines pick adapter vs
    merged weights from model.lora.merge; the plugin's plan follows the same switch."""
    import verl

    src = Path(verl.__file__).parent
    assert not [p for p in src.rglob("*.py") if "modules_to_save" in p.read_text(encoding="utf-8", errors="ignore")]
    for engine in ("fsdp", "megatron"):
        assert 'self.model_config.lora.get("merge", False)' in (src / "workers" / "engine" / engine / "transformer_impl.py").read_text()
    assert lora_plan({"lora_rank": 8, "lora": {}}).as_adapter
    assert not lora_plan({"lora_rank": 8, "lora": {"merge": True}}).as_adapter


def test_modules_to_save_refused_in_both_modes(tiny_qwen3, tmp_path):
    adapter = save_adapter(tiny_qwen3, tmp_path / "mts", modules_to_save=["lm_head"])
    key = f"actor_rollout_ref.model.lora_adapter_path={adapter}"
    for extra in ((), (MERGE,)):
        line = refused(compose(tiny_qwen3, key, *extra), "actor_rollout_ref.model.lora_adapter_path",
                       "without modules_to_save", "merge_and_unload", "actor_rollout_ref.model.path")
        assert "modules_to_save=['lm_head']" in line


def test_modules_to_save_merged_names_are_not_the_served_models(tiny_qwen3):
    """Why merge mode does not serve it either: verl's merged stream names the saved copy, which the model lacks."""
    from verl.utils.fsdp_utils import normalize_peft_param_name

    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    pm = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", modules_to_save=["lm_head"]))
    names = [n for n in normalize_peft_param_name(pm.state_dict()) if n.startswith("lm_head")]
    assert sorted(names) == ["lm_head.modules_to_save.default.weight", "lm_head.original_module.weight"]
    served_names = ModelWeightNames.from_model_path(tiny_qwen3)
    for name in names:
        with pytest.raises(UnknownWeightNameError):
            served_names.resolve_base(name)


# ---- bias training ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", ["lora_only", "all"])
def test_bias_training_refused_in_adapter_mode_served_merged(tiny_qwen3, tmp_path, bias):
    adapter = save_adapter(tiny_qwen3, tmp_path / "bias", bias=bias)
    key = f"actor_rollout_ref.model.lora_adapter_path={adapter}"
    line = refused(compose(tiny_qwen3, key), "actor_rollout_ref.model.lora_adapter_path", "bias='none'", "lora.merge=True")
    assert f"bias='{bias}'" in line
    served(compose(tiny_qwen3, key, MERGE))


def test_lora_bias_refused_in_both_modes(tiny_qwen3, tmp_path):
    """lora_bias: SGLang has no LoRA bias, and peft cannot merge it into Qwen3's bias-free projections."""
    adapter = save_adapter(tiny_qwen3, tmp_path / "lora_bias", lora_bias=True)
    key = f"actor_rollout_ref.model.lora_adapter_path={adapter}"
    for extra in ((), (MERGE,)):
        line = refused(compose(tiny_qwen3, key, *extra), "actor_rollout_ref.model.lora_adapter_path", "lora_bias=False")
        assert "lora_bias=True" in line
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    pm = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], lora_bias=True))
    with pytest.raises(Exception, match="Impossible to merge LoRA with `lora_bias=True`"):
        pm.merge_adapter()


def test_bias_hydra_key_refused(tiny_qwen3):
    refused(compose(tiny_qwen3, "+actor_rollout_ref.model.bias=all"), "actor_rollout_ref.model.bias", "remove it")


def test_rank_and_alpha_patterns_refused_in_adapter_mode(tiny_qwen3, tmp_path):
    adapter = save_adapter(tiny_qwen3, tmp_path / "pattern", rank_pattern={"q_proj": 8}, alpha_pattern={"v_proj": 64})
    key = f"actor_rollout_ref.model.lora_adapter_path={adapter}"
    text = "\n".join(problems(compose(tiny_qwen3, key)))
    assert "rank_pattern={'q_proj': 8}" in text and "alpha_pattern={'v_proj': 64}" in text
    assert "Fix: drop rank_pattern" in text and "Fix: drop alpha_pattern" in text
    served(compose(tiny_qwen3, key, MERGE))


def test_trainable_tokens_refused(tiny_qwen3, tmp_path):
    adapter = save_adapter(tiny_qwen3, tmp_path / "tokens", trainable_token_indices=[1, 2])
    key = f"actor_rollout_ref.model.lora_adapter_path={adapter}"
    for extra in ((), (MERGE,)):
        refused(compose(tiny_qwen3, key, *extra), "trainable_token_indices", "without trainable tokens")


# ---- lora_alpha <= 0 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", ["0", "-8"])
def test_fsdp_alpha_not_positive_refused(tiny_qwen3, alpha):
    cfg = compose(tiny_qwen3, f"actor_rollout_ref.model.lora_alpha={alpha}")
    refused(cfg, f"actor_rollout_ref.model.lora_alpha={alpha}", "actor_rollout_ref.model.lora_alpha > 0")
    refused(compose(tiny_qwen3, f"actor_rollout_ref.model.lora_alpha={alpha}", MERGE),
            "actor_rollout_ref.model.lora_alpha", "> 0")
    assert lora_plan(cfg.actor_rollout_ref.model).alpha == float(alpha)  # no longer replaced by the rank


def test_megatron_alpha_zero_refused(tiny_qwen3):
    cfg = compose(tiny_qwen3, "actor_rollout_ref.model.lora.alpha=0", megatron=True)
    refused(cfg, "actor_rollout_ref.model.lora.alpha=0", "actor_rollout_ref.model.lora.alpha > 0")
    # the sync-time backstop, on verl's own Megatron adapter config
    from verl.utils.megatron_peft_utils import build_peft_config_for_vllm

    with pytest.raises(LoRAConfigError, match=r"lora_alpha=0 .*actor_rollout_ref\.model\.lora\.alpha.*Fix"):
        normalize_peft_config(build_peft_config_for_vllm({"rank": 16, "alpha": 0}))


def test_adapter_path_alpha_and_rank_refused(tiny_qwen3, tmp_path):
    adapter = save_adapter(tiny_qwen3, tmp_path / "a0", r=64, lora_alpha=0)
    cfg = compose(tiny_qwen3, f"actor_rollout_ref.model.lora_adapter_path={adapter}")
    text = "\n".join(problems(cfg))
    assert "lora_alpha=0" in text and "r=64 but actor_rollout_ref.model.lora_rank=32" in text
    assert "Fix: actor_rollout_ref.model.lora_rank=64" in text


# ---- targets --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["embed_tokens", "lm_head"])
def test_embedding_targets_refused_in_adapter_mode(tiny_qwen3, target):
    cfg = compose(tiny_qwen3, f"actor_rollout_ref.model.target_modules=[q_proj,{target}]")
    refused(cfg, "actor_rollout_ref.model.target_modules", f"drop ['{target}']", "lora.merge=True")
    served(compose(tiny_qwen3, f"actor_rollout_ref.model.target_modules=[q_proj,{target}]", MERGE))
    with pytest.raises(LoRAConfigError, match=target):  # the launch view refuses it too
        sglang_target_modules(["q_proj", target], supported=None)


def test_megatron_output_layer_target_refused(tiny_qwen3):
    cfg = compose(tiny_qwen3, "actor_rollout_ref.model.lora.target_modules=[linear_qkv,output_layer]", megatron=True)
    refused(cfg, "actor_rollout_ref.model.lora.target_modules", "drop ['output_layer']")


def test_empty_targets_refused(tiny_qwen3):
    refused(compose(tiny_qwen3, "actor_rollout_ref.model.target_modules=[]"),
            "actor_rollout_ref.model.target_modules=[]", "all-linear")
    refused(compose(tiny_qwen3, "actor_rollout_ref.model.lora.target_modules=[]", megatron=True),
            "actor_rollout_ref.model.lora.target_modules=[]", "linear_qkv")
    refused(compose(tiny_qwen3, "actor_rollout_ref.model.target_modules=[]", MERGE),
            "actor_rollout_ref.model.target_modules=[]", "all-linear")
    exclude = ("actor_rollout_ref.model.lora.target_modules=[]", "actor_rollout_ref.model.lora.exclude_modules=[linear_proj]")
    line = refused(compose(tiny_qwen3, *exclude, megatron=True), "actor_rollout_ref.model.lora.target_modules=[]",
                   "list the modules")
    assert "exclude_modules" in line
    served(compose(tiny_qwen3, *exclude, MERGE, megatron=True))  # Megatron-Bridge's own meaning, merged by verl
    # what the trainer would do with it: peft refuses, on the training GPUs
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    with pytest.raises(Exception, match="target_modules"):
        peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=[]))


def test_expert_lora_refused_on_other_moe_layouts(tmp_path):
    """Only the fused layout the conversion is checked against (Qwen3-MoE): a Mixtral-style config is refused before
    any worker starts, not at the first sync."""
    cfg = transformers.MixtralConfig(vocab_size=512, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=4)
    transformers.MixtralForCausalLM(cfg).save_pretrained(tmp_path)
    line = refused(compose(tmp_path, ATTENTION, EXPERTS, TP1), "actor_rollout_ref.model.target_parameters",
                   "unset actor_rollout_ref.model.target_parameters")
    assert "'mixtral'" in line and "qwen3_moe" in line


def test_an_adapter_path_with_expert_lora_must_match_the_setting(tiny_moe, tmp_path):
    """verl loads lora_adapter_path's adapter with its own target_parameters: the rollout converts and launches for
    model.target_parameters, so the two must agree."""
    import peft

    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_moe)
    pm = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                    target_parameters=["mlp.experts.gate_up_proj",
                                                                       "mlp.experts.down_proj"]))
    pm.save_pretrained(tmp_path / "adapter")
    path = f"+actor_rollout_ref.model.lora_adapter_path={tmp_path / 'adapter'}"
    line = refused(compose(tiny_moe, ATTENTION, TP1, path), "adapts the experts",
                   "actor_rollout_ref.model.target_parameters to the adapter's")
    assert "['down_proj', 'gate_up_proj']" in line
    served(compose(tiny_moe, ATTENTION, TP1, path, EXPERTS))


def test_target_parameters_refused(tiny_qwen3):
    cfg = compose(tiny_qwen3, "+actor_rollout_ref.model.target_parameters=[mlp.experts.gate_up_proj]")
    line = refused(cfg, "actor_rollout_ref.model.target_parameters", "unset")
    assert "has no experts" in line


EXPERTS = "+actor_rollout_ref.model.target_parameters=[mlp.experts.gate_up_proj,mlp.experts.down_proj]"
ATTENTION = "actor_rollout_ref.model.target_modules=[q_proj,k_proj,v_proj,o_proj]"
TP1 = "actor_rollout_ref.rollout.tensor_model_parallel_size=1"


def test_expert_lora_served_where_the_loader_can_check_it(tiny_moe, monkeypatch):
    """Fused-expert target_parameters on an MoE: served with the installed SGLang (MoE LoRA code, no weight-update
    session) on one scheduler rank with the loader launched; refused, naming why, where the loader's byte check
    cannot run, and for parameters that are not fused expert weights."""
    from verl_sglang_lora.verl_glue import config_guards

    served(compose(tiny_moe, ATTENTION, EXPERTS, TP1))
    assert lora_plan(compose(tiny_moe, ATTENTION, EXPERTS, TP1).actor_rollout_ref.model).expert_projections == \
        ["down_proj", "gate_up_proj"]
    line = refused(compose(tiny_moe, ATTENTION, EXPERTS, "actor_rollout_ref.rollout.tensor_model_parallel_size=2"),
                   "actor_rollout_ref.model.target_parameters", "unset actor_rollout_ref.model.target_parameters")
    assert "scheduler ranks" in line
    line = refused(compose(tiny_moe, ATTENTION, EXPERTS, TP1,
                           "actor_rollout_ref.rollout.engine_kwargs.sglang_lora.resident=off"),
                   "actor_rollout_ref.model.target_parameters")
    assert "resident=off" in line
    line = refused(compose(tiny_moe, ATTENTION, TP1, "+actor_rollout_ref.model.target_parameters=[mlp.gate.weight]"),
                   "actor_rollout_ref.model.target_parameters", "drop them")
    assert "['mlp.gate.weight']" in line
    line = refused(compose(tiny_moe, ATTENTION, TP1, "+actor_rollout_ref.model.target_parameters=[mlp.experts.down_proj]"),
                   "actor_rollout_ref.model.target_parameters", "[mlp.experts.gate_up_proj,mlp.experts.down_proj]")
    assert "only ['down_proj']" in line  # SGLang wraps a layer's experts only with both projections targeted
    line = refused(compose(tiny_moe, ATTENTION, TP1,
                           "+actor_rollout_ref.model.target_parameters=[model.layers.0.mlp.experts.gate_up_proj,"
                           "mlp.experts.down_proj]"), "actor_rollout_ref.model.target_parameters", "drop them")
    assert "every layer's" in line  # one layer's experts only
    line = refused(compose(tiny_moe, "actor_rollout_ref.model.target_modules=[]", EXPERTS, TP1),
                   "actor_rollout_ref.model.target_modules=[]", "[q_proj,k_proj,v_proj,o_proj]")
    assert "experts alone" in line
    # a release that runs tensor updates in a weight-update session (0.5.23's BeginWeightUpdateReqInput)
    monkeypatch.setattr("verl_sglang_lora.sglang_contract.installed.weight_update_session", lambda: True)
    line = refused(compose(tiny_moe, ATTENTION, EXPERTS, TP1), "actor_rollout_ref.model.target_parameters")
    assert "weight-update session" in line
    # a release without MoE LoRA code
    monkeypatch.setattr(config_guards, "sglang_serves_expert_lora", lambda: False)
    assert "no MoE LoRA code" in refused(compose(tiny_moe, ATTENTION, EXPERTS, TP1), "target_parameters")


# ---- mixture of experts ---------------------------------------------------------------------------------------------
def test_moe_mlp_targets_refused_attention_served(tiny_moe):
    line = refused(compose(tiny_moe), "actor_rollout_ref.model.target_modules",
                   "actor_rollout_ref.model.target_modules=[q_proj,k_proj,v_proj,o_proj]")
    assert "mixture-of-experts" in line and "4 experts" in line
    refused(compose(tiny_moe, "actor_rollout_ref.model.target_modules=[q_proj,down_proj]"),
            "actor_rollout_ref.model.target_modules", "[q_proj,k_proj,v_proj,o_proj]")
    served(compose(tiny_moe, "actor_rollout_ref.model.target_modules=[q_proj,k_proj,v_proj,o_proj]"))
    refused(compose(tiny_moe, megatron=True), "actor_rollout_ref.model.lora.target_modules",
            "actor_rollout_ref.model.lora.target_modules=[linear_qkv,linear_proj]")
    served(compose(tiny_moe, "actor_rollout_ref.model.lora.target_modules=[linear_qkv,linear_proj]", megatron=True))


def test_moe_adapter_names_show_why(tiny_moe):
    """transformers 5 + peft: all-linear on the MoE adapts the fused experts as 'mlp.experts.base_layer.lora_A', which
    the served checkpoint (per-expert names) does not resolve; attention-only adapters resolve."""
    from peft.utils.save_and_load import get_peft_model_state_dict

    names = ModelWeightNames.from_model_path(tiny_moe)
    assert any(".mlp.experts.0.gate_proj.weight" in n for n in names.names)

    def adapter(targets):
        model = transformers.AutoModelForCausalLM.from_pretrained(tiny_moe)
        return get_peft_model_state_dict(peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets)))

    expert_names = [n for n in adapter("all-linear") if ".mlp.experts." in n]
    assert expert_names
    with pytest.raises(UnknownWeightNameError):
        names.resolve_lora(expert_names[0])
    for name in adapter(["q_proj", "k_proj", "v_proj", "o_proj"]):
        names.resolve_lora(name)


def test_moe_merge_mode_refused_with_fsdp(tiny_moe):
    """verl's merged stream skips unfuse_moe_params: packed expert names the served model lacks."""
    from verl.utils.fsdp_utils import normalize_peft_param_name

    refused(compose(tiny_moe, MERGE), "actor_rollout_ref.model.lora.merge=True",
            "actor_rollout_ref.model.lora.merge=False", "[q_proj,k_proj,v_proj,o_proj]")
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_moe)
    pm = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]))
    packed = [n for n in normalize_peft_param_name(pm.state_dict()) if n.endswith(".mlp.experts.gate_up_proj")]
    assert packed
    with pytest.raises(UnknownWeightNameError):
        ModelWeightNames.from_model_path(tiny_moe).resolve_base(packed[0])


# ---- rollout TP vs heads --------------------------------------------------------------------------------------------
def sglang_launches(heads: int, kv: int, tp: int) -> bool:
    """SGLang's QKVParallelLinear.__init__ arithmetic, with SGLang's own ``divide``."""
    divide = sglang_or_skip("sglang.srt.distributed.utils").divide
    try:
        divide(heads, tp)
        divide(tp, kv) if tp >= kv else divide(kv, tp)
        return True
    except AssertionError:
        return False


def test_tp_rule_is_sglangs():
    for heads, kv in [(4, 2), (12, 4), (32, 8), (28, 4), (16, 16)]:
        for tp in range(1, 17):
            hf = {"num_attention_heads": heads, "num_key_value_heads": kv}
            assert (tp_problems({"tensor_model_parallel_size": tp}, hf) == []) is sglang_launches(heads, kv, tp), (heads, kv, tp)


@pytest.mark.parametrize("heads, kv, tp", [(4, 2, 3), (12, 4, 6)])
def test_tp_not_dividing_heads_refused(tmp_path, heads, kv, tp):
    model = heads_only_model(tmp_path / "m", heads, kv)
    cfg = compose(model, f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}")
    refused(cfg, f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}",
            "actor_rollout_ref.rollout.tensor_model_parallel_size one of")
    served(compose(model, "actor_rollout_ref.rollout.tensor_model_parallel_size=2"))
    cfg = compose(model, f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}", megatron=True)
    refused(cfg, f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}")


def test_tp_replicating_kv_heads_is_served(tiny_qwen3):
    """4 ranks over 2 KV heads: SGLang replicates each KV head on 2 ranks (its LoRA slices by num_kv_head_replicas)."""
    served(compose(tiny_qwen3, "actor_rollout_ref.rollout.tensor_model_parallel_size=4"))


# ---- the objects the server actor and the sync client hold ---------------------------------------------------------
def test_runtime_dataclasses_are_refused_the_same(tiny_qwen3, tmp_path):
    """verl's own RolloutConfig / HFModelConfig (with its loaded hf_config), as check_config sees them in __init__."""
    from verl.utils.config import omega_conf_to_dataclass

    adapter = save_adapter(tiny_qwen3, tmp_path / "dora", use_dora=True)
    cfg = compose(tiny_qwen3, "actor_rollout_ref.model.lora_alpha=0", "actor_rollout_ref.rollout.tensor_model_parallel_size=3",
                  f"actor_rollout_ref.model.lora_adapter_path={adapter}")
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    model = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    assert model.hf_config is not None
    with pytest.raises(UnsupportedConfigError) as info:
        check_config(rollout, model)
    text = str(info.value)
    for key in ("actor_rollout_ref.model.lora_alpha=0", "actor_rollout_ref.rollout.tensor_model_parallel_size=3",
                "actor_rollout_ref.model.lora_adapter_path=", "use_dora=True"):
        assert key in text, text
    good = compose(tiny_qwen3)
    check_config(omega_conf_to_dataclass(good.actor_rollout_ref.rollout), omega_conf_to_dataclass(good.actor_rollout_ref.model))


def test_shipped_examples_are_not_refused(tmp_path):
    from tests.test_examples_on_cpu import EXAMPLES, example_overrides

    for script, name in EXAMPLES.items():
        (tmp_path / script).mkdir()
        argv = example_overrides(script, tmp_path / script)
        cfg = compose_config(name, [a for a in argv if not a.startswith("--")])
        assert problems(cfg) == [], script


# ---- doctor ---------------------------------------------------------------------------------------------------------
def doctor(capsys, *args: str) -> tuple[int, str]:
    """The CLI, as a user runs it (with its fresh-interpreter probes)."""
    code = main(["doctor", *args])
    return code, capsys.readouterr().out


def doctor_config(*overrides: str, config_name: str = "ppo_trainer") -> tuple[int, str]:
    """The doctor's config section in-process (the same checks as the CLI, without its registration/SGLang probes,
    which the CLI tests in tests/test_doctor_on_cpu.py cover): (exit code, printed table)."""
    d = Doctor(list(overrides), config_name)
    d.check_config()
    return (1 if any(c.status == FAIL for c in d.checks) else 0), format_table(d.checks)


def row(out: str, name: str) -> tuple[str, str]:
    """(status, detail) of the doctor's first row called ``name``."""
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(" | ", 2)]
        if len(parts) == 3 and parts[0] == name:
            return parts[1], parts[2]
    raise AssertionError(f"no {name!r} row in:\n{out}")


def fix_lines(out: str) -> str:
    return out.split("How to fix:", 1)[1] if "How to fix:" in out else ""


def test_doctor_fails_fsdp1_with_lora_adapter(tiny_qwen3, capsys):
    code, out = doctor(capsys, f"actor_rollout_ref.model.path={tiny_qwen3}", "actor_rollout_ref.model.lora_rank=32")
    assert code == 1
    status, detail = row(out, "fsdp version")
    assert status == FAIL and detail.startswith("actor_rollout_ref.actor.strategy=fsdp (FSDP1")
    assert f"[FAIL] fsdp version: {FSDP2_FIX}" in out
    # use_orig_params=True did not help on the H200 (docs/validation.md): still refused
    code, out = doctor_config(f"actor_rollout_ref.model.path={tiny_qwen3}", "actor_rollout_ref.model.lora_rank=32",
                              "actor_rollout_ref.actor.fsdp_config.use_orig_params=true")
    assert code == 1 and row(out, "fsdp version")[0] == FAIL and "use_orig_params=True" in row(out, "fsdp version")[1]


def test_doctor_passes_fsdp2_and_merge_mode_fsdp1(tiny_qwen3):
    code, out = doctor_config(f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP)
    assert code == 0, out
    assert row(out, "fsdp version") == (OK, "actor_rollout_ref.actor.strategy=fsdp2")
    code, out = doctor_config(f"actor_rollout_ref.model.path={tiny_qwen3}", "actor_rollout_ref.model.lora_rank=32", MERGE)
    assert code == 0 and "fsdp version" not in out, out  # merge mode: verl merges, no adapter is collected


@pytest.mark.parametrize("overrides, key", [
    (["actor_rollout_ref.model.lora_alpha=0"], "actor_rollout_ref.model.lora_alpha"),
    (["actor_rollout_ref.model.target_modules=[q_proj,embed_tokens]"], "actor_rollout_ref.model.target_modules"),
    (["actor_rollout_ref.model.target_modules=[]"], "actor_rollout_ref.model.target_modules"),
    (["actor_rollout_ref.rollout.tensor_model_parallel_size=3"], "actor_rollout_ref.rollout.tensor_model_parallel_size"),
    (["+actor_rollout_ref.model.use_rslora=true"], "actor_rollout_ref.model.use_rslora"),
], ids=["alpha_0", "embed_tokens", "empty_targets", "tp_3", "use_rslora_key"])
def test_doctor_fails_bad_lora_settings(tiny_qwen3, overrides, key):
    code, out = doctor_config(f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP, *overrides)
    assert code == 1, out
    assert f"[FAIL] verl guards: {key}" in fix_lines(out), out


def test_doctor_fails_adapter_path_variants(tiny_qwen3, tmp_path):
    adapter = save_adapter(tiny_qwen3, tmp_path / "dora", use_dora=True, modules_to_save=["lm_head"])
    code, out = doctor_config(f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP,
                              f"actor_rollout_ref.model.lora_adapter_path={adapter}")
    assert code == 1
    fixes = fix_lines(out)
    assert "[FAIL] verl guards: actor_rollout_ref.model.lora_adapter_path: " in fixes
    assert "use_dora=True" in out and "modules_to_save=['lm_head']" in out


def test_doctor_fails_megatron_dora(tiny_qwen3):
    code, out = doctor_config(f"actor_rollout_ref.model.path={tiny_qwen3}", *MEGATRON,
                              "actor_rollout_ref.model.lora.type=dora", config_name="ppo_megatron_trainer")
    assert code == 1
    assert "[FAIL] verl guards: actor_rollout_ref.model.lora.type: actor_rollout_ref.model.lora.type=lora" in fix_lines(out)


def test_doctor_checks_tp_against_heads(tiny_qwen3, tiny_moe):
    code, out = doctor_config(f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP,
                              "actor_rollout_ref.rollout.tensor_model_parallel_size=2")
    assert code == 0, out
    status, detail = row(out, "tp vs heads")
    assert status == OK and "num_attention_heads=4" in detail and "num_key_value_heads=2" in detail
    code, out = doctor_config(f"actor_rollout_ref.model.path={tiny_moe}", *FSDP)
    assert code == 1 and "[FAIL] verl guards: actor_rollout_ref.model.target_modules" in fix_lines(out)


def test_doctor_install_hints_are_the_readme_recipe(monkeypatch):
    """Each hint is a line of docs/install.md (continuations joined); none says a bare `pip install sglang`."""
    install = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    commands = " ".join(" ".join(block.replace("\\\n", " ").split()) for block in install.split("```")[1::2])
    for line in INSTALL_RECIPE:
        assert line in commands, line
    d = Doctor([])
    monkeypatch.setitem(d.versions, "sglang", None)
    monkeypatch.setitem(d.versions, "verl", None)
    d.check_versions()
    rows = {c.name: c for c in d.checks}
    assert rows["version sglang"].status == FAIL and INSTALL_SGLANG in rows["version sglang"].fix
    assert INSTALL_GPU_SET in rows["version sglang"].fix  # the constraints file: it pins what --no-deps leaves out
    assert "compat matrix" not in rows and "tested set" not in rows  # a missing package is said by its row alone
    assert "pip install sglang " not in rows["version sglang"].fix.replace("`pip install sglang`", "")
    assert rows["version verl"].fix.startswith("pip install verl==0.9.1 transformers==5.9.0")
    assert rows["version torch"].status == OK


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_moe_refusal_says_what_each_sglang_release_lacks(tiny_moe, version, monkeypatch):
    """The expert refusal reads the installed SGLang's files: 0.5.8 has no MoE LoRA code, 0.5.12+ do, and the
    message says which side (SGLang or this plugin) is missing."""
    import verl_sglang_lora.verl_glue.config_guards as guards

    package = sglang_release_dir(version) / "sglang"
    has_runner = (package / "srt" / "lora" / "lora_moe_runners.py").is_file()
    assert sglang_serves_expert_lora(package) is has_runner
    assert has_runner is (version != "0.5.8")  # the releases as published
    monkeypatch.setattr(guards, "sglang_serves_expert_lora", lambda: sglang_serves_expert_lora(package))
    line = refused(compose(tiny_moe), "actor_rollout_ref.model.target_modules", "[q_proj,k_proj,v_proj,o_proj]")
    if has_runner:
        assert "has MoE LoRA code" in line and "target_parameters=[mlp.experts.gate_up_proj," in line
    else:
        assert "has no MoE LoRA code" in line
