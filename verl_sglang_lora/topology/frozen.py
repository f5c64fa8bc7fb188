"""The frozen models' engines (``update_weights: false``): which GPUs, which exact ``ServerArgs``.

Each engine's kwargs are the plan's placement (model path, TP size, the first of its GPUs as device 0 of the
``CUDA_VISIBLE_DEVICES`` it gets) with the group's ``overrides`` on top -- the highest precedence, as for the actor.
The schema refuses overrides of the placement keys (``PLACEMENT_KEYS``), so nothing here can be overridden away.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from verl_sglang_lora.topology.placement import plan_placement
from verl_sglang_lora.topology.schema import Topology
from verl_sglang_lora.topology.sync_guard import check_frozen_launch

HOST = "127.0.0.1"  # engines are reached from the node they run on (reward workers of a one-node run)


@dataclass(frozen=True)
class EngineSpec:
    model: str
    group: int
    engine: int
    gpus: tuple[int, ...]  # plan GPU ids (global trainer ranks)
    model_path: str
    tp: int
    overrides: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{self.model}/group{self.group}/engine{self.engine}"


def frozen_engines(topology: Topology) -> list[EngineSpec]:
    """Every engine of every frozen model, in plan order."""
    models = {m.name: m for m in topology.models}
    return [EngineSpec(r.model, r.group, r.engine, r.gpus, models[r.model].model_path, r.tp, dict(r.overrides))
            for r in plan_placement(topology) if not models[r.model].update_weights]


def engine_server_args(spec: EngineSpec, port: int) -> dict[str, Any]:
    """The kwargs of the engine's ``ServerArgs``: placement first, the group's overrides on top."""
    args: dict[str, Any] = {"model_path": spec.model_path, "tp_size": spec.tp, "base_gpu_id": 0, "gpu_id_step": 1,
                            "host": HOST, "port": port}
    args.update(spec.overrides)
    check_frozen_launch(spec.model, args)
    return args


def engine_env(base: dict[str, str], devices: Sequence[str], visible_key: str = "CUDA_VISIBLE_DEVICES") -> dict[str, str]:
    """The engine's environment: exactly its own devices visible (the ids the Ray workers of those GPUs were given).

    ``SGLANG_GRPC_PORT`` is left as the user set it: the engine's port comes from ``sglang_contract.ports``."""
    env = dict(base)
    env[visible_key] = ",".join(devices)
    return env
