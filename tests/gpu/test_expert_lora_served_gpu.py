"""Expert LoRA (PEFT ``target_parameters`` on a Qwen3-MoE's fused experts) served by SGLang on a GPU: the plugin's
conversion gives PEFT's log-probs, and the loader's ``verify`` proves the pool's expert bytes.

Skipped without CUDA, or without an SGLang that carries MoE LoRA code. The model is a small random Qwen3-MoE (2
layers, 8 experts) saved by transformers with its per-expert checkpoint names, every token routed to all 8 experts
(top-k = the expert count): the renormalised routing weights are then the router's softmax on both sides. With top 2
of 8, near-tied router logits let bf16 rounding alone pick another expert for some token, with or without the adapter,
and the served-vs-reference gap would measure that flip instead of the adapter's arithmetic (on CPU, bf16 against
float32 with top 2: a base gap of 0.042 nats, and one flipped token took the adapter gap to 0.30).

The served side is the sync client's path for an expert adapter: PEFT's saved tensors through ``convert_stream``
(A [r*E, in] -> [E, r, in], B [out, r*E] -> [E, out, r]), names resolved against the checkpoint, one flat CUDA buffer,
``normalize_peft_config``, ``load_lora_adapter_from_tensors`` on a server launched with the plugin's expert-LoRA args
(``--lora-target-modules ... gate_up_proj down_proj --no-experts-shared-outer-loras``, the custom weight loader).
The reference is PEFT on the Hugging Face model in float32 on the GPU, from the same checkpoint and the same (bf16)
adapter values; the tolerance is tests/gpu/test_served_matches_peft.py's (4 x the base model's gap + 2^-7).

The comparison must be able to fail: the experts' own share of the effect (full adapter against the same adapter with
the expert B's zeroed, both PEFT) is at least ``MIN_EFFECT_IN_TOLERANCES`` tolerances, and three wrong adapters exceed
the tolerance: the converted expert B's rolled by one expert (expert e served expert e-1's B), the expert B's halved
(the attention adapter intact), and ``lora_alpha`` halved.
"""

from __future__ import annotations

import asyncio
import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("sglang.srt.managers.io_struct")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

from verl_sglang_lora.sglang_contract.target_modules import sglang_serves_expert_lora  # noqa: E402

if not sglang_serves_expert_lora():
    pytest.skip("the installed SGLang has no MoE LoRA code", allow_module_level=True)

from tests.gpu.test_sglang_server_gpu import _prompt_logprobs, serve  # noqa: E402
from tests.peft_reference import (MIN_EFFECT_IN_TOLERANCES, PROMPT_LEN, RESPONSE_LEN, TOKEN_SEED,  # noqa: E402
                                  fill_lora, lora_state, max_gap, mis_scaled, response_logprobs, token_sequence,
                                  tolerance)
from verl_sglang_lora.runtime.lora_plan import lora_plan  # noqa: E402
from verl_sglang_lora.runtime.resident import LOADER_PATH  # noqa: E402
from verl_sglang_lora.runtime.resident import protocol as P  # noqa: E402
from verl_sglang_lora.runtime.resident.requests import (ResidentRequests, check_results,  # noqa: E402
                                                         send_loader_request)
from verl_sglang_lora.runtime.sync.adapter_push import adapter_request_fields  # noqa: E402
from verl_sglang_lora.runtime.sync.flat_adapter import AdapterCollector  # noqa: E402
from verl_sglang_lora.sglang_contract.expert_lora import ExpertDims, convert_stream  # noqa: E402
from verl_sglang_lora.sglang_contract.http_client import SGLangHTTPClient  # noqa: E402
from verl_sglang_lora.sglang_contract.installed import io_struct  # noqa: E402
from verl_sglang_lora.sglang_contract.launch_args import lora_launch_args  # noqa: E402
from verl_sglang_lora.sglang_contract.lora_request import REQUEST_CLASS, request_to_json  # noqa: E402
from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config  # noqa: E402
from verl_sglang_lora.sglang_contract.update_session import HeldSession  # noqa: E402
from verl_sglang_lora.sglang_contract.weight_names import ModelWeightNames  # noqa: E402

