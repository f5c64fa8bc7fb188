"""The real ``SGLangLoRARollout`` in a real Ray actor, built by verl's own ``SGLangHttpServer.__init__`` from composed
verl configs, driven through verl's real ``generate`` -- with a stand-in for SGLang's tokenizer manager (no SGLang
engine on a CPU host; tests/server_probe.py). What it shows, before any GPU run:

- every request verl's generate builds (with verl's fixed adapter name) reaches SGLang under the active versioned
  adapter, and the sample carries adapter_version / adapter_staleness;
- a canary queued while verl has released the KV cache does not generate until ``resume(kv_cache)``, then scores
  the prompt with and without the adapter; the ledger drops the resume of never-released weights;
- ``drain_metrics`` has the step's figures;
- with ``server_max_restarts=1`` an actor that dies is restarted by Ray, the re-sent call waits for the relaunch and
  the reload of the newest snapshot from the job's snapshot directory, and is served under that version.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server_probe import run_probe_script

_SCRIPT = r"""
import json, sys
from pathlib import Path
from verl_sglang_lora.tools.compat_probe import stub_inert_modules
stub_inert_modules()
import ray, torch
from verl_sglang_lora.runtime.sync.snapshot import write_snapshot
from tests.server_probe import start_probe_server

cfg, srv = start_probe_server(sys.argv[1], sys.argv[2])
out = {"server_args": {"launch": ray.get(srv.server_args.remote(False)),
                       "relaunch": ray.get(srv.server_args.remote(True))}}
out["released"] = ray.get(srv.release_memory.remote(None))
# the weight-sync client's one call: the installed SGLang's request fields for a real (CPU) adapter
from verl_sglang_lora.runtime.sync.adapter_push import AdapterPush
from verl_sglang_lora.runtime.sync.metrics import SyncStats
from verl_sglang_lora.sglang_contract.lora_request import lora_request_fields
prefix = "base_model.model.model.layers.0.mlp.down_proj"
tensors = {f"{prefix}.lora_A.weight": torch.ones(8, 128), f"{prefix}.lora_B.weight": torch.zeros(64, 8)}
fields = lora_request_fields({"r": 8, "lora_alpha": 16, "target_modules": ["down_proj"], "peft_type": "LORA"}, tensors,
                             tp_size=2)
push = AdapterPush(3, "fp3", 3, fields, SyncStats(version=3, bytes=2048, total_ms=5.0),
                   {"zero": True, "effect_bound": 0.0, "min_delta": 0.0})
out["staged"] = ray.get(srv.sync_adapter.remote(push))
out["served_while_staged"] = ray.get(srv.adapter_status.remote())["active_name"]
out["plan"] = ray.get(srv.commit_adapter.remote(3, None, 1.5))
out["commit_again"] = ray.get(srv.commit_adapter.remote(3))  # as Ray re-sends it to a server that recovered v3
out["again"] = ray.get(srv.sync_adapter.remote(push))  # an exact re-push is acknowledged, not loaded again
out["calls_while_released"] = ray.get(srv.calls.remote())
out["resumed_weights"] = ray.get(srv.resume_memory.remote(["weights"]))
out["resumed_kv"] = ray.get(srv.resume_memory.remote(["kv_cache"]))
out["canary"] = ray.get(srv.adapter_status.remote())["last_canary"]
sample = ray.get(srv.generate.remote(prompt_ids=[5, 6, 7, 8], sampling_params={"temperature": 1.0}, request_id="r1"))
out["sample"] = {"token_ids": sample.token_ids, "extra": {k: v for k, v in sample.extra_fields.items()
                                                         if k in ("adapter_version", "adapter_staleness", "global_steps")}}
out["calls"] = ray.get(srv.calls.remote())
out["metrics"] = ray.get(srv.drain_metrics.remote())

state = ray.get(srv.state.remote())
write_snapshot(Path(state["snapshot_root"]), name="verl_lora_v3", version=3, fingerprint="fp3", global_steps=3,
               tensors={"base_model.model.model.layers.0.mlp.down_proj.lora_A.weight": torch.ones(8, 128)},
               peft_config={"r": 8, "lora_alpha": 16, "target_modules": ["down_proj"], "peft_type": "LORA"})
try:
    ray.get(srv.die.remote())
    out["die"] = "re-sent to the restarted actor"
except ray.exceptions.RayActorError as exc:
    out["die"] = type(exc).__name__
after = ray.get(srv.generate.remote(prompt_ids=[5, 6, 7, 8], sampling_params={"temperature": 1.0}, request_id="r2"),
                timeout=120)
out["after_restart"] = {"version": after.extra_fields["adapter_version"], "calls": ray.get(srv.calls.remote()),
                        "state": ray.get(srv.state.remote()), "metrics": ray.get(srv.drain_metrics.remote())}
