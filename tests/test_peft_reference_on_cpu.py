"""The peft reference of tests/gpu/test_served_matches_peft.py, checked on CPU (tests/peft_reference.py).

Its per-token log-probs against a forward per prefix with a float64 log-softmax, its adapter against the weights
merged by hand (W + lora_alpha / r * B A), the wrong variants, the tolerance, and the GPU test's adapter and
tokens on the offline tiny Qwen3 with Hugging Face bf16 standing in for the served engine.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from tests.peft_reference import (  # noqa: E402
    ADAPTER_SEED,
    ALPHA_PER_RANK,
    B_STD,
    MIN_EFFECT_IN_TOLERANCES,
    PROMPT_LEN,
    RESPONSE_LEN,
    TOKEN_SEED,
    TOL_FLOOR,
    TOL_MULTIPLE,
    lora_state,
    max_gap,
    mis_scaled,
    negated_b,
    random_peft_lora,
    response_logprobs,
    token_sequence,
    tolerance,
)

PROJECTIONS = 7  # q, k, v, o, gate, up, down: peft's all-linear on a Qwen3 decoder (lm_head excluded)
SERVER_RANK = 8  # tests/gpu/test_sglang_server_gpu.py's RANK


def _load(path, dtype=torch.float32):
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager").eval()


def test_response_logprobs_equal_a_forward_per_prefix(tiny_qwen3):
    model = _load(tiny_qwen3)
    ids = token_sequence(512, 12, seed=3)
    got = response_logprobs(model, ids, 5)
    want = []
    for t in range(len(ids) - 5, len(ids)):  # log p(ids[t] | ids[:t]) from the last position of the prefix alone
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids[:t]])).logits[0, -1].double()
        top = logits.max()
        want.append(float(logits[ids[t]] - top - torch.log(torch.exp(logits - top).sum())))
    assert len(got) == 5
    assert max_gap(got, want) < 1e-5
    assert max_gap(got, want[1:] + want[:1]) > 1e-3  # the check sees a misaligned token
    assert max_gap(got, response_logprobs(model, ids, 11)[-5:]) == 0.0
    with pytest.raises(ValueError):
        response_logprobs(model, ids, len(ids))


def test_reference_adapter_is_the_merged_weight_delta(tiny_qwen3):
    """peft's forward with the adapter equals the base model with W + lora_alpha / r * B A merged by hand."""
    rank, alpha = 4, 12.0
    base = _load(tiny_qwen3)
    lora = random_peft_lora(_load(tiny_qwen3), rank=rank, alpha=alpha, seed=5, b_std=0.1)
    tensors = lora_state(lora)
    merged = _load(tiny_qwen3)
    params = dict(merged.named_parameters())
    pairs = 0
    for name, a in tensors.items():
        if ".lora_A." not in name:
            continue
        b = tensors[name.replace(".lora_A.", ".lora_B.")]
        weight = name.removeprefix("base_model.model.").removesuffix(".lora_A.weight") + ".weight"
        with torch.no_grad():
            params[weight] += ((alpha / rank) * (b.double() @ a.double())).float()
        pairs += 1
    assert pairs == PROJECTIONS * merged.config.num_hidden_layers
    ids = token_sequence(512, 16, seed=4)
    with_adapter = response_logprobs(lora, ids, 8)
    assert max_gap(with_adapter, response_logprobs(merged, ids, 8)) < 1e-4
    assert max_gap(with_adapter, response_logprobs(base, ids, 8)) > 1e-2


def test_random_adapter_is_deterministic_and_non_zero(tiny_qwen3):
    first = lora_state(random_peft_lora(_load(tiny_qwen3), rank=4, alpha=8, seed=7, b_std=0.1))
    again = lora_state(random_peft_lora(_load(tiny_qwen3), rank=4, alpha=8, seed=7, b_std=0.1))
    other = lora_state(random_peft_lora(_load(tiny_qwen3), rank=4, alpha=8, seed=8, b_std=0.1))
    assert len(first) == 2 * PROJECTIONS * 2 and first.keys() == again.keys() == other.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not any(torch.equal(first[k], other[k]) for k in first)
    for name, t in first.items():
        assert float(t.norm()) > 0.0, f"{name} is all zero"
        if ".lora_A." in name:
            assert float(t.abs().max()) <= 1 / math.sqrt(t.shape[1])


