"""verl 0.9.1's Megatron LoRA path, through megatron-bridge 0.5.1, under the transformers SGLang 0.5.23 pins.

The Megatron example on SGLang 0.5.23 died at ``from megatron.bridge import AutoBridge``:
megatron-bridge 0.5.1 declares ``transformers<5.9`` and 0.5.23 pins 5.19. The plugin's registration guard gets the
import through (tests/test_bridge_registrations_on_cpu.py). This test drives what comes after it in verl's engine, on
the CPU, with the real packages: the Megatron carry's megatron-core / megatron-bridge / modelopt and SGLang 0.5.23's
transformers (.cache/megatron_bridge/, scripts/megatron_bridge_release.sh), and the venv's verl 0.9.1.

- verl's ``AutoBridge.from_hf_pretrained`` and ``to_megatron_provider`` on the tiny offline Qwen3; the provider's
  fields against the checkpoint's config.json.
- verl's ``get_peft_cls`` (the hf_model.yaml ``lora`` block, rank and alpha as the example sets them) and
  ``make_megatron_module``, then ``bridge.load_hf_weights``: the Megatron weights against the safetensors bytes,
  q/k/v interleaved per query group the way megatron-core lays them out.
- ``bridge.export_adapter_weights`` (what verl 0.9.1 sends the rollout): every name, shape and byte against the
  Megatron adapter parameters, derived here from the layouts, not from the bridge's own mapping.
- The export as a function: the checkpoint in transformers with every exported pair merged gives the Megatron model's
  own logits (fp32, ~2e-6 of the largest logit), before and after an optimizer step whose gradients reach every
  adapter tensor and nothing else; a mis-routed pair or the base alone is off by more than the logits' size.
- The plugin's own consumer: the export collected into its flat buffer with names resolved against the checkpoint.

Not on this path: TransformerEngine (CUDA-only at import; tests/te_standin answers its imports, the model is built
from megatron-core's local layer spec and torch RMSNorm, and its forward takes megatron-core's own non-TE code), the
GPU, actor TP/PP > 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import lock_pin, megatron_bridge_release_or_skip

ROOT = Path(__file__).resolve().parents[1]
TE_STANDIN = Path(__file__).resolve().parent / "te_standin"
TORCH_SITE_ENV = "VSL_MEGATRON_TORCH_SITE"


MEGATRON_PATH = r"""
import json, os, sys, typing
if not hasattr(typing, "override"):  # megatron-core uses 3.12's typing.override; this venv may be 3.11
    import typing_extensions
    typing.override = typing_extensions.override
import torch, transformers
from safetensors.torch import load_file
import verl_sglang_lora.register  # what every verl process imports: arms the registration guard
from verl_sglang_lora.runtime import bridge_registrations
from verl_sglang_lora.tools.offline_assets import write_tiny_qwen3

model_dir = write_tiny_qwen3(sys.argv[1])
hf = json.load(open(os.path.join(model_dir, "config.json")))
ckpt = {}
for f in sorted(os.listdir(model_dir)):
    if f.endswith(".safetensors"):
        ckpt.update(load_file(os.path.join(model_dir, f)))

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
torch.distributed.init_process_group("gloo", rank=0, world_size=1)
from megatron.core import parallel_state
parallel_state.initialize_model_parallel(1, 1)

# verl 0.9.1's engine (workers/engine/megatron/transformer_impl.py), in its order
from verl.models.mcore.bridge import AutoBridge
bridge = AutoBridge.from_hf_pretrained(model_dir, trust_remote_code=False)
provider = bridge.to_megatron_provider(load_weights=False)
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer.enums import AttnBackend
# megatron-core's own modules throughout: the local layer spec, and its torch RMSNorm for the final norm too (the block
# would take TE's, which the stand-in only names)
from megatron.core.transformer.torch_norm import WrappedTorchNorm
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
def local_block_spec(*args, **kwargs):  # the provider calls a spec that is not a ModuleSpec with its config
    return TransformerBlockSubmodules(
        layer_specs=[get_gpt_layer_local_spec(qk_layernorm=True, normalization="RMSNorm")] * hf["num_hidden_layers"],
        layer_norm=WrappedTorchNorm)
