"""The log-probs SGLang serves with a LoRA adapter equal peft's for the same adapter and tokens.

Skipped without CUDA or SGLang. The served side is the plugin's adapter path: peft's saved tensors go through the
weight-sync client's ``AdapterCollector`` (names resolved against the served checkpoint, one flat device buffer),
``normalize_peft_config`` and ``adapter_request_fields``, and are loaded with ``load_lora_adapter_from_tensors``
on a server started from the plugin's LoRA launch args (tests/gpu/test_sglang_server_gpu.py's fixtures). The
reference is peft (``LoraConfig`` / ``get_peft_model``, no dropout) on the Hugging Face model in float32 on the
GPU, loaded from the same checkpoint, eager attention, no TF32. Both score the same 64 token ids (a 32-token
prompt and a 32-token response) and are compared on the response's 32 log-probs.

Tolerance. The served model runs in bf16 (8 significant bits, unit roundoff 2^-9), the reference in float32, so
the two never agree exactly; how far they drift apart depends on the model's depth and width and on the attention
and norm kernels, so the gap is measured rather than guessed: ``base_gap`` = max |served - reference| over the
response tokens with no adapter on either side. With the adapter the comparison passes when

    max |served(adapter) - peft(adapter)| <= tol = 4 * base_gap + 2^-7

* ``4 *``: each adapted projection adds to the base GEMM's own rounding the rounding of A and B to bf16 on load,
  of the rank-r product ``x A^T`` and of ``(x A^T) B^T`` before it is scaled and added. The adapter's output is
  about as large as the base projection's (it moves the log-probs by up to ~1 nat), so these at most ~4 extra
  roundings per projection, each of relative size <= 2^-9 and independent, raise the per-layer error by about
  sqrt(1 + 4) ~ 2.2 over the base model's; 4 leaves ~2x for the max over 32 tokens. (Hugging Face in bf16 vs
  float32 on CPU, same model and adapter construction, six seeds of tokens and adapter: adapter gap / base gap up
  to 2.4, adapter gaps 0.17-0.44 tol; tests/test_peft_reference_on_cpu.py checks this test's own seeds.)
* ``+ 2^-7``: the served logits are bf16. This model's logits reach magnitude 1-2, where bf16's spacing is
  2^-7, so their rounding alone moves a log-prob (target logit minus log-sum-exp) by up to 2 * 2^-8 = 2^-7,
  whatever the depth; the floor keeps a lucky-small ``base_gap`` from asking for more than the logits can
  resolve.

The comparison must be able to fail: the adapter moves peft's log-probs by >= 10 tol (else the test fails as
inconclusive), and two wrong adapters, compared against peft's log-probs of the correct one, must exceed tol:
the same tensors with ``lora_alpha`` halved (served at half the scaling) and the same adapter with every lora_B
negated (the weight delta sign-flipped).
"""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("sglang.srt.managers.io_struct")
pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

# the server and checkpoint fixtures and the log-prob request of the GPU suite (imported, so pytest finds them here)
from tests.gpu.test_sglang_server_gpu import RANK, _prompt_logprobs, model_path, server  # noqa: E402,F401
from tests.peft_reference import (  # noqa: E402
    ADAPTER_SEED,
    ALPHA_PER_RANK,
    B_STD,
    MIN_EFFECT_IN_TOLERANCES,
    PROMPT_LEN,
    RESPONSE_LEN,
    TOKEN_SEED,
    lora_state,
    max_gap,
    mis_scaled,
    negated_b,
    random_peft_lora,
    response_logprobs,
    token_sequence,
    tolerance,
)
from verl_sglang_lora.runtime.sync.adapter_push import adapter_request_fields  # noqa: E402
from verl_sglang_lora.runtime.sync.device import current_device  # noqa: E402
from verl_sglang_lora.runtime.sync.flat_adapter import AdapterCollector  # noqa: E402
from verl_sglang_lora.sglang_contract.http_client import SGLangHTTPClient  # noqa: E402
from verl_sglang_lora.sglang_contract.installed import io_struct  # noqa: E402
from verl_sglang_lora.sglang_contract.lora_request import REQUEST_CLASS, request_to_json  # noqa: E402
from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config  # noqa: E402
from verl_sglang_lora.sglang_contract.weight_names import ModelWeightNames  # noqa: E402

pytestmark = pytest.mark.gpu

ALPHA = ALPHA_PER_RANK * RANK
WRONG = ("mis_scaled", "negated_b")


