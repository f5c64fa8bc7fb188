"""A reward that asks a frozen judge served by the plugin (examples/topology_judge.yaml).

The judge is found by name, ``verl_sglang_lora.topology.model_url("judge")``, and scores each response by its own
log-probs: the reward is exp(mean token log-prob of "Answer: <response>") under the judge, in (0, 1]. Different
responses get different scores, so GRPO has non-zero advantages even with the tiny random offline model.

With ``VSL_TOPOLOGY_EVIDENCE_DIR`` set, the first call in each reward process writes what the launched servers
report about themselves (SGLang's ``/server_info``: the judge's, and each actor replica's through verl's server
actor) so the per-group overrides can be checked in the servers' real arguments.

    reward.custom_reward_function.path=examples/judge_reward.py reward.custom_reward_function.name=compute_score
"""

from __future__ import annotations

import json
import math
import os
import urllib.request
from typing import Any

from verl_sglang_lora.topology import model_url

JUDGE = "judge"
PREFIX = "Answer: "
SHOWN = ("model_path", "tp_size", "mem_fraction_static", "max_running_requests", "context_length",
         "attention_backend", "sampling_backend", "disable_cuda_graph", "enable_lora", "base_gpu_id", "port")
_evidence_written = False


def _post(url: str, body: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def _server_info(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base}/server_info", timeout=30) as resp:
        info = json.loads(resp.read())
    return {k: info.get(k) for k in SHOWN}


def _write_evidence(judge_url: str) -> None:
    """Once per process: the judge's and the actor replicas' own view of their ServerArgs. A failure to read them is
    written into the evidence (the check then fails on it), never raised into the reward."""
    global _evidence_written
    out = os.environ.get("VSL_TOPOLOGY_EVIDENCE_DIR")
    if _evidence_written or not out:
        return
    _evidence_written = True
    record: dict[str, Any] = {"judge": {"url": judge_url}, "actor_replicas": {}, "errors": []}
    try:
        record["judge"].update(_server_info(judge_url))
    except Exception as exc:  # noqa: BLE001 - recorded, the check fails on it
        record["errors"].append(f"judge {judge_url}/server_info: {type(exc).__name__}: {exc}")
    try:
        import ray

        for replica in range(64):  # verl's server actors: sglang_server_<replica>_<node>
            try:
                server = ray.get_actor(f"sglang_server_{replica}_0")
            except ValueError:
                break
            # the actor's in-process server answers /server_info with HTTP 500 on verl 0.9.1: ask the server actor
            record["actor_replicas"][replica] = ray.get(server.launched_server_args.remote(list(SHOWN)))
    except Exception as exc:  # noqa: BLE001
        record["errors"].append(f"actor replicas: {type(exc).__name__}: {exc}")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"evidence_{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None,
                  **_: Any) -> dict[str, float]:
    """exp(mean judge log-prob) of the response; the judge is asked by name."""
    url = model_url(JUDGE)
    _write_evidence(url)
    out = _post(f"{url}/generate", {"text": PREFIX + solution_str, "return_logprob": True, "logprob_start_len": 0,
                                    "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}})
    logprobs = [t[0] for t in out["meta_info"]["input_token_logprobs"] if t[0] is not None]
    mean = sum(logprobs) / len(logprobs) if logprobs else -30.0
    return {"score": math.exp(mean), "judge_mean_logprob": mean}
