"""verl's FSDP2 LoRA collect, with and without the plugin's device-collect wrapper, on a real FSDP2-sharded peft
model (one gloo process): the same names and values; the wrapper only skips the host copy (on CPU both stay on
the host), and every other case is verl's own function."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = r"""
import json, os, socket, sys
import torch, torch.distributed as dist, transformers, peft
from torch.distributed.fsdp import fully_shard
from verl.utils import fsdp_utils
from verl_sglang_lora.verl_glue import device_collect

with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{port}")
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])
lora = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
with torch.no_grad():
    for n, p in lora.named_parameters():
        if "lora_B" in n:
            p.normal_()
fully_shard(lora)
original = fsdp_utils.collect_lora_params
stock = original(module=lora, layered_summon=False, base_sync_done=True)
out = {"installed": device_collect.install(), "fsdp_version": fsdp_utils.fsdp_version(lora)}
import verl.workers.engine.fsdp.transformer_impl as impl
out["bound_wrapped"] = impl.collect_lora_params is fsdp_utils.collect_lora_params is not original
mine = fsdp_utils.collect_lora_params(module=lora, layered_summon=False, base_sync_done=True)
out["names_equal"] = list(stock) == list(mine) and len(stock) > 0
out["values_equal"] = all(torch.equal(stock[k], mine[k]) for k in stock)
out["not_dtensor"] = all(type(t) is torch.Tensor for t in mine.values())
out["reinstall_idempotent"] = device_collect.install() and fsdp_utils.collect_lora_params.__wrapped__ is original
print(json.dumps(out))
dist.destroy_process_group()
"""


def test_device_collect_equals_verls_collect_on_fsdp2(tiny_qwen3) -> None:
    pytest.importorskip("verl")
    pytest.importorskip("peft")
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(tiny_qwen3)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"installed": True, "fsdp_version": 2, "bound_wrapped": True, "names_equal": True,
                   "values_equal": True, "not_dtensor": True, "reinstall_idempotent": True}
