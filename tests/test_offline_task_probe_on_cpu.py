"""The CPU probe's merged-bfloat16 serving (scripts/offline_task_probe.py) on a real peft LoRA model: it serves
bf16(W + scaling * B @ A) with the adapter off, so a delta below half a bfloat16 step of a bf16 base weight is lost,
and every base weight is restored bit for bit afterwards."""

from __future__ import annotations

from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
probe = load_script(ROOT / "scripts" / "offline_task_probe.py", "offline_task_probe")


def _lora_model(b_scale: float) -> torch.nn.Module:
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(64, 64, bias=False))
    with torch.no_grad():  # a bf16 checkpoint loaded into float32: every base weight is bf16-exact
        base[0].weight.copy_((torch.randn(64, 64) * 0.02).to(torch.bfloat16).float())
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=8, target_modules=["0"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * b_scale)
    return model


def test_merged_bf16_serves_the_rounded_merge_and_restores_the_base() -> None:
    model = _lora_model(b_scale=0.05)
    layer = model.base_model.model[0]
    w0 = layer.base_layer.weight.detach().clone()
    delta = layer.lora_B["default"].weight @ layer.lora_A["default"].weight * layer.scaling["default"]
    x = torch.randn(4, 64)
    with torch.no_grad():
        trained = model(x)
        with probe.merged_bf16(model):
            served = model(x)
    expected = x @ (w0 + delta).to(torch.bfloat16).float().T
    assert torch.equal(served, expected)  # the rounded merge, adapter off (not added twice)
    assert not torch.equal(served, trained)
    assert torch.equal(layer.base_layer.weight, w0)  # restored bit for bit
    with torch.no_grad():
        assert torch.equal(model(x), trained)  # the adapter is on again


def test_a_delta_below_half_a_bf16_step_is_lost_in_the_merge() -> None:
    model = _lora_model(b_scale=1e-6)
    layer = model.base_model.model[0]
    w = layer.base_layer.weight.detach().clone()
    delta = layer.lora_B["default"].weight @ layer.lora_A["default"].weight * layer.scaling["default"]
    w16 = w.to(torch.bfloat16)
    step = torch.minimum(*((torch.nextafter(w16, torch.full_like(w16, d)).float() - w).abs()  # the nearer bf16 step
                           for d in (float("inf"), float("-inf"))))
    small = delta.abs() < step / 2
    with torch.no_grad(), probe.merged_bf16(model):
        merged = layer.base_layer.weight.detach().clone()
    assert small.float().mean() > 0.9  # the typical early-training case: most of the delta is below half a step
    assert torch.equal(merged[small], w[small])  # ... and is gone from the served weights
    assert not torch.equal(delta[small], torch.zeros_like(delta[small]))  # though the trained adapter has it
