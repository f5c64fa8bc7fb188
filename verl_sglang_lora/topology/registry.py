"""Find a frozen model by name from any process of the run: ``model_url("judge") -> "http://127.0.0.1:PORT"``.

The registry is the topology host itself (``host.py``), a named Ray actor in the run's namespace: reward functions
run in verl's reward-loop workers, Ray actors of the same job, so ``ray.get_actor(HOST_NAME)`` reaches it there. The
answer is cached per process (an engine's address does not change while the host lives).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from verl_sglang_lora.topology.host import HOST_NAME, TopologyHost
from verl_sglang_lora.topology.schema import SETTING, Topology

DEFAULT_TIMEOUT_S = 900.0  # a frozen engine still starting when reward code first asks: load + profile + warm-up
POLL_S = 1.0
_urls: dict[str, str] = {}
_held_hosts: dict[str, Any] = {}  # namespace -> the host's handle; see ensure_host


def ensure_host(topology: Topology, actor_tp: int, visible_key: str = "CUDA_VISIBLE_DEVICES", **host_kwargs: Any) -> Any:
    """The run's topology host, created on this node if no replica created it yet (``get_if_exists``: no race).

    The handle is kept for the life of the calling process (a server actor, alive for the run): Ray ends a
    non-detached actor once no handle refers to it, name or not, and with it the frozen engines.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    namespace = host_namespace()
    host = ray.remote(TopologyHost).options(
        name=HOST_NAME, namespace=namespace, get_if_exists=True, num_cpus=0, max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
    ).remote(topology, actor_tp, visible_key=visible_key, **host_kwargs)
    _held_hosts[namespace] = host
    return host


def host_namespace() -> str:
    """The host's Ray namespace: named after the job, so every process of the run (trainer, server actors, reward
    workers and their executor threads) names it the same way, and two runs on one cluster never share a host."""
    import ray

    return f"sglang_lora_{ray.get_runtime_context().get_job_id()}"


def _host() -> Any:
    import ray

    if not ray.is_initialized():
        raise RuntimeError("verl_sglang_lora.topology.model_url() is called outside the run's Ray job: frozen models "
                           "are found through the run's topology host. Fix: call it from reward code that verl runs "
                           "(its reward workers are in the job), or ray.init(address=..., namespace=<the run's>) first")
    namespace = host_namespace()
    try:
        return ray.get_actor(HOST_NAME, namespace=namespace)
    except ValueError as exc:
        named = sorted(f"{a.get('namespace')}/{a.get('name')}" for a in ray.util.list_named_actors(all_namespaces=True)
                       if "sglang" in str(a.get("name")))
        raise LookupError(f"no SGLang topology host in this Ray job (actor `{namespace}/{HOST_NAME}`; Ray: {exc}; "
                          f"named SGLang actors in the cluster: {named or 'none'}): the run has no frozen models, or "
                          f"its SGLang servers did not launch yet. Fix: set {SETTING} to a YAML with the model "
                          "(update_weights: false) and call model_url() from reward code") from None


def _answer(name: str, reply: dict[str, Any], started: float, timeout: float) -> str | None:
    if reply.get("error"):
        raise RuntimeError(f"frozen model `{name}`: {reply['error']}")
    if reply.get("url"):
        _urls[name] = reply["url"]
        return reply["url"]
    if time.monotonic() - started > timeout:
        raise TimeoutError(f"frozen model `{name}` did not answer within {timeout:.0f} s: {reply.get('state')}")
    return None


def model_url(name: str, timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """The base URL of frozen model ``name`` (its one engine, or its router); waits while it starts."""
    if name in _urls:
        return _urls[name]
    import ray

    host, started = _host(), time.monotonic()
    while True:
        url = _answer(name, ray.get(host.url.remote(name)), started, timeout)
        if url:
            return url
        time.sleep(POLL_S)


async def model_url_async(name: str, timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """:func:`model_url` for async reward functions (never blocks the event loop)."""
    if name in _urls:
        return _urls[name]
    host, started = _host(), time.monotonic()
    while True:
        url = _answer(name, await host.url.remote(name), started, timeout)
        if url:
            return url
        await asyncio.sleep(POLL_S)
