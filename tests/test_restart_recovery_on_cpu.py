"""Restart recovery (engine_kwargs.sglang_lora.server_max_restarts): the snapshot a restarted server loads, and
the Ray mechanics around it.

- the snapshot is a PEFT adapter directory: peft loads it onto the real model, SGLang's own LoRAConfig reads it;
- a real Ray actor created with the plugin's restart options dies (os._exit, as SGLang's watchdog ends the actor
  process); the call in flight is re-sent by Ray to the restarted actor, which recovers with the plugin's
  ``RestartRecovery`` / ``recover_server`` before serving it: relaunch, then ``/load_lora_adapter`` of the newest
  snapshot under its versioned name. SGLang's HTTP side is a stand-in aiohttp server here (it records the request;
  the real load is the GPU part, docs/validation.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import sglang_or_skip
from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config
from verl_sglang_lora.runtime.sync.snapshot import clear_snapshots, read_snapshot, snapshot_root, write_snapshot

RANK = 4


def _peft_adapter(model_path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    import peft
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_path)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=RANK, lora_alpha=2 * RANK, target_modules="all-linear"))
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p))
    config = normalize_peft_config(lora.peft_config["default"].to_dict())
    return config, dict(peft.get_peft_model_state_dict(lora))


def test_snapshot_is_a_peft_adapter_dir_sglang_and_peft_read(tiny_qwen3, tmp_path) -> None:
    import peft
    import transformers

    config, tensors = _peft_adapter(tiny_qwen3)
    root = snapshot_root(str(tmp_path), "01000000", "sglang_server_0_0")
    first = write_snapshot(root, name="verl_lora_v1", version=1, fingerprint="a", global_steps=1,
                           tensors=tensors, peft_config=config)
    snap = write_snapshot(root, name="verl_lora_v2", version=2, fingerprint="b", global_steps=2,
                          tensors=tensors, peft_config=config)
    assert read_snapshot(root) == snap and not Path(first.path).exists()  # only the newest is kept

    lora_config = sglang_or_skip("sglang.srt.lora.lora_config").LoRAConfig(snap.path)  # SGLang's disk reader
    assert lora_config.r == RANK and lora_config.lora_alpha == 2 * RANK

    base = transformers.AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    loaded = peft.PeftModel.from_pretrained(base, snap.path)
    state = peft.get_peft_model_state_dict(loaded)
    assert set(state) == set(tensors)
    assert all(torch.equal(state[k], tensors[k]) for k in tensors)

    clear_snapshots(root)
    assert read_snapshot(root) is None


_RAY_PROBE = r"""
import asyncio, json, os, sys
import ray, torch
from verl_sglang_lora.runtime.lora_plan import lora_plan
from verl_sglang_lora.runtime.recovery import RestartRecovery, ray_restart_options
from verl_sglang_lora.runtime.settings import PluginSettings
from verl_sglang_lora.runtime.sync.metrics import SyncMetrics
from verl_sglang_lora.runtime.sync.snapshot import write_snapshot, snapshot_root
from verl_sglang_lora.runtime.sync.versions import AdapterVersions

MARK = sys.argv[1]
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

@ray.remote(**ray_restart_options(1))
class Server:
    # the attributes recover_server uses, as SGLangLoRARollout has them; SGLang's load is a stand-in
    def __init__(self, root):
        self.lora = lora_plan({"lora_rank": 4, "target_modules": "all-linear", "lora": {}})
        self.nnodes = 1
        self.settings = PluginSettings(server_max_restarts=1, http_max_attempts=1)
        self.adapters = AdapterVersions()
        self.sync_metrics = SyncMetrics()
        self.global_steps = None
        self.snapshot_root = root
        self.recovery = RestartRecovery(1)
        self.loads = []
        self.launches = 0

    async def relaunch_server(self):
        self.launches += 1

    async def _load_adapter_from_disk(self, name, path, version, fingerprint, canary=None):
        self.loads.append({"lora_name": name, "lora_path": path})
        self.adapters.activate(name, version, fingerprint)

    def activate(self, name, version):
        self.adapters.activate(name, version, "fp")

    async def generate(self):
        # what SGLangLoRARollout.generate does first; the first instance dies here (as the actor does when
        # SGLang's scheduler crashes), the restarted one serves the re-sent call
        await self.recovery.ensure(self)
        if not os.path.exists(MARK):
            open(MARK, "w").close()
            os._exit(1)
        lease = self.adapters.acquire()
        return {"served_by": lease.name if lease else None, "global_steps": self.global_steps,
                "restarted": self.recovery.pending is False and self.launches == 1, "loads": self.loads,
                "restarts_metric": self.sync_metrics.drain()["sglang_lora/server_restarts"]}

root = snapshot_root(sys.argv[2], ray.get_runtime_context().get_job_id(), "sglang_server_0_0")
server = Server.options(name="sglang_server_0_0").remote(root)
ray.get(server.activate.remote("verl_lora_v7", 7))
snap = write_snapshot(root, name="verl_lora_v7", version=7, fingerprint="fp", global_steps=7,
                      tensors={"base_model.model.model.layers.0.mlp.down_proj.lora_A.weight": torch.ones(4, 8)},
                      peft_config={"r": 4, "lora_alpha": 8, "target_modules": ["down_proj"], "peft_type": "LORA"})
out = ray.get(server.generate.remote(), timeout=120)
out["snapshot_path"] = snap.path
print(json.dumps(out))
ray.shutdown()
"""


def test_dead_server_actor_is_restarted_and_serves_the_newest_adapter(tmp_path) -> None:
    from tests.server_probe import run_probe_script

    pytest.importorskip("ray")
    out = run_probe_script(_RAY_PROBE, str(tmp_path / "died"), str(tmp_path))  # the actor imports tests.server_probe
    assert (tmp_path / "died").exists()  # the first instance did die in the call
    # the re-sent call was served by the restarted actor, after one relaunch and a load of the snapshot
    assert out["served_by"] == "verl_lora_v7" and out["global_steps"] == 7 and out["restarted"]
    assert out["loads"] == [{"lora_name": "verl_lora_v7", "lora_path": out["snapshot_path"]}]
    assert out["restarts_metric"] == 1