async def _served_response(client: SGLangHTTPClient, lora_name: str | None, ids: list[int]) -> list[float]:
    logprobs = await _prompt_logprobs(client, lora_name, input_ids=ids)
    assert len(logprobs) == len(ids) - 1, f"SGLang returned {len(logprobs)} input log-probs for {len(ids)} tokens"
    return logprobs[-RESPONSE_LEN:]


@pytest.fixture(scope="module")
def gaps(server, model_path) -> dict[str, float]:  # noqa: F811 (the imported fixtures)
    """max |a - b| over the response tokens for each comparison the tests judge."""
    vocab = transformers.AutoConfig.from_pretrained(model_path).vocab_size
    ids = token_sequence(vocab, PROMPT_LEN + RESPONSE_LEN, seed=TOKEN_SEED)

    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_path, dtype=torch.float32, attn_implementation="eager"
    ).cuda().eval()
    reference_base = response_logprobs(model, ids, RESPONSE_LEN)
    lora = random_peft_lora(model, rank=RANK, alpha=ALPHA, seed=ADAPTER_SEED, b_std=B_STD)
    reference = response_logprobs(lora, ids, RESPONSE_LEN)

    # the weight-sync client's path: names resolved against the served checkpoint, one reused flat device buffer
    names = ModelWeightNames.from_model_path(model_path)
    collector = AdapterCollector(current_device())
    tensors = lora_state(lora)
    modules = collector.collect(tensors.items(), names.resolve_lora).module_leaves()
    config = normalize_peft_config(lora.peft_config["default"], modules=modules)
    variants = {
        "correct": (config, tensors),
        "mis_scaled": (mis_scaled(config), tensors),
        "negated_b": (config, negated_b(tensors)),
    }

    async def serve() -> dict[str, list[float]]:
        client = SGLangHTTPClient(server)
        out = {"base": await _served_response(client, None, ids)}
        for label, (adapter_config, named) in variants.items():
            adapter = collector.collect(named.items(), names.resolve_lora)
            lora_name = f"peft_reference_{label}"
            request = io_struct(REQUEST_CLASS)(lora_name=lora_name, **adapter_request_fields(adapter_config, adapter, 1))
            await client.load_lora_adapter_from_tensors(request_to_json(request))
            out[label] = await _served_response(client, lora_name, ids)
            await client.unload_lora_adapter(lora_name)
        return out

    served = asyncio.run(serve())
    result = {
        "base": max_gap(served["base"], reference_base),
        "adapter": max_gap(served["correct"], reference),
        "effect": max_gap(reference, reference_base),
        "served_effect": max_gap(served["correct"], served["base"]),
        **{label: max_gap(served[label], reference) for label in WRONG},
    }
    result["tol"] = tolerance(result["base"])
    print("served vs peft, max |delta log-prob| over the response:",
          ", ".join(f"{k}={v:.4g}" for k, v in result.items()))
    return result


def test_served_adapter_logprobs_equal_peft(gaps):
    assert gaps["adapter"] <= gaps["tol"], (
        f"served log-probs with the adapter differ from peft's by {gaps['adapter']:.4g} > tol {gaps['tol']:.4g} "
        f"(= 4 * base gap {gaps['base']:.4g} + 2^-7); all gaps: {gaps}"
    )


def test_adapter_effect_is_far_beyond_the_tolerance(gaps):
    """Otherwise a served base model (adapter ignored) would pass the comparison."""
    assert gaps["effect"] >= MIN_EFFECT_IN_TOLERANCES * gaps["tol"], (
        f"the adapter moves peft's log-probs by {gaps['effect']:.4g}, under {MIN_EFFECT_IN_TOLERANCES:g} x tol "
        f"{gaps['tol']:.4g}: the comparison could not tell a served adapter from none; all gaps: {gaps}"
    )
    assert gaps["served_effect"] > gaps["tol"], f"the served log-probs did not move with the adapter: {gaps}"


@pytest.mark.parametrize("wrong", WRONG)
def test_wrong_adapter_fails_the_comparison(gaps, wrong):
    assert gaps[wrong] > gaps["tol"], (
        f"the {wrong} adapter's served log-probs are within tol {gaps['tol']:.4g} of peft's for the correct "
        f"adapter ({gaps[wrong]:.4g}): the comparison cannot tell adapters apart; all gaps: {gaps}"
    )
