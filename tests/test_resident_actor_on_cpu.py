"""The resident in-place path through the real ``SGLangLoRARollout`` actor and the real loader, on SGLang's real LoRA
pool (CPU): the first sync creates the two pinned slots with SGLang's own load and attaches them to the client's flat
buffer (the plan's write compared byte for byte with SGLang's load), the next sync writes the idle slot in place
(verified byte for byte against the client's buffer), and only the client's commit after reading that answer flips
the served name (two-phase: a client that never commits leaves the previous version serving); slots are never
unloaded as stale versions, and a failed check turns the path off: the version is loaded the ordinary way and the
slots are dropped. Status tensors are shared with the
actor through SGLang's serializer, as over CUDA IPC on a GPU."""

from __future__ import annotations

import pytest

from tests.server_probe import run_probe_script

_SCRIPT = r"""
import json, sys, time
from verl_sglang_lora.tools.compat_probe import stub_inert_modules
stub_inert_modules()
import ray, torch
torch.multiprocessing.set_sharing_strategy("file_system")
from tests.server_probe import resident_payload, start_probe_server
from tests import resident_selfcheck as selfcheck
from verl_sglang_lora.runtime.resident.requests import (ResidentRequests, SLOTS, check_load_verify, check_results,
                                                         verify_for_push, write_targets)
from verl_sglang_lora.runtime.sync.adapter_push import AdapterPush, adapter_request_fields
from verl_sglang_lora.runtime.sync.flat_adapter import AdapterCollector
from verl_sglang_lora.runtime.sync.metrics import SyncStats
from verl_sglang_lora.sglang_contract.weight_names import LORA_RE

cfg, srv = start_probe_server(sys.argv[1], sys.argv[2], "actor_rollout_ref.rollout.tensor_model_parallel_size=1")
resolve = lambda n: (n, LORA_RE.match(n).group("module_path"), LORA_RE.match(n).group("ab"))
collector, requests, config = AdapterCollector(), ResidentRequests(torch.device("cpu")), selfcheck.peft_config(8)
out = {"launch_args": ray.get(srv.server_args.remote(False))}

def push(version, resident, failed=None, fields=True, slots=SLOTS, commit=True):
    adapter = collector.collect(iter(selfcheck.peft_adapter(8, seed=version).items()), resolve)
    f = adapter_request_fields(config, adapter, 1) if fields else {}
    calls, payload = resident_payload(requests, adapter, version, resident, config, slots)
    result = ray.get(srv.sync_adapter.remote(AdapterPush(version, adapter.fingerprint, version, f, SyncStats(version=version),
                                                         None, payload, failed)))
    ran = [calls[tuple(x)] for x in (result.get("resident") or {}).get("ran", [])]
    check = check_results(ran, config["lora_alpha"] / config["r"]) if ran else None
    active_staged = ray.get(srv.adapter_status.remote())["active_name"]  # between the phases
    committed = {}
    if commit and result["action"] in ("inplace", "load"):  # as the sync client: serve only a verified write
        committed = ray.get(srv.commit_adapter.remote(version, check))
    return {"action": result["action"], "name": result.get("name"), "ran": [list(x) for x in result["resident"].get("ran", [])],
            "check": check, "results": [c.result() for c in ran], "committed": committed.get("action"),
            "active_staged": active_staged, "inplace": (committed.get("stats") or {}).get("inplace"),
            "resident": committed.get("resident", result["resident"])}

def served(request_id):
    ray.get(srv.generate.remote(prompt_ids=[5, 6, 7], sampling_params={"temperature": 1.0}, request_id=request_id))

out["v1"] = push(1, "attach")
served("r1")
out["v2_window_ns"] = [time.time_ns()]
out["v2"] = push(2, "write", fields=False)
out["v2_window_ns"].append(time.time_ns())
served("r2")
out["v3"] = push(3, "write", fields=False, slots=write_targets(out["v2"]["name"]))  # as the client: the idle slot only
served("r3")
# a client whose view of the served slot is stale built only the write for the served slot: never run; the server
# asks for the load fields, the client re-sends with them (the sync client's path) and the version is loaded
loader_ops_before = sum(1 for c in ray.get(srv.calls.remote()) if c[0] == "loader")
out["v4_stale"] = push(4, "write", fields=False, slots=("verl_lora_slot0",))
out["loader_ops_stale"] = sum(1 for c in ray.get(srv.calls.remote()) if c[0] == "loader") - loader_ops_before
out["v4"] = push(4, None)
served("r4")
# after that load the client knows no served slot: it builds both writes, the server writes the one it last left idle
out["v5_targets"] = list(write_targets(out["v4"]["name"]))
out["v5"] = push(5, "write", fields=False, slots=write_targets(out["v4"]["name"]))
served("r5")
# a client that dies between the phases: version 6 written and verified, never committed; version 5 keeps serving
out["v6_orphan"] = push(6, "write", fields=False, slots=write_targets(out["v5"]["name"]), commit=False)
out["after_orphan"] = ray.get(srv.adapter_status.remote())["active_name"]
out["flushes"] = [c for c in ray.get(srv.calls.remote()) if c[0] == "flush"]
out["generate_keys"] = ray.get(srv.generate_keys.remote())
out["v6"] = push(6, None, failed="mismatch (test)")
# after the fallback the loader is still launched: each ordinary load is verified in SGLang's pool before it serves
# (the sync client builds the verify for the version's name; the server runs it after the load)
other_collector = AdapterCollector()

def push_verified(version, name, other=False):
    adapter = collector.collect(iter(selfcheck.peft_adapter(8, seed=version).items()), resolve)
    source = other_collector.collect(iter(selfcheck.peft_adapter(8, seed=100 + version).items()), resolve) if other else adapter
    push = AdapterPush(version, adapter.fingerprint, version, adapter_request_fields(config, adapter, 1),
                       SyncStats(version=version))
    call = verify_for_push(requests, push, source.tensors, name)  # as the sync client builds it
    before = len(ray.get(srv.calls.remote()))
    result = ray.get(srv.sync_adapter.remote(push))
    ops = [c for c in ray.get(srv.calls.remote()) if c[0] in ("load_tensors", "loader")][-2:]
    if result["action"] == "need_verify":  # no load: the server asks for the verify under its own name
        return {"action": "need_verify", "name": result["name"], "new_calls": ray.get(srv.calls.remote())[before:],
                "active": ray.get(srv.adapter_status.remote())["active_name"]}
    try:
        check_load_verify(result, call)  # as the sync client reads the answer
        check = None
    except Exception as exc:
        check = f"{type(exc).__name__}: {exc}"
    committed = ray.get(srv.commit_adapter.remote(version, check))
    return {"action": result["action"], "name": result["name"], "verify": result["verify"], "ops": ops,
            "check": check, "result": call.result(), "committed": committed["action"],
            "load_verified": (committed.get("stats") or {}).get("load_verified"),
            "active": ray.get(srv.adapter_status.remote())["active_name"]}

out["v7"] = push_verified(7, "verl_lora_v7")
out["v8"] = push_verified(8, "verl_lora_v8_elsewhere")
out["v9"] = push_verified(9, "verl_lora_v9", other=True)
out["calls"] = [c for c in ray.get(srv.calls.remote()) if c[0] in ("load_tensors", "loader", "unload")]
out["status"] = ray.get(srv.adapter_status.remote())
print(json.dumps(out, default=str))
ray.shutdown()
"""


