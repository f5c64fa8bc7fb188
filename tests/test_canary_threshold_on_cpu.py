"""The canary's thresholds against a real bf16 model (the offline tiny Qwen3 the example trains, peft's LoRA):
an adapter whose bound on ||scaling * B @ A|| reaches ``INCONCLUSIVE_EFFECT`` does move the canary prompt's
log-probs, so ``judge_canary`` does not raise a false ``CanaryError`` once training moves the adapter; an all-zero-B
adapter moves nothing. CPU bf16 matmuls stand in for SGLang's GPU kernels here (same dtype and LoRA algebra, other
rounding); the GPU run checks the served side (docs/validation.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from verl_sglang_lora.runtime.sync.canary import INCONCLUSIVE_EFFECT, CanaryExpectation, canary_prompt_ids, judge_canary


def test_adapters_above_the_inconclusive_bound_move_bf16_log_probs(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    from verl_sglang_lora.tools import offline_assets

    offline_assets.write_offline_assets(str(tmp_path), seed=0, n_train=8, n_test=2)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "model", dtype=torch.bfloat16)
    model = peft.get_peft_model(model, peft.LoraConfig(r=32, lora_alpha=32, target_modules="all-linear"))
    ids = torch.tensor([canary_prompt_ids(SimpleNamespace(hf_config=model.config))])

    def log_probs() -> torch.Tensor:
        with torch.no_grad():
            logits = model(ids).logits.float()
        return torch.log_softmax(logits[0, :-1], -1).gather(-1, ids[0, 1:, None]).squeeze(-1)

    with model.disable_adapter():
        base = log_probs()
    seen = []
    for std in (0.0, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3):
        gen = torch.Generator().manual_seed(0)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.data = (torch.randn(p.shape, generator=gen) * std).to(p.dtype)
        tensors = {n: p.detach() for n, p in model.named_parameters() if "lora_" in n}
        expect = CanaryExpectation.of(tensors, scaling=1.0)
        diff = float((log_probs() - base).abs().max())
        verdict = judge_canary({"max_abs_diff": diff}, expect, f"b_std_{std}")  # raises on a false alarm
        seen.append((std, expect.effect_bound, diff, verdict))
    assert seen[0][2] == 0.0 and seen[0][3] == "pass"  # LoRA's initial state serves the base exactly
    above = [s for s in seen if s[1] >= INCONCLUSIVE_EFFECT]
    assert above, seen  # the sweep reaches the bound where a zero change would be a CanaryError
    assert all(s[2] > 0 and s[3] == "pass" for s in above), seen
    print("canary sweep (B std, effect bound, max |dlogp|, verdict):", seen)
