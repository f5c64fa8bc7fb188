"""Serving again after the SGLang server died (``engine_kwargs.sglang_lora.server_max_restarts > 0``).

When SGLang's scheduler dies it takes the Ray actor that hosts it down (SGLang's SIGQUIT handler). With
``server_max_restarts`` the plugin's replica creates its server actors with Ray's ``max_restarts`` and
``max_task_retries``: Ray re-creates the actor under the same name and re-sends the calls that were in flight
(generate requests of the rollout, the weight-sync client's calls). The restarted actor knows it was
reconstructed and, before serving its first call, relaunches SGLang and loads the newest adapter snapshot
(``sync.snapshot``) under its versioned name through the same door as every adapter sync
(``SGLangLoRARollout._load_adapter_from_disk``), so rollouts go on with the adapter the trainer last pushed.

Only adapter mode can be recovered this way: the base weights of a restarted server are the checkpoint's
(relaunched with ``load_format=auto`` where verl asked for ``dummy``: the trainer's one-time base sync does not
come again), which is what an adapter-mode server serves; in merge / no-LoRA mode they would be stale, so
``config_guards`` refuses the setting there at startup.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from verl_sglang_lora.runtime.sync.canary import CanaryExpectation
from verl_sglang_lora.runtime.sync.snapshot import read_snapshot

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)


class ServerRestartError(RuntimeError):
    """The server actor was restarted in a state the plugin cannot serve from."""


class RestartRecovery:
    """Per server actor: whether this instance is a Ray restart that still has to recover (done once)."""

    def __init__(self, max_restarts: int) -> None:
        import ray

        # asked only where Ray may restart the actor (a GCS query)
        self.pending = max_restarts > 0 and bool(ray.get_runtime_context().was_current_actor_reconstructed)
        self._lock = asyncio.Lock()

    async def ensure(self, server: Any) -> dict[str, Any] | None:
        """Recover before the first call a restarted actor serves; later calls pass straight through."""
        if not self.pending:
            return None
        async with self._lock:
            if not self.pending:
                return None
            report = await recover_server(server)
            server.sync_metrics.restarts += 1
            self.pending = False
            return report


def snapshot_canary(path: str, min_delta: float) -> dict[str, Any]:
    """The canary expectation of a snapshot's adapter, so the recovered server proves it serves it."""
    import json
    from pathlib import Path

    from safetensors.torch import load_file

    config = json.loads((Path(path) / "adapter_config.json").read_text())
    tensors = load_file(str(Path(path) / "adapter_model.safetensors"))
    return CanaryExpectation.of(tensors, float(config["lora_alpha"]) / float(config["r"]), min_delta).to_dict()


def ray_restart_options(max_restarts: int) -> dict[str, int]:
    """Options for ``ray.remote`` on the server actor class: retry in-flight calls once per allowed restart."""
    return {"max_restarts": max_restarts, "max_task_retries": max_restarts} if max_restarts > 0 else {}


async def recover_server(server: Any) -> dict[str, Any]:
    """Relaunch SGLang in a restarted server actor and serve the newest snapshot again."""
    # merge / no-LoRA servers never get here: config_guards refuses server_max_restarts there in __init__
    if server.nnodes > 1:
        raise ServerRestartError("sglang_lora: a multi-node SGLang server cannot be recovered by restarting one actor")
    t0 = time.perf_counter()
    logger.warning("sglang_lora: server actor restarted by Ray; relaunching SGLang")
    await server.relaunch_server()  # on the checkpoint's weights, not verl's load_format=dummy
    snap = read_snapshot(server.snapshot_root)
    report: dict[str, Any] = {"adapter": None, "version": -1}
    if snap is None:
        logger.warning("sglang_lora: no adapter snapshot; the BASE policy is served until the next adapter sync")
    else:
        canary = snapshot_canary(snap.path, server.settings.canary_min_delta) if server.settings.canary else None
        await server._load_adapter_from_disk(snap.name, snap.path, snap.version, snap.fingerprint, canary)
        if snap.global_steps is not None:
            server.global_steps = snap.global_steps
        report = {"adapter": snap.name, "version": snap.version}
    report["recover_s"] = round(time.perf_counter() - t0, 2)
    logger.warning("sglang_lora: server recovered %s", report)
    return report