def test_wrong_variants_change_only_what_they_name():
    tensors = {"m.lora_A.weight": torch.ones(2, 3), "m.lora_B.weight": torch.full((3, 2), 2.0)}
    flipped = negated_b(tensors)
    assert torch.equal(flipped["m.lora_A.weight"], tensors["m.lora_A.weight"])
    assert torch.equal(flipped["m.lora_B.weight"], -tensors["m.lora_B.weight"])
    assert torch.equal(tensors["m.lora_B.weight"], torch.full((3, 2), 2.0))  # the input is left as it was
    config = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}
    assert mis_scaled(config) == {"r": 8, "lora_alpha": 8.0, "target_modules": ["q_proj"]}
    assert config["lora_alpha"] == 16


def test_tolerance_gap_and_tokens():
    assert tolerance(0.0) == TOL_FLOOR == 2.0 ** -7
    assert tolerance(0.01) == pytest.approx(TOL_MULTIPLE * 0.01 + 2.0 ** -7)
    for bad in (-1e-3, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            tolerance(bad)
    assert max_gap([-1.0, -2.0, -3.0], [-1.5, -2.0, -2.75]) == 0.5
    with pytest.raises(ValueError):
        max_gap([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        max_gap([], [])
    ids = token_sequence(568, 64, seed=0)
    assert ids == token_sequence(568, 64, seed=0) != token_sequence(568, 64, seed=1)
    assert len(ids) == 64 and all(5 <= i < 568 for i in ids)


def test_gpu_constants_leave_margin_with_bf16_standing_in(tmp_path):
    """The GPU test's adapter and tokens on the offline tiny Qwen3, with Hugging Face in bf16 (adapter in bf16
    too) in place of the served engine: the adapter's gap stays well inside the tolerance, its effect is more than
    MIN_EFFECT_IN_TOLERANCES tolerances, and the wrong variants fall outside."""
    from verl_sglang_lora.tools.offline_assets import write_tiny_qwen3

    path = write_tiny_qwen3(str(tmp_path / "model"))
    alpha = ALPHA_PER_RANK * SERVER_RANK
    vocab = transformers.AutoConfig.from_pretrained(path).vocab_size
    ids = token_sequence(vocab, PROMPT_LEN + RESPONSE_LEN, seed=TOKEN_SEED)

    def bf16_lora(alpha_: float, negate_b: bool = False) -> list[float]:
        lora = random_peft_lora(_load(path, torch.bfloat16), rank=SERVER_RANK, alpha=alpha_, seed=ADAPTER_SEED,
                                b_std=B_STD, autocast_adapter_dtype=False)
        if negate_b:
            with torch.no_grad():
                for name, param in lora.named_parameters():
                    if ".lora_B." in name:
                        param.neg_()
        return response_logprobs(lora, ids, RESPONSE_LEN)

    reference_base = response_logprobs(_load(path), ids, RESPONSE_LEN)
    reference = response_logprobs(
        random_peft_lora(_load(path), rank=SERVER_RANK, alpha=alpha, seed=ADAPTER_SEED, b_std=B_STD), ids, RESPONSE_LEN
    )
    tol = tolerance(max_gap(response_logprobs(_load(path, torch.bfloat16), ids, RESPONSE_LEN), reference_base))
    assert max_gap(bf16_lora(alpha), reference) <= 0.6 * tol  # ~0.35 tol here: room for the engine's kernels
    assert max_gap(reference, reference_base) >= MIN_EFFECT_IN_TOLERANCES * tol
    assert max_gap(bf16_lora(alpha / 2), reference) > 5 * tol
    assert max_gap(bf16_lora(alpha, negate_b=True), reference) > 5 * tol
