"""A resident slot a request reads is never written, whatever name the request gave.

1. Through the real ``SGLangLoRARollout`` on SGLang's real CPU pool: a generate request that names the served slot
   itself (``lora_path``, as the HTTP /generate route passes it) holds a lease on that slot; after the next version
   is committed to the other slot, a sync while the request still runs does not write the held slot (no loader
   call), it takes the versioned load; once the request ends the next sync writes in place again. A request naming a
   slot that is not served (its bytes may be unverified) is refused.
2. SGLang's own drain, named and checked in every cached release: each generate request holds the reader side of
   the tokenizer manager's ``model_update_lock`` for its life, and ``update_weights_from_tensor`` (which carries
   every loader request) takes the writer side unless generation is paused.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import sglang_release_dir
from tests.server_probe import run_probe_script

_SCRIPT = r"""
import json, sys, time
from verl_sglang_lora.tools.compat_probe import stub_inert_modules
stub_inert_modules()
import ray, torch
torch.multiprocessing.set_sharing_strategy("file_system")
from tests.server_probe import resident_payload, start_probe_server
from tests import resident_selfcheck as selfcheck
from verl_sglang_lora.runtime.resident.requests import ResidentRequests, check_results
from verl_sglang_lora.runtime.sync.adapter_push import AdapterPush, adapter_request_fields
from verl_sglang_lora.runtime.sync.flat_adapter import AdapterCollector
from verl_sglang_lora.runtime.sync.metrics import SyncStats
from verl_sglang_lora.sglang_contract.weight_names import LORA_RE

cfg, srv = start_probe_server(sys.argv[1], sys.argv[2], "actor_rollout_ref.rollout.tensor_model_parallel_size=1")
resolve = lambda n: (n, LORA_RE.match(n).group("module_path"), LORA_RE.match(n).group("ab"))
collector, requests, config = AdapterCollector(), ResidentRequests(torch.device("cpu")), selfcheck.peft_config(8)
out = {}

def sync(version, mode):
    adapter = collector.collect(iter(selfcheck.peft_adapter(8, seed=version, scale=0.05).items()), resolve)
    calls, payload = resident_payload(requests, adapter, version, mode, config)
    fields = {} if mode == "write" else adapter_request_fields(config, adapter, 1)
    loader_before = sum(1 for c in ray.get(srv.calls.remote()) if c[0] == "loader")
    result = ray.get(srv.sync_adapter.remote(AdapterPush(version, adapter.fingerprint, version, fields,
                                                         SyncStats(version=version), None, payload)))
    ran = [calls[tuple(x)] for x in (result.get("resident") or {}).get("ran", [])]
    if result["action"] in ("inplace", "load"):
        ray.get(srv.commit_adapter.remote(version, check_results(ran) if ran else None))
    return {"action": result["action"], "name": result.get("name"),
            "loader_calls": sum(1 for c in ray.get(srv.calls.remote()) if c[0] == "loader") - loader_before}

out["v1"] = sync(1, "attach")  # slot0 serves; slot1 is idle
try:
    ray.get(srv.generate_named.remote("verl_lora_slot1", 0.0))
    out["unserved"] = "served"
except Exception as exc:
    out["unserved"] = str(exc)
held = srv.generate_named.remote("verl_lora_slot0", 3.0)  # a request reading the served slot by name
time.sleep(0.5)
out["status_while_held"] = ray.get(srv.adapter_status.remote())
out["v2"] = sync(2, "write")  # slot1 written and committed: slot0 is idle now, but still read
out["v3_while_held"] = sync(3, "write")
out["v3_load"] = sync(3, None)  # the client re-sends with the load fields
out["held"] = ray.get(held)
out["v4_after"] = sync(4, "write")
print(json.dumps(out, default=str))
ray.shutdown()
"""


def test_a_request_naming_the_idle_slot_keeps_it_from_being_written(tiny_qwen3, tmp_path) -> None:
    pytest.importorskip("ray")
    pytest.importorskip("verl")
    out = run_probe_script(_SCRIPT, str(tiny_qwen3), str(tmp_path), extra_env={"PROBE_RESIDENT": "1"})
    assert (out["v1"]["action"], out["v1"]["name"]) == ("inplace", "verl_lora_slot0")
    assert "verl_lora_slot1 is a resident slot that is not the served adapter version" in out["unserved"]
    assert out["status_while_held"]["in_flight"] == {"verl_lora_slot0": 1}  # leased under the name it reads
    assert (out["v2"]["action"], out["v2"]["name"], out["v2"]["loader_calls"]) == ("inplace", "verl_lora_slot1", 1)
    # the idle slot0 is still read: nothing is written, the server asks for the load fields, the version is loaded
    assert out["v3_while_held"] == {"action": "need_fields", "name": None, "loader_calls": 0}
    assert (out["v3_load"]["action"], out["v3_load"]["name"]) == ("load", "verl_lora_v3")
    assert out["held"]["lora_path"] == "verl_lora_slot0" and out["held"]["scored"] > 0
    # released: the next sync writes a slot in place again
    assert (out["v4_after"]["action"], out["v4_after"]["loader_calls"]) == ("inplace", 1)


def _function_source(root: Path, name: str) -> str:
    """The source of every function ``name`` defined in SGLang's managers (methods included)."""
    found = []
    for file in sorted((root / "sglang" / "srt" / "managers").glob("*.py")):
        text = file.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                found.append(ast.get_source_segment(text, node) or "")
    return "\n".join(found)


@pytest.mark.parametrize("version", ["0.5.8", "0.5.12", "0.5.18", "0.5.23"])
def test_sglangs_update_lock_drains_running_requests(version) -> None:
    root = sglang_release_dir(version)
    generate = _function_source(root, "_handle_batch_request") + _function_source(root, "generate_request")
    update = _function_source(root, "update_weights_from_tensor")
    assert "model_update_lock.reader_lock" in generate, "generate requests no longer hold the update lock"
    assert "model_update_lock.writer_lock" in update, "tensor updates no longer wait for running requests"