print(json.dumps(out))
ray.shutdown()
"""


# one empty payload per scheduler rank: verl's default rollout.tensor_model_parallel_size is 2
PRIME = ("update_weights_from_tensor", {"type": "UpdateWeightsFromTensorReqInput", "ranks": [[], []], "flush_cache": False})


def test_server_actor_pins_tags_defers_canary_and_recovers(tiny_qwen3, tmp_path) -> None:
    pytest.importorskip("ray")
    pytest.importorskip("verl")
    out = run_probe_script(_SCRIPT, str(tiny_qwen3), str(tmp_path))

    # verl's own launch_server, through the plugin: its LoRA keys; verl's default load_format=dummy on the first
    # launch (the trainer syncs the base), the checkpoint's weights on a relaunch (no base sync comes again)
    launch, relaunch = out["server_args"]["launch"], out["server_args"]["relaunch"]
    assert launch["load_format"] == "dummy" and relaunch["load_format"] == "auto"
    assert launch["model_path"] == relaunch["model_path"] == str(tiny_qwen3)
    assert launch["enable_lora"] is True and launch["max_lora_rank"] == 8 and launch["lora_target_modules"] == ["all"]
    assert {k: v for k, v in relaunch.items() if k != "load_format"} == {k: v for k, v in launch.items() if k != "load_format"}

    assert out["staged"]["staged"] is True and out["served_while_staged"] is None  # served only at the commit
    assert (out["commit_again"]["action"], out["commit_again"]["name"]) == ("ack", "verl_lora_v3")
    assert out["plan"]["stats"]["snapshot_ms"] == 1.5  # the client's snapshot, in the sync's figures
    assert {k: out["plan"][k] for k in ("action", "name", "version")} == {"action": "load", "name": "verl_lora_v3",
                                                                           "version": 3}
    assert out["plan"]["stats"]["bytes"] == 2048 and out["plan"]["stats"]["load_ms"] >= 0
    assert out["again"] == {"action": "ack", "name": "verl_lora_v3", "version": 3,
                            "resident": {"ran": [], "attached": False, "disabled": None}}
    assert out["released"] == ["kv_cache"]  # adapter mode keeps the base weights resident
    assert ("generate", "verl_lora_v3") not in [tuple(c) for c in out["calls_while_released"]]  # canary deferred
    assert out["resumed_weights"] == [] and out["resumed_kv"] == ["kv_cache"]
    assert out["canary"]["verdict"] == "pass" and out["canary"]["max_abs_diff"] == 0.0
    calls = [tuple(c) for c in out["calls"]]
    # first thing after launch, before any adapter load: the empty base update that makes SGLang <= 0.5.12's
    # scheduler patch its CUDA-IPC reducers (ipc_reducers; the H200 kill run died without it)
    assert calls[0] == PRIME
    resume_at = calls.index(("resume", ["kv_cache"]))
    # after the resume: flush, then the canary with and without the adapter, then verl's generate
    assert calls[resume_at + 1:] == [("flush", None), ("generate", "verl_lora_v3"), ("generate", None),
                                     ("generate", "verl_lora_v3")]
    assert calls.count(("load_tensors", "verl_lora_v3")) == 1 and calls.index(("load_tensors", "verl_lora_v3")) < resume_at
    assert out["sample"]["token_ids"] == [7, 8, 9]
    assert out["sample"]["extra"] == {"adapter_version": 3, "adapter_staleness": 0, "global_steps": 3}
    m = out["metrics"]
    assert m["sglang_lora/samples"] == 1 and m["sglang_lora/sync_version"] == 3 and m["sglang_lora/staleness_max"] == 0
    # the KV resume and the canary (flush + two scoring requests) are timed apart: verl counts both in update_weights
    assert m["sglang_lora/resume_kv_ms"] >= 0 and m["sglang_lora/canary_ms"] > 0

    after = out["after_restart"]
    assert out["die"] in ("RayActorError", "ActorDiedError", "re-sent to the restarted actor")
    assert after["version"] == 3  # served by the restarted actor with the snapshot's adapter
    assert after["state"]["loaded_from_disk"] == [
        {"lora_name": "verl_lora_v3", "lora_path": str(Path(after["state"]["snapshot_root"]) / "verl_lora_v3")}
    ]
    assert after["state"]["snapshot_root"].startswith(str(tmp_path))  # per job and actor under snapshot_dir
    assert after["state"]["global_steps"] == 3 and after["state"]["active"] == "verl_lora_v3"
    assert after["state"]["launches"] == ["relaunch"]  # the restarted actor launched once, on checkpoint weights
    # primed on the relaunch too; the recovered adapter is proven by the canary before the re-sent generate (no
    # flush: requests carry their adapter's version in extra_key, runtime/sync/prefix_tags.py)
    assert [tuple(c) for c in after["calls"]] == [PRIME, ("generate", "verl_lora_v3"), ("generate", None),
                                                  ("generate", "verl_lora_v3")]
    assert after["metrics"]["sglang_lora/server_restarts"] == 1
