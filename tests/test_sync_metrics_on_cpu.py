"""Sync figures reach verl's per-step metrics: the server-side record, the merge over replicas, and verl's real
``compute_data_metrics`` wrapped through ``import verl`` (entry point) with named Ray actors standing in for the
SGLang server actors (the actor lookup and the merge are under test, not SGLang)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from verl_sglang_lora.runtime.sync.metrics import PREFIX, SyncMetrics, merge_replica_metrics

ROOT = Path(__file__).resolve().parents[1]


def test_record_and_drain_one_step() -> None:
    m = SyncMetrics()
    m.record_sample(-1, None)  # before the first sync: base policy
    m.record_sync({"version": 3, "bytes": 2097152, "total_ms": 160.4, "name": "verl_lora_v3"})
    for version, staleness in ((3, 0), (3, 1), (2, 2)):
        m.record_sample(version, staleness)
    out = m.drain()
    assert out[PREFIX + "samples"] == 4 and out[PREFIX + "base_policy_samples"] == 1
    assert out[PREFIX + "sync_version"] == 3 and out[PREFIX + "sync_bytes"] == 2097152
    assert out[PREFIX + "sync_total_ms"] == pytest.approx(160.4)
    assert out[PREFIX + "staleness_mean"] == pytest.approx(1.0) and out[PREFIX + "staleness_max"] == 2
    assert (out[PREFIX + "served_version_min"], out[PREFIX + "served_version_max"]) == (2, 3)
    again = m.drain()  # a new step: counts reset, the last sync stays visible
    assert again[PREFIX + "samples"] == 0 and again[PREFIX + "syncs"] == 0
    assert PREFIX + "staleness_mean" not in again and again[PREFIX + "sync_version"] == 3


def test_merge_over_replicas() -> None:
    a = {PREFIX + "samples": 8.0, PREFIX + "sync_bytes": 100.0, PREFIX + "sync_total_ms": 10.0,
         PREFIX + "staleness_max": 1.0, PREFIX + "staleness_mean": 0.5, PREFIX + "served_version_min": 4.0}
    b = {PREFIX + "samples": 4.0, PREFIX + "sync_bytes": 100.0, PREFIX + "sync_total_ms": 30.0,
         PREFIX + "staleness_max": 0.0, PREFIX + "staleness_mean": 0.0, PREFIX + "served_version_min": 5.0}
    out = merge_replica_metrics([a, b])
    assert out[PREFIX + "samples"] == 12 and out[PREFIX + "sync_bytes"] == 200
    assert out[PREFIX + "sync_total_ms"] == 30 and out[PREFIX + "staleness_max"] == 1
    assert out[PREFIX + "staleness_mean"] == 0.25 and out[PREFIX + "served_version_min"] == 4
    assert merge_replica_metrics([]) == {}


_PROBE = r"""
import json
import ray, torch
import verl  # the verl.plugins entry point registers the plugin and its metrics hook
from verl import DataProto
from verl.trainer.ppo import metric_utils
from verl_sglang_lora.tools.compat_probe import stub_inert_modules
stub_inert_modules()  # uvicorn (server-only, not in the CPU venv) is imported by ray_trainer's rollout imports
import verl.trainer.ppo.ray_trainer as ray_trainer
from verl_sglang_lora.runtime.sync.metrics import SyncMetrics

ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

@ray.remote
class StandInServer:  # only what the hook calls; the figures come from the plugin's real SyncMetrics
    def __init__(self, version, samples):
        self.m = SyncMetrics()
        self.m.record_sync({"version": version, "bytes": 2097152, "total_ms": 150.0 + version})
        for _ in range(samples):
            self.m.record_sample(version, 0)
    def drain_metrics(self):
        return self.m.drain()

@ray.remote
class StockServer:  # a reward server of stock verl: must be left alone
    def ping(self):
        return 1

servers = [StandInServer.options(name="sglang_server_0_0").remote(4, 8),
           StandInServer.options(name="sglang_server_1_0").remote(4, 4),
           StockServer.options(name="sglang_server_reward_0_0").remote()]
ray.get(servers[2].ping.remote())

b, p, r = 4, 3, 5
batch = DataProto.from_dict(tensors={
    "token_level_scores": torch.ones(b, r), "token_level_rewards": torch.ones(b, r),
    "advantages": torch.zeros(b, r), "returns": torch.zeros(b, r),
    "prompts": torch.ones(b, p, dtype=torch.long), "responses": torch.ones(b, r, dtype=torch.long),
    "response_mask": torch.ones(b, r), "attention_mask": torch.ones(b, p + r),
})
first = ray_trainer.compute_data_metrics(batch=batch, use_critic=False)
second = ray_trainer.compute_data_metrics(batch=batch, use_critic=False)
print(json.dumps({
    "wrapped": [getattr(f, "__sglang_lora_wrapped__", False) for f in (metric_utils.compute_data_metrics, ray_trainer.compute_data_metrics)],
    "first": {k: v for k, v in first.items() if isinstance(v, (int, float))},
    "second": {k: v for k, v in second.items() if k.startswith("sglang_lora/")},
}))
ray.shutdown()
"""


def test_verl_compute_data_metrics_carries_the_sync_figures() -> None:
    pytest.importorskip("verl")
    pytest.importorskip("ray")
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", _PROBE], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["wrapped"] == [True, True]
    first = out["first"]
    assert "critic/score/mean" in first  # verl's own figures are still there
    assert first["sglang_lora/samples"] == 12 and first["sglang_lora/sync_version"] == 4
    assert first["sglang_lora/sync_bytes"] == 2 * 2097152 and first["sglang_lora/sync_total_ms"] == 154.0
    assert first["sglang_lora/staleness_max"] == 0
    assert out["second"]["sglang_lora/samples"] == 0  # drained per step
