"""The served-effect check and the canary against log-probs SGLang's real LoRA path serves on CPU.

The rollout's log-probs come from SGLang's ``LoRAManager`` with its ``torch_native`` kernels: the adapter a request
names is resolved through SGLang's own refs and pool, and its delta computed by SGLang's layer wrappers
(``tests/resident_selfcheck.ServedModel``). The trainer's log-probs (``old``: with the trained adapter; ``ref``: the
base) are computed from the PEFT tensors in float32, so the two sides differ by bf16 numerics as a trainer and a
server do. Each wrong adapter is really loaded into SGLang and really served.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.conftest import sglang_or_skip  # noqa: E402
from verl_sglang_lora.runtime.settings import PluginSettings  # noqa: E402
from verl_sglang_lora.runtime.sync import served_effect as se  # noqa: E402
from verl_sglang_lora.runtime.sync.canary import CanaryError, CanaryExpectation, judge_canary  # noqa: E402

RANK, ALPHA = 8, 16
SCALING = ALPHA / RANK
MIN_SNR = PluginSettings().served_effect_min_snr


def _variants() -> dict[str, tuple[dict, dict | None]]:
    """name -> (tensors SGLang is given, their adapter config when it is not the trained one's)."""
    from tests import resident_selfcheck as sc

    trained = sc.peft_adapter(RANK, seed=1, scale=0.05)
    unrelated = sc.peft_adapter(RANK, seed=2, scale=0.05)

    def edit(fn) -> dict:
        return {k: fn(k, v) for k, v in trained.items()}

    return {
        "trained": (trained, None),
        "zero_b": (edit(lambda k, v: torch.zeros_like(v) if "lora_B" in k else v), None),  # step 1: B is zero
        "half_loaded": (edit(lambda k, v: torch.zeros_like(v) if ".layers.1." in k and "lora_B" in k else v), None),
        "negated": (edit(lambda k, v: -v if "lora_B" in k else v), None),
        "misscaled": (trained, {"r": RANK, "lora_alpha": ALPHA / 4, "target_modules": list(sc.HF_TARGETS),
                                "peft_type": "LORA"}),  # SGLang told a quarter of the scaling
        "unrelated": (unrelated, None),
        "trained_plus_unrelated": ({k: (v.float() + unrelated[k].float()).to(v.dtype) if "lora_B" in k else v
                                    for k, v in trained.items()}, None),
        "stale": (edit(lambda k, v: (0.3 * v.float()).to(v.dtype) if "lora_B" in k else v), None),  # B still growing
    }


@pytest.fixture(scope="module")
def served():
    sglang_or_skip("sglang.srt.lora.backend.torch_backend")
    from tests import resident_selfcheck as sc

    model = sc.ServedModel(RANK, max_loras=len(_variants()) + 1)
    variants = _variants()
    for name, (tensors, config) in variants.items():
        model.load(name, tensors, config=config)
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, model.VOCAB, (33,), generator=gen).tolist() for _ in range(16)]
    yield model, variants, prompts
    model.close()


def _batch(model, prompts, served_name: str, trained: dict | None) -> dict[str, torch.Tensor]:
    """verl's three log-prob tensors for a step whose samples SGLang served with ``served_name``."""
    rows = {se.ROLLOUT: [], se.OLD: [], se.REF: []}
    for ids in prompts:
        rows[se.ROLLOUT].append(model.served(served_name, ids))
        rows[se.OLD].append(model.reference(trained, SCALING, ids))
        rows[se.REF].append(model.reference(None, SCALING, ids))
    out = {k: torch.tensor(v, dtype=torch.float32) for k, v in rows.items()}
    out[se.MASK] = torch.ones_like(out[se.OLD], dtype=torch.long)
    return out


def _judge(served, name: str) -> se.ServedEffect:
    model, variants, prompts = served
    check = se.ServedEffectCheck(MIN_SNR)
    floor = check.step(_batch(model, prompts, "zero_b", variants["zero_b"][0]))  # the run's first step
    assert floor.verdict == "inconclusive" and check.floor and check.floor > 0
    return check.step(_batch(model, prompts, name, variants["trained"][0]))


def test_the_trained_adapter_served_by_sglang_passes(served) -> None:
    result = _judge(served, "trained")
    assert result.verdict == "pass", result.summary()
    assert abs(result.ratio - 1) < 0.05 and result.snr >= MIN_SNR


@pytest.mark.parametrize("name", ["half_loaded", "negated", "misscaled", "unrelated", "trained_plus_unrelated",
                                  "stale"])
def test_every_wrong_adapter_sglang_serves_fails(served, name) -> None:
    result = _judge(served, name)
    assert result.verdict == "fail", (name, result.summary())


def test_the_base_model_served_fails(served) -> None:
    model, variants, prompts = served
    check = se.ServedEffectCheck(MIN_SNR)
    check.step(_batch(model, prompts, "zero_b", variants["zero_b"][0]))
    assert check.step(_batch(model, prompts, None, variants["trained"][0])).verdict == "fail"


def _canary(model, name: str | None, ids: list[int]) -> dict[str, float]:
    """What the server actor's canary measures: adapter vs base log-probs of one prompt, as SGLang serves them."""
    diffs = [abs(a - b) for a, b in zip(model.served(name, ids), model.served(None, ids))]
    return {"max_abs_diff": max(diffs), "tokens": float(len(diffs))}


def test_the_canary_sees_an_applied_adapter_and_a_zero_one(served) -> None:
    model, variants, prompts = served
    trained, zero = variants["trained"][0], variants["zero_b"][0]
    assert judge_canary(_canary(model, "trained", prompts[0]), CanaryExpectation.of(trained, SCALING), "t") == "pass"
    assert judge_canary(_canary(model, "zero_b", prompts[0]), CanaryExpectation.of(zero, SCALING), "z") == "pass"
    # the pushed adapter is non-zero but SGLang serves a zero one under the name: the canary stops the run
    with pytest.raises(CanaryError, match="did not change the served log-probs"):
        judge_canary(_canary(model, "zero_b", prompts[0]), CanaryExpectation.of(trained, SCALING), "t")
    # the pushed adapter is zero but SGLang serves a non-zero one under the name
    with pytest.raises(CanaryError, match="all-zero lora_B"):
        judge_canary(_canary(model, "trained", prompts[0]), CanaryExpectation.of(zero, SCALING), "z")


def test_an_unknown_adapter_name_is_refused_not_served_as_base(served) -> None:
    model, _, prompts = served
    with pytest.raises(ValueError, match="not loaded"):
        model.served("never_loaded", prompts[0])
