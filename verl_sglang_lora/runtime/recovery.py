"""Serving again after the SGLang server died (``engine_kwargs.sglang_lora.server_max_restarts > 0``).

When SGLang's scheduler dies it takes the Ray actor that hosts it down (seen on the H200). With
``server_max_restarts`` the plugin's replica creates its server actors with Ray's ``max_restarts`` and
``max_task_retries``: Ray re-creates the actor under the same name and re-sends the calls that were in flight
(generate requests of the rollout, the weight-sync client's calls). The restarted actor knows it was
reconstructed and, before serving its first call, relaunches SGLang and loads the newest adapter snapshot
(``sync.snapshot``) under its versioned name, so rollouts go on with the adapter the trainer last pushed.

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

from verl_sglang_lora.sglang_contract.http_client import SGLangHTTPClient, server_url
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
        client = SGLangHTTPClient(server_url(*server.own_address()), timeout_s=server.settings.http_timeout_s,
                                  max_attempts=server.settings.http_max_attempts)
        await client.post("load_lora_adapter", {"lora_name": snap.name, "lora_path": snap.path})
        server.adapters.activate(snap.name, snap.version, snap.fingerprint)
        if snap.global_steps is not None:
            server.global_steps = snap.global_steps
        report = {"adapter": snap.name, "version": snap.version}
    report["recover_s"] = round(time.perf_counter() - t0, 2)
    logger.warning("sglang_lora: server recovered %s", report)
    return report
