"""The topology host: a Ray actor that runs the frozen models' engines and tells reward code where they are.

One per run, named ``HOST_NAME`` in the run's Ray namespace (so reward workers, which are Ray actors of the same job,
find it: ``registry.model_url``). It is created by the first actor replica that launches and lives as long as that
replica's server actor (Ray ends both with the run); its engines die with it (``processes.py``) or at ``shutdown``.

GPUs: the plan's GPU ``g`` is trainer rank ``g``; the actor replica ``g // tp`` runs there and reports the device ids
Ray gave it (``report_devices``). An engine starts once all its GPUs are reported; a replica waits for the frozen
engines on its GPUs before its own SGLang starts, because SGLang sizes its memory from what is free when it starts
(``mem_fraction_static`` x free memory): two engines profiling at once on one GPU would each count the other's.
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Any, Callable, Sequence

from verl_sglang_lora.sglang_contract.ports import server_port
from verl_sglang_lora.topology.frozen import HOST, EngineSpec, engine_env, engine_server_args, frozen_engines
from verl_sglang_lora.topology.processes import ChildProcess, free_port
from verl_sglang_lora.topology.router import ROUTER_FIX, router_command, router_installed
from verl_sglang_lora.topology.schema import SETTING, Topology
from verl_sglang_lora.topology.serve import serve_command

logger = logging.getLogger(__name__)
HOST_NAME = "sglang_lora_topology"

Command = Callable[[dict[str, Any]], list[str]]  # ServerArgs kwargs -> the engine's command line


class TopologyHost:
    """Starts, watches and stops the frozen engines (and routers) of one run; answers where each model is."""

    def __init__(self, topology: Topology, actor_tp: int, command: Command | None = None,
                 visible_key: str = "CUDA_VISIBLE_DEVICES") -> None:
        self.topology, self.actor_tp, self.visible_key = topology, actor_tp, visible_key
        self.command: Command = command or serve_command
        self.specs: list[EngineSpec] = frozen_engines(topology)
        self.devices: dict[int, str] = {}  # plan GPU -> device id
        self.engines: dict[str, tuple[ChildProcess, dict[str, Any]]] = {}  # spec.key -> (process, ServerArgs kwargs)
        self.routers: dict[str, ChildProcess] = {}
        self.errors: dict[str, str] = {}
        counts: dict[str, int] = {}
        for spec in self.specs:
            counts[spec.model] = counts.get(spec.model, 0) + 1
        self.several = sorted(m for m, n in counts.items() if n > 1)
        if self.several and not router_installed():
            raise RuntimeError(f"{SETTING}={topology.source}: models {self.several} have several engines and "
                               f"sglang-router is not installed, so they would have no single address. Fix: "
                               f"{ROUTER_FIX}")
        atexit.register(self.shutdown)

    # ---- launching -------------------------------------------------------------------------------------------
    def report_devices(self, replica_rank: int, devices: Sequence[str]) -> list[str]:
        """Record the device ids of actor replica ``replica_rank``; start every engine now fully placed."""
        for i, device in enumerate(devices[: self.actor_tp]):
            self.devices[replica_rank * self.actor_tp + i] = str(device)
        started = []
        for spec in self.specs:
            if spec.key not in self.engines and all(g in self.devices for g in spec.gpus):
                self._start(spec)
                started.append(spec.key)
        return started

    def _start(self, spec: EngineSpec) -> None:
        port = server_port(HOST)
        args = engine_server_args(spec, port)
        env = engine_env(dict(os.environ), [self.devices[g] for g in spec.gpus], self.visible_key)
        proc = ChildProcess(self.command(args), env, f"http://{HOST}:{port}")
        logger.warning("sglang_lora topology: %s on GPU(s) %s (devices %s), pid %d: ServerArgs %s", spec.key,
                       list(spec.gpus), env[self.visible_key], proc.pid, args)
        self.engines[spec.key] = (proc, args)

    # ---- readiness --------------------------------------------------------------------------------------------
    def _engine_state(self, spec: EngineSpec) -> str:
        if spec.key not in self.engines:
            return "waiting for GPUs"
        proc, _ = self.engines[spec.key]
        code = proc.exit_code()
        if code is not None:
            self.errors.setdefault(spec.key, f"{spec.key} exited with code {code} (its log is in this run's output, "
                                             "after `launching frozen engine with ServerArgs`)")
            return "failed"
        return "ready" if proc.healthy() else "starting"

    def gpus_ready(self, gpus: Sequence[int]) -> dict[str, Any]:
        """Whether every frozen engine on ``gpus`` answers; ``error`` names a dead one."""
        mine = [s for s in self.specs if set(s.gpus) & set(gpus)]
        states = {s.key: self._engine_state(s) for s in mine}
        failed = [self.errors[k] for k, v in states.items() if v == "failed"]
        return {"ready": all(v == "ready" for v in states.values()), "states": states,
                "error": "; ".join(failed) or None}

    def url(self, model: str) -> dict[str, Any]:
        """``{"url": ...}`` once the model answers, else ``{"url": None, "state": ...}``; ``error`` when it cannot."""
        mine = [s for s in self.specs if s.model == model]
        if not mine:
            frozen = sorted({s.model for s in self.specs})
            return {"url": None, "error": f"no frozen model named `{model}` in {self.topology.source} (frozen models: "
                                          f"{frozen}). Fix: use one of those names, or add the model to the YAML"}
        states = {s.key: self._engine_state(s) for s in mine}
        failed = [self.errors[k] for k, v in states.items() if v == "failed"]
        if failed:
            return {"url": None, "error": "; ".join(failed)}
        if any(v != "ready" for v in states.values()):
            return {"url": None, "state": states}
        if len(mine) == 1:
            return {"url": self.engines[mine[0].key][0].url}
        router = self.routers.get(model) or self._start_router(model, mine)
        code = router.exit_code()
        if code is not None:
            return {"url": None, "error": f"the sglang-router of `{model}` exited with code {code}"}
        return {"url": router.url} if router.healthy() else {"url": None, "state": {"router": "starting"}}

    def _start_router(self, model: str, specs: list[EngineSpec]) -> ChildProcess:
        port = free_port(HOST)
        urls = [self.engines[s.key][0].url for s in specs]
        router = ChildProcess(router_command(urls, HOST, port), dict(os.environ), f"http://{HOST}:{port}")
        logger.warning("sglang_lora topology: router for %s on port %d in front of %s", model, port, urls)
        self.routers[model] = router
        return router

    def describe(self) -> list[dict[str, Any]]:
        """Each started engine: model, GPUs, devices, pid, url and the exact ServerArgs kwargs."""
        out = []
        for spec in self.specs:
            if spec.key in self.engines:
                proc, args = self.engines[spec.key]
                out.append({"engine": spec.key, "gpus": list(spec.gpus), "devices": [self.devices[g] for g in spec.gpus],
                            "pid": proc.pid, "url": proc.url, "server_args": args})
        return out

    def pids(self) -> list[int]:
        return [p.pid for p, _ in self.engines.values()] + [r.pid for r in self.routers.values()]

    # ---- teardown -------------------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        for router in self.routers.values():
            router.stop()
        for proc, _ in self.engines.values():
            proc.stop()
