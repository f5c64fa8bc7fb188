"""The placement plan of a validated topology: which engine of which group of which model runs on which GPUs.

The actor's groups take the trainer's GPUs in order (verl's hybrid engine puts one rollout replica on every
``trainer.n_gpus_per_node x trainer.nnodes`` GPU, ``tensor_model_parallel_size`` GPUs each). Frozen models are
planned beside it, on the same GPUs, laid out one after the other from GPU 0 (the one-GPU layout:
actor + judge on one GPU); their memory share is theirs to set (``overrides.mem_fraction_static``).
GPU ids are global ranks: node = id // trainer.n_gpus_per_node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from verl_sglang_lora.topology.schema import Topology


@dataclass(frozen=True)
class Placement:
    model: str
    group: int
    worker_type: str
    role: str  # "actor (update_weights)" or "frozen"
    engine: int  # index within the group
    gpus: tuple[int, ...]
    tp: int
    overrides: dict[str, Any]


def plan_placement(topology: Topology) -> list[Placement]:
    rows: list[Placement] = []
    ordered = [topology.actor] + [m for m in topology.models if not m.is_actor]
    frozen_next = 0
    for model in ordered:
        nxt = 0 if model.is_actor else frozen_next
        for j, group in enumerate(model.groups):
            for e in range(group.engines):
                gpus = tuple(range(nxt, nxt + group.num_gpus_per_engine))
                nxt += group.num_gpus_per_engine
                rows.append(Placement(model.name, j, group.worker_type,
                                      "actor (update_weights)" if model.is_actor else "frozen",
                                      e, gpus, group.num_gpus_per_engine, dict(group.overrides)))
        if not model.is_actor:
            frozen_next = nxt
    return rows


def _gpus(gpus: tuple[int, ...]) -> str:
    return str(gpus[0]) if len(gpus) == 1 else f"{gpus[0]}-{gpus[-1]}"


def format_placement(rows: list[Placement]) -> str:
    header = ("model", "group", "type", "role", "engine", "gpus", "tp", "overrides")
    table = [header] + [
        (r.model, str(r.group), r.worker_type, r.role, str(r.engine), _gpus(r.gpus), str(r.tp),
         json.dumps(r.overrides, sort_keys=True) if r.overrides else "-")
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    lines = []
    for n, row in enumerate(table):
        lines.append(" | ".join(c.ljust(w) for c, w in zip(row, widths)) + " | " + row[-1])
        if n == 0:
            lines.append("-+-".join("-" * w for w in widths) + "-+-" + "-" * 9)
    return "\n".join(lines)


def summary(topology: Topology, rows: list[Placement]) -> str:
    """One line per model: name, path, engines, GPUs, TP sizes."""
    parts = []
    for m in topology.models:
        mine = [r for r in rows if r.model == m.name]
        gpus = sorted({g for r in mine for g in r.gpus})
        tps = sorted({r.tp for r in mine})
        parts.append(f"{m.name}{' [actor]' if m.is_actor else ''}: {len(mine)} engine(s) on GPU(s) "
                     f"{','.join(map(str, gpus))}, TP {'/'.join(map(str, tps))}, update_weights="
                     f"{str(m.update_weights).lower()}{' (inferred)' if m.update_weights_inferred else ''}, "
                     f"{m.model_path}")
    return "; ".join(parts)