provider.transformer_layer_spec = local_block_spec
provider.apply_overrides_and_finalize(dtype=torch.float32, overrides=dict(
    tensor_model_parallel_size=1, pipeline_model_parallel_size=1, sequence_parallel=False, batch_p2p_comm=False,
    variable_seq_lengths=True, attention_backend=AttnBackend.unfused, moe_token_dispatcher_type="alltoall",
    moe_router_load_balancing_type="none", gradient_accumulation_fusion=False,
    use_cpu_initialization=True, perform_initialization=False))
fields = {k: getattr(provider, k) for k in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
          "num_query_groups", "kv_channels", "rotary_base", "layernorm_epsilon", "qk_layernorm", "vocab_size",
          "share_embeddings_and_output_weights", "gated_linear_unit", "add_bias_linear")}

from omegaconf import OmegaConf
import verl
lora = OmegaConf.load(os.path.join(os.path.dirname(verl.__file__), "trainer/config/model/hf_model.yaml")).lora
lora.rank, lora.alpha = 8, 8  # examples/run_qwen3_lora_megatron.sh: rank and alpha from LORA_RANK
from verl.workers.config.megatron_peft import get_peft_cls
model_config = OmegaConf.create({"lora": lora})
peft_cls = get_peft_cls(model_config=model_config, bridge=bridge, provider=provider, dtype=torch.float32)
from verl.utils.megatron_utils import McoreModuleWrapperConfig, make_megatron_module
import functools
# megatron-bridge resets use_cpu_initialization to its argument's default (False: allocate on CUDA); verl does not
# pass it, so it is passed here, the one change to verl's call on the CPU
provider.provide_distributed_model = functools.partial(provider.provide_distributed_model, use_cpu_initialization=True)
hf_config = transformers.AutoConfig.from_pretrained(model_dir)
module, _ = make_megatron_module(wrap_config=McoreModuleWrapperConfig(wrap_with_ddp=False), tf_config=None,
                                 hf_config=hf_config, bridge=bridge, provider=provider, peft_cls=peft_cls,
                                 peft_config=model_config.lora)
bridge.load_hf_weights(module, model_dir)
params = dict(module[0].named_parameters())

nh, ng, hd = hf["num_attention_heads"], hf["num_key_value_heads"], hf["head_dim"]
ffn = hf["intermediate_size"]