def test_resident_slots_attach_write_flip_and_fall_back(tiny_qwen3, tmp_path) -> None:
    pytest.importorskip("ray")
    pytest.importorskip("verl")
    out = run_probe_script(_SCRIPT, str(tiny_qwen3), str(tmp_path), extra_env={"PROBE_RESIDENT": "1"})

    assert out["launch_args"]["max_lora_rank"] == 8
    v1, v2, v3, v4, v5, v6 = (out[f"v{i}"] for i in range(1, 7))
    # first sync: SGLang's own load into both pinned slots, attach, the plan's write compared with SGLang's load
    assert v1["action"] == "inplace" and v1["name"] == "verl_lora_slot0" and v1["check"] is None
    assert v1["ran"] == [["attach", "verl_lora_slot0"], ["attach", "verl_lora_slot1"], ["compare", "verl_lora_slot1"]]
    assert v1["results"][2]["mismatches"] == 0 and all(r["ok"] for r in v1["results"])
    assert v1["active_staged"] is None and v1["committed"] == "inplace"  # nothing served before the commit
    # later syncs: the idle slot written in place and verified; the served name flips at the commit, not before
    assert (v2["action"], v2["name"], v2["ran"]) == ("inplace", "verl_lora_slot1", [["write", "verl_lora_slot1"]])
    assert v2["check"] is None and v2["active_staged"] == "verl_lora_slot0" and v2["committed"] == "inplace"
    # read back through the mirror and compared byte for byte with the client's flat buffer, at its scaling
    assert v2["results"][0]["verified_by"] == 2 and v1["results"][1]["verified_by"] == 2
    assert v2["results"][0]["scaling"] == pytest.approx(16 / 8) and v2["results"][0]["lora_r"] == 8
    assert v2["results"][0]["copies"] > 0 and v2["inplace"] == 1
    # the loader stamps its entry with the host's wall clock (the matrix splits its round trip there)
    assert out["v2_window_ns"][0] < v2["results"][0]["start_wall_ns"] < out["v2_window_ns"][1]
    assert (v3["name"], v3["ran"]) == ("verl_lora_slot0", [["write", "verl_lora_slot0"]]) and v3["check"] is None
    # a stale single write (for the served slot) is never run: no loader call at all, the load fields are asked for
    assert out["v4_stale"]["action"] == "need_fields" and out["v4_stale"]["ran"] == [] and out["loader_ops_stale"] == 0
    assert (v4["action"], v4["name"]) == ("load", "verl_lora_v4") and v4["resident"]["disabled"] is None
    # after the load the served slot is unknown to the client: both writes; the server writes slot1, the slot it left
    # idle when slot0 was served last (slot0 may still hold requests of version 3)
    assert out["v5_targets"] == ["verl_lora_slot0", "verl_lora_slot1"]
    assert (v5["action"], v5["name"], v5["ran"]) == ("inplace", "verl_lora_slot1", [["write", "verl_lora_slot1"]])
    assert v5["check"] is None
    # written and verified but never committed (the client died): the previous version still serves
    orphan = out["v6_orphan"]
    assert (orphan["action"], orphan["name"], orphan["check"]) == ("inplace", "verl_lora_slot0", None)
    assert orphan["committed"] is None and out["after_orphan"] == "verl_lora_slot1"
    # a failed client check: the version is loaded the ordinary way, the path is off, the slots are dropped
    assert (v6["action"], v6["name"]) == ("load", "verl_lora_v6") and v6["resident"]["disabled"].startswith("mismatch")
    calls = [tuple(c) for c in out["calls"]]
    assert calls[:2] == [("load_tensors", "verl_lora_slot0"), ("load_tensors", "verl_lora_slot1")]
    assert calls.count(("load_tensors", "verl_lora_v4")) == 1 and calls.count(("load_tensors", "verl_lora_v6")) == 1
    assert ("unload", "verl_lora_v4") in calls  # the loaded version is retired once a slot serves again
    v6_done = calls.index(("load_tensors", "verl_lora_v7"))
    assert not any(c[0] == "unload" and c[1] in ("verl_lora_slot0", "verl_lora_slot1") for c in calls[:v6_done - 2])
    assert set(calls[v6_done - 2:v6_done]) == {("unload", "verl_lora_slot0"), ("unload", "verl_lora_slot1")}
    # ordinary loads after the fallback, each verified in SGLang's pool against the tensors sent, before activation
    v7, v8, v9 = out["v7"], out["v8"], out["v9"]
    assert (v7["action"], v7["name"], v7["verify"]["ran"]) == ("load", "verl_lora_v7", True) and v7["verify"]["ms"] > 0
    assert [tuple(o) for o in v7["ops"]] == [("load_tensors", "verl_lora_v7"), ("loader", "op=verify")]
    assert v7["check"] is None and v7["result"]["verified_by"] == 1
    assert v7["result"]["copies"] > 0 and v7["result"]["message"].startswith("verified ")
    assert v7["load_verified"] == 1  # sglang_lora/sync_load_verified
    # built for another name than SGLang will hold the version under: nothing loaded, the client is asked for the
    # verify under the server's name (the sync client then re-sends)
    assert (v8["action"], v8["name"], v8["new_calls"]) == ("need_verify", "verl_lora_v8", [])
    # the pool holds other bytes than the tensors the verify names: the check fails, v9 is dropped, never served
    assert v9["verify"]["ran"] is True and v9["check"].startswith("LoadVerifyError: ") and "other bytes" in v9["check"]
    assert "differ from the trainer's bytes" in v9["check"] and v9["committed"] == "dropped"
    assert v9["active"] == out["status"]["active_name"] == "verl_lora_v7"
    assert ("unload", "verl_lora_v9") in calls

    # the prefix cache across in-place versions: no flush, each request keyed by its adapter's version (a slot keeps
    # its lora id, so KV of version 2 must never match under version 3); the canary is keyed the same way
    assert out["flushes"] == []
    keys = [(name, (key or "").rsplit(".", 1)[0] or None) for name, key in out["generate_keys"]]  # drop the write count
    assert ("verl_lora_slot1", "|sglang_lora_v2") in keys and ("verl_lora_slot0", "|sglang_lora_v3") in keys
    assert ("verl_lora_slot0", "|sglang_lora_v1") in keys  # v1's canary / request on slot0 before the write of v3
    assert ("verl_lora_v4", "|sglang_lora_v4") in keys and ("verl_lora_slot1", "|sglang_lora_v5") in keys
    assert all(key is None for name, key in keys if name is None)  # the base policy is never tagged
    assert keys[-1] == ("verl_lora_slot1", "|sglang_lora_v5")  # verl's request after v5
    assert len({key for _, key in out["generate_keys"] if key}) == 5  # one key per write or load
