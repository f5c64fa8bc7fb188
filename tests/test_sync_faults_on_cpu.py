"""Faults on the adapter door, through the real ``SGLangLoRARollout`` actor (SGLang's tokenizer manager is a stand-in
that really stalls or refuses): a load that does not answer within ``http_timeout_s`` is an error naming the
setting; the retried version gets a fresh name and the stalled load, which landed after all, is unloaded; a refused
unload is counted and retried, and a second refusal reaches the trainer with SGLang's message."""

from __future__ import annotations

import pytest

from tests.server_probe import run_probe_script

_SCRIPT = r"""
import json, sys
from verl_sglang_lora.tools.compat_probe import stub_inert_modules
stub_inert_modules()
import ray
from tests.server_probe import push_down_proj_version, start_probe_server

cfg, srv = start_probe_server(sys.argv[1], sys.argv[2],
                              "actor_rollout_ref.rollout.engine_kwargs.sglang_lora.http_timeout_s=0.5")

def push(version):
    try:
        r = push_down_proj_version(srv, version)
        return {"name": r["name"], "action": r["action"]}
    except Exception as exc:
        return {"error": str(exc).splitlines()[-1][:400] if str(exc) else type(exc).__name__,
                "full": str(exc)[-600:]}

out = {"v1": push(1)}
ray.get(srv.stall_next_tensor_load.remote(1.0))
out["v2_stalled"] = push(2)
import time; time.sleep(1.2)  # the stalled load lands after the caller gave up
out["v2_again"] = push(2)
ray.get(srv.refuse_unloads.remote(True))
out["v3"] = push(3)
out["metrics_v3"] = ray.get(srv.drain_metrics.remote())
out["v4"] = push(4)
out["calls"] = [c for c in ray.get(srv.calls.remote()) if c[0] in ("load_tensors", "unload")]
print(json.dumps(out, default=str))
ray.shutdown()
"""


def test_timeouts_and_refused_unloads_are_loud_and_nothing_is_lost(tiny_qwen3, tmp_path) -> None:
    pytest.importorskip("ray")
    pytest.importorskip("verl")
    out = run_probe_script(_SCRIPT, str(tiny_qwen3), str(tmp_path))

    assert out["v1"] == {"name": "verl_lora_v1", "action": "load"}
    stalled = out["v2_stalled"]["full"]
    assert "load_lora_adapter_from_tensors failed (no response): no answer within 0.5 s" in stalled
    assert "engine_kwargs.sglang_lora.http_timeout_s" in stalled
    # the retry of version 2 never reuses the stalled name; the stalled load landed, so it is unloaded
    assert out["v2_again"] == {"name": "verl_lora_v2r1", "action": "load"}
    calls = [tuple(c) for c in out["calls"]]
    assert ("unload", "verl_lora_v2") in calls and ("unload", "verl_lora_v1") in calls
    # a refused unload: counted and retried, not raised the first time ...
    assert out["v3"] == {"name": "verl_lora_v3", "action": "load"}
    assert out["metrics_v3"]["sglang_lora/unload_failures"] == 1
    # ... and raised with SGLang's message when the retry is refused too
    assert "unload_lora_adapter" in out["v4"]["full"] and "stand-in refusal" in out["v4"]["full"]
    assert calls.count(("unload", "verl_lora_v2r1")) == 2