pytestmark = pytest.mark.gpu

H, HEADS, KV_HEADS, HEAD_DIM, EXPERTS, MOE_I, LAYERS, VOCAB = 256, 4, 2, 64, 8, 128, 2, 512
RANK, ALPHA, B_STD, ADAPTER_SEED = 8, 16, 0.2, 1
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
EXPERT_PARAMS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
WRONG = ("experts_rolled", "experts_half_b", "mis_scaled")


@pytest.fixture(scope="module")
def moe_path(tmp_path_factory):
    cfg = transformers.Qwen3MoeConfig(vocab_size=VOCAB, hidden_size=H, intermediate_size=2 * H,
                                      moe_intermediate_size=MOE_I, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                      num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, num_experts=EXPERTS,
                                      num_experts_per_tok=EXPERTS, norm_topk_prob=True, tie_word_embeddings=False,
                                      max_position_embeddings=512)
    cfg.architectures = ["Qwen3MoeForCausalLM"]
    torch.manual_seed(0)
    model = transformers.Qwen3MoeForCausalLM(cfg)
    out = tmp_path_factory.mktemp("qwen3_moe")
    model.to(torch.bfloat16).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def server(moe_path):
    plan = lora_plan({"lora_rank": RANK, "lora_alpha": ALPHA, "target_modules": ATTENTION,
                      "target_parameters": EXPERT_PARAMS, "lora": {}})
    args = lora_launch_args(plan, resident=True)
    assert args["experts_shared_outer_loras"] is False and {"gate_up_proj", "down_proj"} <= set(args["lora_target_modules"])
    yield from serve(moe_path, args, ["--skip-tokenizer-init"])


def _peft(model_path, dtype):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, attn_implementation="eager")
    config = peft.LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=ATTENTION,
                             target_parameters=EXPERT_PARAMS)
    lora = peft.get_peft_model(model.cuda().eval(), config, autocast_adapter_dtype=False)
    assert fill_lora(lora, ADAPTER_SEED, B_STD) == 4 * 2 * LAYERS + 2 * 2 * LAYERS
    with torch.no_grad():  # the adapter's values as bf16 holds them: the reference runs on the bytes sent
        for name, p in lora.named_parameters():
            if "lora_" in name:
                p.copy_(p.to(torch.bfloat16).to(p.dtype))
    return lora.eval()


def _zero_b(lora, ids: list[int], part: str) -> list[float]:
    """The reference's log-probs after every lora_B whose name contains ``part`` is zeroed."""
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if part in name and "lora_B" in name:
                p.zero_()
    return response_logprobs(lora, ids, RESPONSE_LEN)


def _sent(state: dict, config: dict, names: ModelWeightNames, expert_b=None):
    """(request config, flat adapter) as the sync client sends an expert adapter; ``expert_b`` changes each converted
    expert B [E, out, r] (a wrong adapter)."""
    dims = ExpertDims(EXPERTS, H, MOE_I)
    converted = list(convert_stream(iter(state.items()), dims))
    if expert_b is not None:
        converted = [(n, expert_b(t) if ".mlp.experts." in n and "lora_B" in n else t) for n, t in converted]
    adapter = AdapterCollector(torch.device("cuda")).collect(iter(converted), names.resolve_lora)
    return normalize_peft_config(config, modules=adapter.module_leaves()), adapter