def qkv_parts(t):
    # megatron-core's linear_qkv rows: per query group, that group's q heads, then its k head, then its v head
    g = t.reshape(ng, (nh // ng + 2) * hd, *t.shape[1:])
    q = g[:, : nh // ng * hd].reshape(nh * hd, *t.shape[1:])
    k = g[:, nh // ng * hd : (nh // ng + 1) * hd].reshape(ng * hd, *t.shape[1:])
    v = g[:, (nh // ng + 1) * hd :].reshape(ng * hd, *t.shape[1:])
    return q, k, v

base_mismatch = []
def same(what, a, b):
    if a.shape != b.shape or not torch.equal(a, b.to(a.dtype)):
        base_mismatch.append(what)
same("embed", params["embedding.word_embeddings.weight"], ckpt["model.embed_tokens.weight"])
same("lm_head", params["output_layer.weight"], ckpt["lm_head.weight"])
same("norm", params["decoder.final_layernorm.weight"], ckpt["model.norm.weight"])
for i in range(hf["num_hidden_layers"]):
    m, h = f"decoder.layers.{i}.", f"model.layers.{i}."
    for part, name in zip(qkv_parts(params[m + "self_attention.linear_qkv.to_wrap.weight"]), "qkv"):
        same(f"{i}.{name}_proj", part, ckpt[h + f"self_attn.{name}_proj.weight"])
    same(f"{i}.o_proj", params[m + "self_attention.linear_proj.to_wrap.weight"], ckpt[h + "self_attn.o_proj.weight"])
    fc1 = params[m + "mlp.linear_fc1.to_wrap.weight"]
    same(f"{i}.gate_proj", fc1[:ffn], ckpt[h + "mlp.gate_proj.weight"])
    same(f"{i}.up_proj", fc1[ffn:], ckpt[h + "mlp.up_proj.weight"])
    same(f"{i}.down_proj", params[m + "mlp.linear_fc2.to_wrap.weight"], ckpt[h + "mlp.down_proj.weight"])
    for mc_norm, hf_norm in (("input_layernorm", "input_layernorm"), ("pre_mlp_layernorm", "post_attention_layernorm"),
                             ("self_attention.q_layernorm", "self_attn.q_norm"),
                             ("self_attention.k_layernorm", "self_attn.k_norm")):
        same(f"{i}.{hf_norm}", params[m + mc_norm + ".weight"], ckpt[h + hf_norm + ".weight"])

# a trained adapter: LoRA's B starts at zero, so give every adapter tensor distinct values first
gen = torch.Generator().manual_seed(0)
with torch.no_grad():
    for name, p in params.items():
        if ".adapter." in name:
            p.copy_(torch.randn(p.shape, generator=gen))
trainable = sorted(n for n, p in params.items() if p.requires_grad)

exported = {name: t.detach().clone()
            for name, t in bridge.export_adapter_weights(module, cpu=True, show_progress=False)}
expected = {}
for i in range(hf["num_hidden_layers"]):
    m, h = f"decoder.layers.{i}.", f"model.layers.{i}."
    def ad(mod, side):
        return params[m + f"{mod}.adapter.linear_{side}.weight"].detach()
    for part, name in zip(qkv_parts(ad("self_attention.linear_qkv", "out")), "qkv"):
        expected[h + f"self_attn.{name}_proj.lora_A.weight"] = ad("self_attention.linear_qkv", "in")
        expected[h + f"self_attn.{name}_proj.lora_B.weight"] = part
    expected[h + "self_attn.o_proj.lora_A.weight"] = ad("self_attention.linear_proj", "in")
    expected[h + "self_attn.o_proj.lora_B.weight"] = ad("self_attention.linear_proj", "out")
    for j, name in enumerate(("gate_proj", "up_proj")):
        expected[h + f"mlp.{name}.lora_A.weight"] = ad("mlp.linear_fc1", "in")
        expected[h + f"mlp.{name}.lora_B.weight"] = ad("mlp.linear_fc1", "out")[j * ffn : (j + 1) * ffn]
    expected[h + "mlp.down_proj.lora_A.weight"] = ad("mlp.linear_fc2", "in")
    expected[h + "mlp.down_proj.lora_B.weight"] = ad("mlp.linear_fc2", "out")
def key(name):  # the export may carry a PEFT prefix; compare on the module path
    return name.removeprefix("base_model.model.")
by_key = {key(n): t for n, t in exported.items()}
adapter_mismatch = sorted(n for n, t in expected.items() if n in by_key and not (
    by_key[n].shape == t.shape and torch.equal(by_key[n].to(t.dtype), t)))

# The export as a function: the checkpoint in transformers with each exported pair merged (W + alpha/r * B @ A, LoRA's
# definition; what SGLang computes unmerged) must give the Megatron model's own logits, before and after a training step
ref = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
ref_base = {k: v.clone() for k, v in ref.state_dict().items()}  # each call merges into the checkpoint's own weights

def served_logits(export, swap_gate_up=False):
    state = {k: v.clone() for k, v in ref_base.items()}
    adapter = {key(n): t.float() for n, t in export.items()}
    for n in [n for n in adapter if n.endswith(".lora_A.weight")]:
        stem = n.removesuffix(".lora_A.weight")
        b = adapter[stem + ".lora_B.weight"]
        if swap_gate_up and stem.endswith("gate_proj"):
            b = adapter[stem.replace("gate_proj", "up_proj") + ".lora_B.weight"]
        state[stem + ".weight"] += (lora.alpha / lora.rank) * b @ adapter[n]
    ref.load_state_dict(state)
    with torch.no_grad():
        return ref(tokens).logits

# megatron-core's RoPE moves its frequencies to torch.cuda.current_device() at the first forward: the CPU here
torch.cuda.current_device = lambda: torch.device("cpu")
# and takes TE's kernels where TE imports: the stand-in's placeholders compute nothing, so megatron-core's own
# torch code paths (what it runs without TE) are selected
import megatron.core.transformer.attention as mc_attention
mc_attention.SplitAlongDim, mc_attention.HAVE_FUSED_QKV_ROPE = None, False
# the model-parallel CUDA RNG (dropout under TP) has no CPU state; the tracker that forks nothing (dropout is 0)
from megatron.core.tensor_parallel.random import initialize_rng_tracker
initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
tokens = torch.randint(0, hf["vocab_size"], (2, 16), generator=gen)
positions = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
causal = torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool).triu(1).expand(tokens.shape[0], 1, -1, -1)  # True: masked
model = module[0]
def megatron_logits():
    model.eval()
    with torch.no_grad():
        return model(tokens, positions, causal)
def gap(a, b):
    return float((a - b).abs().max() / b.abs().max())

trained = megatron_logits()
forward = {"trained": gap(served_logits(exported), trained),
           "gate_up_swapped": gap(served_logits(exported, swap_gate_up=True), trained),
           "base_only": gap(served_logits({}), trained)}
model.train()
logits = model(tokens, positions, causal)
loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
loss.backward()
with_grad = sorted(n for n, p in params.items() if p.grad is not None and bool(p.grad.abs().sum() > 0))
with torch.no_grad():
    for n, p in params.items():
        if p.grad is not None:
            p -= 0.5 * p.grad
stepped = {name: t.detach().clone() for name, t in bridge.export_adapter_weights(module, cpu=True, show_progress=False)}
after = megatron_logits()
forward.update({"after_step": gap(served_logits(stepped), after),
                "step_moved": gap(trained, after),
                "export_moved": sum(not torch.equal(stepped[n], exported[n]) for n in exported)})

from verl_sglang_lora.runtime.sync.flat_adapter import AdapterCollector
from verl_sglang_lora.sglang_contract.weight_names import ModelWeightNames
names = ModelWeightNames.from_model_path(model_dir)
collected = AdapterCollector("cpu").collect(iter(exported.items()), names.resolve_lora)
print(json.dumps({
    "torch": torch.__version__, "transformers": transformers.__version__,
    "megatron_core": __import__("importlib.metadata").metadata.version("megatron-core"),
    "skipped": bridge_registrations.skipped,
    "fields": {k: v if isinstance(v, (int, float, bool)) else str(v) for k, v in fields.items()},
    "hf": hf, "base_mismatch": base_mismatch, "trainable": trainable,
    "exported": sorted(map(key, exported)), "expected": sorted(expected), "adapter_mismatch": adapter_mismatch,
    "collected": sorted(collected.tensors), "collected_nbytes": collected.nbytes,
    "expected_nbytes": sum(t.numel() * t.element_size() for t in expected.values()),
    "forward": forward, "with_grad": with_grad, "loss": float(loss),
}))
"""


@pytest.fixture(scope="module")
def megatron_run(tmp_path_factory) -> dict:
    release = megatron_bridge_release_or_skip()
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "VERL_SGLANG_LORA_BRIDGE_REGISTRATIONS"}
    # VSL_MEGATRON_TORCH_SITE: a `pip install --target` dir with another torch, put first (e.g. SGLang 0.5.23's 2.14.1)
    other_torch = [os.environ[TORCH_SITE_ENV]] if os.environ.get(TORCH_SITE_ENV) else []
    env["PYTHONPATH"] = os.pathsep.join(map(str, (*other_torch, TE_STANDIN, release, ROOT)))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(MEGATRON_PATH),
                           str(tmp_path_factory.mktemp("tiny_qwen3")), str(port)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-6000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_stack_is_the_carry_under_sglang_0523s_transformers(megatron_run: dict) -> None:
    assert megatron_run["transformers"] == lock_pin("requirements-sglang0.5.23.lock", "transformers")
    assert megatron_run["megatron_core"] == lock_pin("requirements-megatron.lock", "megatron-core")
    if os.environ.get(TORCH_SITE_ENV):  # the torch asked for is the one that ran
        from importlib.metadata import distributions

        wanted = {d.version for d in distributions(path=[os.environ[TORCH_SITE_ENV]]) if d.metadata["Name"] == "torch"}
        assert megatron_run["torch"].split("+")[0] in wanted, (megatron_run["torch"], wanted)  # +cu130: a build tag
    # the guard is what let the import through (the H200's break); nothing else was skipped
    assert {(auto, t) for auto, t, _ in megatron_run["skipped"]} == {
        ("AutoConfig", "qwen3_asr"), ("AutoModel", "qwen3_asr"), ("AutoProcessor", "qwen3_asr")}


def test_provider_matches_the_checkpoint_config(megatron_run: dict) -> None:
    hf, f = megatron_run["hf"], megatron_run["fields"]
    assert (f["num_layers"], f["hidden_size"], f["ffn_hidden_size"]) == (
        hf["num_hidden_layers"], hf["hidden_size"], hf["intermediate_size"])
    assert (f["num_attention_heads"], f["num_query_groups"], f["kv_channels"]) == (
        hf["num_attention_heads"], hf["num_key_value_heads"], hf["head_dim"])
    assert f["rotary_base"] == hf["rope_theta"] and f["layernorm_epsilon"] == hf["rms_norm_eps"]
    assert f["qk_layernorm"] and f["gated_linear_unit"] and not f["add_bias_linear"]
    assert f["share_embeddings_and_output_weights"] == hf.get("tie_word_embeddings", False)
    assert f["vocab_size"] == hf["vocab_size"]


def test_load_hf_weights_is_byte_exact(megatron_run: dict) -> None:
    assert megatron_run["base_mismatch"] == []


def test_only_the_adapter_trains(megatron_run: dict) -> None:
    layers = megatron_run["hf"]["num_hidden_layers"]
    assert len(megatron_run["trainable"]) == layers * 4 * 2  # linear_qkv/proj/fc1/fc2 x linear_in/out
    assert all(".adapter.linear_" in n for n in megatron_run["trainable"])


def test_exported_adapter_is_the_trained_one_in_peft_layout(megatron_run: dict) -> None:
    layers = megatron_run["hf"]["num_hidden_layers"]
    assert megatron_run["exported"] == megatron_run["expected"]
    assert len(megatron_run["exported"]) == layers * 7 * 2  # q/k/v/o/gate/up/down x lora_A/B
    assert megatron_run["adapter_mismatch"] == []


def test_the_plugin_collects_the_export_against_the_served_checkpoint(megatron_run: dict) -> None:
    assert [n.removeprefix("base_model.model.") for n in megatron_run["collected"]] == megatron_run["expected"]
    assert all(n.startswith("base_model.model.") for n in megatron_run["collected"])
    assert megatron_run["collected_nbytes"] == megatron_run["expected_nbytes"]


# fp32 on both sides; the two implementations differ only in the order of their sums (~1e-6 of the largest logit)
SAME_FUNCTION = 1e-5


def test_the_export_computes_what_the_megatron_model_computes(megatron_run: dict) -> None:
    f = megatron_run["forward"]
    assert f["trained"] < SAME_FUNCTION, f  # the export, merged into the checkpoint in transformers
    assert f["after_step"] < SAME_FUNCTION, f  # and again after an optimizer step on the adapter
    # the comparison can fail: a mis-routed pair, or the base alone, is far off; the step moved the model and the export
    assert min(f["gate_up_swapped"], f["base_only"], f["step_moved"]) > 1000 * SAME_FUNCTION, f
    assert f["export_moved"] == len(megatron_run["exported"])


def test_the_step_reaches_every_adapter_tensor_and_nothing_else(megatron_run: dict) -> None:
    assert megatron_run["with_grad"] == megatron_run["trainable"]
