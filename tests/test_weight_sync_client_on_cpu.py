"""The plugin's weight-sync client (``SGLangLoRAServerAdapter``, built by verl's own ``ServerAdapter.__init__``)
against the real ``SGLangLoRARollout`` in a Ray actor (tests/server_probe.py: SGLang's engine and HTTP side are
stand-ins; the tensor-load body is validated with SGLang's own request class).

- a peft adapter (names as verl's FSDP engine hands them over, on CPU) goes through collect -> the server actor's
  two phases (staged under ``verl_lora_v<step>``, then committed: activation, step, canary) -> the snapshot of the
  committed version;
- with ``server_max_restarts=1`` the server dies in the middle of that load; Ray re-sends the call to the restarted
  actor, which stages the version again (no snapshot yet: none was ever committed), and the client commits it;
- an adapter with non-zero ``lora_B`` that the server does not apply (the stand-in ignores adapters) fails the
  canary loudly: the step stops instead of training on the base policy's samples.
"""

from __future__ import annotations

import pytest

from tests.server_probe import run_probe_script

_SCRIPT = r"""
import asyncio, json, os, socket, sys
from pathlib import Path
from verl_sglang_lora.tools.compat_probe import stub_inert_modules
stub_inert_modules()
import peft, ray, torch, transformers
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from verl_sglang_lora.runtime.sync.snapshot import read_snapshot
from verl_sglang_lora.runtime.sync_client import SGLangLoRAServerAdapter
from tests.server_probe import start_probe_server

model_path = sys.argv[1]
cfg, srv = start_probe_server(model_path, sys.argv[2])

# the hybrid worker's side: rank 0 of a one-process group, verl's own ServerAdapter constructor. verl's HTTP engine
# adapter (used by verl's base-weight path, not by adapter syncs) builds SGLang ServerArgs, which demand an
# accelerator: a placeholder records its address instead.
import verl.workers.rollout.sglang_rollout.sglang_rollout as verl_sglang_rollout
class EngineAddress:
    def __init__(self, **kwargs):
        self.address = (kwargs["host"], kwargs["port"])
verl_sglang_rollout.AsyncHttpServerAdapter = EngineAddress
os.environ.update(RANK="0", RAY_LOCAL_WORLD_SIZE="1")
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{port}")
mesh = init_device_mesh("cpu", (1, 1, 1), mesh_dim_names=("dp", "infer_tp", "infer_pp"))
client = SGLangLoRAServerAdapter(config=cfg.actor_rollout_ref.rollout, model_config=cfg.actor_rollout_ref.model,
                                 device_mesh=mesh)

model = transformers.AutoModelForCausalLM.from_pretrained(model_path)
lora = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
peft_config = lora.peft_config["default"].to_dict()
def adapter():  # verl's FSDP engine hands the adapter over on CPU, PEFT names
    return iter(list(peft.get_peft_model_state_dict(lora).items()))

out = {}
out["sync1"] = asyncio.run(client.update_weights(adapter(), global_steps=1, peft_config=peft_config,
                                                 base_sync_done=True))
out["state1"] = ray.get(srv.state.remote())
snap = read_snapshot(Path(out["state1"]["snapshot_root"]))
out["snapshot"] = None if snap is None else {"name": snap.name, "version": snap.version}
from safetensors.torch import load_file
out["snapshot_tensors"] = None if snap is None else len(load_file(f"{snap.path}/adapter_model.safetensors"))

with torch.no_grad():  # a trained adapter: non-zero lora_B, which the stand-in server does not apply
    for name, p in lora.named_parameters():
        if "lora_B" in name:
            p.copy_(torch.randn_like(p))
try:
    asyncio.run(client.update_weights(adapter(), global_steps=2, peft_config=peft_config, base_sync_done=True))
    out["sync2"] = "no error"
except Exception as exc:
    out["sync2"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out, default=str))
ray.shutdown()
"""


def test_client_syncs_follows_a_restarted_server_and_the_canary_catches_an_ignored_adapter(tiny_qwen3, tmp_path):
    pytest.importorskip("ray")
    pytest.importorskip("verl")
    pytest.importorskip("peft")
    out = run_probe_script(_SCRIPT, str(tiny_qwen3), str(tmp_path), extra_env={"PROBE_DIE_ON_FIRST_TENSOR_LOAD": "1"})

    sync1, state1 = out["sync1"], out["state1"]
    assert sync1["version"] == 1 and sync1["name"] == "verl_lora_v1"
    assert sync1["action"] == "load"  # the re-sent call staged version 1 on the restarted server; then committed
    assert out["snapshot_tensors"] == 2 * 7 * 2  # A and B of 7 projections in each of the 2 layers
    assert state1["restarts"] == 1  # the server died mid-load and was recovered before the re-sent call
    assert state1["loaded_from_disk"] == []  # nothing committed before the crash: no snapshot to serve
    assert state1["active"] == "verl_lora_v1" and state1["global_steps"] == 1
    assert state1["last_canary"]["verdict"] == "pass"  # LoRA's initial all-zero B changes nothing
    assert out["snapshot"] == {"name": "verl_lora_v1", "version": 1}
    assert "CanaryError" in out["sync2"] and "did not change the served log-probs" in out["sync2"]