@pytest.fixture(scope="module")
def results(server, moe_path):
    ids = token_sequence(VOCAB, PROMPT_LEN + RESPONSE_LEN, seed=TOKEN_SEED)
    lora = _peft(moe_path, torch.float32)
    reference = response_logprobs(lora, ids, RESPONSE_LEN)
    state = {k: v.to(torch.bfloat16) for k, v in lora_state(lora).items()}
    config = lora.peft_config["default"].to_dict()  # as verl's FSDP actor hands it over (sets, enums)
    # the experts' own share (the expert B's zeroed), then the base model (every B zeroed)
    reference_attention_only, reference_base = (_zero_b(lora, ids, part) for part in (".mlp.experts.", ""))
    del lora
    torch.cuda.empty_cache()

    names = ModelWeightNames.from_model_path(moe_path)
    assert any(".mlp.experts.0.gate_proj.weight" in n for n in names.names)  # the checkpoint is per-expert
    correct_config, correct = _sent(state, config, names)
    variants = {"correct": (correct_config, correct),
                "experts_rolled": _sent(state, config, names, expert_b=lambda b: torch.roll(b, 1, dims=0)),
                "experts_half_b": _sent(state, config, names, expert_b=lambda b: b * 0.5),
                "mis_scaled": (mis_scaled(correct_config), correct)}
    scaling = correct_config["lora_alpha"] / correct_config["r"]

    async def serve() -> dict:
        client = SGLangHTTPClient(server)

        async def call(method, request):
            return await client.post(method, request_to_json(request))

        out = {"base": await _prompt_logprobs(client, None, input_ids=ids)}
        for label, (adapter_config, adapter) in variants.items():
            name = f"experts_{label}"
            request = io_struct(REQUEST_CLASS)(lora_name=name, **adapter_request_fields(adapter_config, adapter, 1))
            await client.load_lora_adapter_from_tensors(request_to_json(request))
            out[label] = await _prompt_logprobs(client, name, input_ids=ids)
        # the loader's verify of the correct load: the tensors sent, then one expert B element sign-flipped
        session, requests = HeldSession(), ResidentRequests(torch.device("cuda"))
        flipped = dict(correct.tensors)
        key = next(k for k in flipped if ".mlp.experts." in k and "lora_B" in k)
        flipped[key] = flipped[key].clone()
        flipped[key].view(-1)[7] = -flipped[key].view(-1)[7] if flipped[key].view(-1)[7] != 0 else 1.0
        verdicts = {}
        for what, tensors in (("sent", correct.tensors), ("sign_flipped", flipped)):
            verify = requests.call("verify", "experts_correct", tensors, allow_unpinned=1)
            await send_loader_request(call, verify.blobs, LOADER_PATH, session)
            verdicts[what] = {"failed": check_results([verify], scaling), **verify.result()}
        await session.close(call)
        for label in variants:
            await client.unload_lora_adapter(f"experts_{label}")
        return out, verdicts

    served, verdicts = asyncio.run(serve())
    assert all(len(v) == len(ids) - 1 for v in served.values()), {k: len(v) for k, v in served.items()}
    response = {k: v[-RESPONSE_LEN:] for k, v in served.items()}
    gaps = {
        "base": max_gap(response["base"], reference_base),
        "adapter": max_gap(response["correct"], reference),
        "effect": max_gap(reference, reference_base),
        "experts_effect": max_gap(reference, reference_attention_only),
        **{label: max_gap(response[label], reference) for label in WRONG},
    }
    gaps["tol"] = tolerance(gaps["base"])
    print("expert LoRA served vs peft, max |delta log-prob| over the response:",
          ", ".join(f"{k}={v:.4g}" for k, v in gaps.items()))
    print("loader verify:", {k: (v["failed"] or "ok") for k, v in verdicts.items()})
    return gaps, verdicts


def test_served_expert_adapter_logprobs_equal_peft(results):
    gaps, _ = results
    assert math.isfinite(gaps["adapter"]) and gaps["adapter"] <= gaps["tol"], gaps


def test_the_experts_share_of_the_effect_is_measurable(results):
    gaps, _ = results
    assert gaps["experts_effect"] >= MIN_EFFECT_IN_TOLERANCES * gaps["tol"], gaps


@pytest.mark.parametrize("wrong", WRONG)
def test_wrong_expert_adapters_fail_the_comparison(results, wrong):
    gaps, _ = results
    assert gaps[wrong] > gaps["tol"], gaps


def test_loader_verify_proves_the_expert_bytes_on_the_gpu(results):
    """SGLang stores expert B pre-multiplied by the scaling in bf16; the loader compares it against the trainer's B
    times the same scaling: equal for the tensors sent, a mismatch for a sign flip."""
    _, verdicts = results
    assert verdicts["sent"]["failed"] is None, verdicts["sent"]
    assert verdicts["sign_flipped"]["error"] == P.ErrorCode.MISMATCH, verdicts["sign_flipped"]
