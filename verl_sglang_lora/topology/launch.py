"""The one call the server actor makes at launch: this replica's group overrides, frozen engines up first.

``SGLangLoRARollout._launch`` awaits :func:`replica_launch_overrides` where it finalizes the ``ServerArgs`` kwargs
(``verl_glue.server_args.wrap_server_args``): replica ``r`` launches with the overrides of the actor engine it is
(``replicas.py``), and, on a replica's first node, the frozen engines sharing its GPUs are started and answering
before its own SGLang sizes its memory (``host.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from verl_sglang_lora.topology.frozen import frozen_engines
from verl_sglang_lora.topology.registry import DEFAULT_TIMEOUT_S, POLL_S, ensure_host
from verl_sglang_lora.topology.replicas import replica_engine
from verl_sglang_lora.topology.run_checks import run_topology
from verl_sglang_lora.topology.schema import SETTING
from verl_sglang_lora.topology.sync_guard import check_sync_target

logger = logging.getLogger(__name__)


def visible_devices_keyword() -> str:
    try:
        from verl.utils.device import get_visible_devices_keyword

        return get_visible_devices_keyword()
    except ImportError:
        return "CUDA_VISIBLE_DEVICES"


async def replica_launch_overrides(rollout_config: Any, model_config: Any, replica_rank: int, node_rank: int,
                                   timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """The ServerArgs overrides of verl's replica ``replica_rank`` ({} without a topology)."""
    topo = run_topology(rollout_config, model_config)
    if topo is None:
        return {}
    row = replica_engine(topo, replica_rank)
    check_sync_target(topo, row.model)  # a verl replica always serves the synced actor
    if node_rank == 0 and frozen_engines(topo):
        await _frozen_engines_up(topo, replica_rank, row.gpus, row.tp, timeout)
    logger.warning("sglang_lora topology: rollout replica %d is %s group %d engine %d on GPU(s) %s; overrides %s",
                   replica_rank, row.model, row.group, row.engine, list(row.gpus), row.overrides or "none")
    return dict(row.overrides)


async def _frozen_engines_up(topo: Any, replica_rank: int, gpus: tuple[int, ...], tp: int, timeout: float) -> None:
    key = visible_devices_keyword()
    devices = [d for d in os.environ.get(key, "").split(",") if d]
    if len(devices) < tp:
        raise RuntimeError(f"{SETTING}: rollout replica {replica_rank} sees {key}={os.environ.get(key)!r}, fewer "
                           f"than its {tp} GPU(s), so the frozen engines on its GPUs cannot be placed")
    host = ensure_host(topo, tp, visible_key=key)
    started = await host.report_devices.remote(replica_rank, devices[:tp])
    if started:
        logger.warning("sglang_lora topology: replica %d started frozen engine(s) %s", replica_rank, started)
    t0 = time.monotonic()
    while True:
        state = await host.gpus_ready.remote(list(gpus))
        if state["error"]:
            raise RuntimeError(f"{SETTING}: a frozen engine on GPU(s) {list(gpus)} failed: {state['error']}")
        if state["ready"]:
            return
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{SETTING}: frozen engine(s) on GPU(s) {list(gpus)} not up within {timeout:.0f} s: "
                               f"{state['states']}")
        await asyncio.sleep(POLL_S)
