"""The topology setting inside a run: the validated YAML for this run's rollout config, or every reason it is not.

Called from ``verl_glue.config_guards.config_problems`` (the server actor's ``__init__`` and ``doctor``), before any
GPU is allocated. The schema's own checks run against the run's ``actor_rollout_ref.model.path`` and TP; on top, what
the launch relies on: one engine per verl replica, frozen models on the first node with their memory
share set, and one address per frozen model (``router.py``). The GPU-count check against
``trainer.n_gpus_per_node x trainer.nnodes`` needs the trainer block, which only ``doctor`` sees.
"""

from __future__ import annotations

import sys
from typing import Any

from verl_sglang_lora.topology.placement import plan_placement
from verl_sglang_lora.topology.replicas import model_key
from verl_sglang_lora.topology.router import ROUTER_FIX, router_installed
from verl_sglang_lora.topology.schema import (
    SETTING,
    Topology,
    TopologyError,
    fields_of,
    load_topology,
    server_args_fields_from_source,
)
from verl_sglang_lora.verl_glue.config_access import cfg_get, cfg_path

MEM_KEY = "mem_fraction_static"


def topology_path(rollout_config: Any) -> str:
    return str(cfg_path(rollout_config, "engine_kwargs.sglang_lora.topology", "") or "")


def _server_args_fields() -> frozenset[str]:
    """The imported ServerArgs' fields where SGLang is already imported (the server actor), else its source's (the
    doctor never imports SGLang in-process)."""
    module = sys.modules.get("sglang.srt.server_args")
    return fields_of(module.ServerArgs) if module is not None else server_args_fields_from_source()


def run_topology(rollout_config: Any, model_config: Any) -> Topology | None:
    """The validated topology for this run's rollout config, None when the setting is empty; raises ``TopologyError``."""
    path = topology_path(rollout_config)
    if not path:
        return None
    return load_topology(path, actor_model_path=str(cfg_get(model_config, "path", "") or ""),
                         rollout_tp=int(cfg_get(rollout_config, "tensor_model_parallel_size", 1) or 1),
                         server_args_fields=_server_args_fields())


def topology_problems(rollout_config: Any, model_config: Any) -> list[str]:
    """Every reason this run cannot launch the topology (empty: accepted)."""
    path = topology_path(rollout_config)
    if not path:
        return []
    try:
        topo = run_topology(rollout_config, model_config)
    except TopologyError as exc:
        return [f"{SETTING}={path}: {p}" for p in exc.problems]
    assert topo is not None
    problems: list[str] = []

    def bad(key: str, message: str, fix: str) -> None:
        problems.append(f"{SETTING}={path}: {key}: {message}. Fix: {fix}")

    dp = int(cfg_get(rollout_config, "data_parallel_size", 1) or 1)
    if dp != 1:
        problems.append(f"actor_rollout_ref.rollout.data_parallel_size={dp} with {SETTING}: a verl replica is then "
                        "TP x DP GPUs, not one engine of the YAML's actor groups. Fix: data_parallel_size=1 (the "
                        "YAML's engines are the data-parallel copies)")
    per_node = int(cfg_get(rollout_config, "n_gpus_per_node", 0) or 0)
    actor, akey = topo.actor, model_key(topo, topo.actor.name)
    tp = actor.groups[0].num_gpus_per_engine
    if per_node and actor.num_gpus % per_node:
        bad(f"{akey}.server_groups", f"the actor's groups hold {actor.num_gpus} GPU(s), not whole nodes of "
                                     f"actor_rollout_ref.rollout.n_gpus_per_node={per_node} (trainer.n_gpus_per_node):"
                                     " verl puts a rollout replica on every trainer GPU",
            "make the actor's num_gpus add up to trainer.n_gpus_per_node x trainer.nnodes")
    frozen = [m for m in topo.models if not m.update_weights]
    if not frozen:
        return problems
    if per_node and tp > per_node:
        bad(f"{akey}.server_groups[0].num_gpus_per_engine", f"an actor engine of {tp} GPUs spans nodes of {per_node}; "
                                                            "frozen models are placed by the devices of the first "
                                                            "node's replicas",
            "keep the actor's TP within one node, or run the frozen models outside the topology")
    from verl_sglang_lora.runtime.settings import PluginSettings

    restarts = PluginSettings.from_rollout_config(rollout_config).server_max_restarts
    if restarts > 0:
        # the frozen engines' host is owned by the replica that created it: Ray ends it (and the engines) with that
        # replica's actor, and the restarted replica cannot start the engines on the other replicas' GPUs
        problems.append(f"actor_rollout_ref.rollout.engine_kwargs.sglang_lora.server_max_restarts={restarts} with "
                        f"frozen models in {SETTING}: a restarted server actor takes the frozen engines down with it. "
                        "Fix: server_max_restarts=0 with a topology of frozen models")
    frozen_gpus = sum(m.num_gpus for m in frozen)
    if per_node and frozen_gpus > per_node:
        bad("sglang", f"the frozen models need {frozen_gpus} GPU(s) but run on the first node's {per_node} "
                      "(actor_rollout_ref.rollout.n_gpus_per_node), beside the actor",
            f"lower the frozen models' num_gpus to at most {per_node} in all")
    util = float(cfg_get(rollout_config, "gpu_memory_utilization", 0.5) or 0.5)
    rows = plan_placement(topo)
    share: dict[int, float] = {}  # per GPU: the actor engine's share (its group override, else verl's) + frozen ones
    for row in rows:
        if row.model == actor.name:
            for gpu in row.gpus:
                share[gpu] = float(row.overrides.get(MEM_KEY, util))
    for m in frozen:
        mkey = model_key(topo, m.name)
        for j, group in enumerate(m.groups):
            frac = group.overrides.get(MEM_KEY)
            if frac is None:
                bad(f"{mkey}.server_groups[{j}].overrides.{MEM_KEY}",
                    "unset: a frozen model shares the trainer's GPUs with the actor's rollout and training, and "
                    "SGLang's default takes most of a GPU", f"set it, e.g. `{MEM_KEY}: 0.1` (a share of the memory "
                                                            "free when the engine starts)")
                continue
            for row in rows:
                if row.model == m.name and row.group == j:
                    for gpu in row.gpus:
                        share[gpu] = share.get(gpu, 0.0) + float(frac)
        engines = sum(g.engines for g in m.groups)
        if engines > 1 and not router_installed():
            bad(f"{mkey}.server_groups", f"`{m.name}` has {engines} engines and sglang-router is not installed, so "
                                         "it would have no single address for model_url()", ROUTER_FIX)
    for gpu, total in sorted(share.items()):
        if total >= 1.0:
            bad("sglang", f"on GPU {gpu} the SGLang engines' {MEM_KEY} add up to {total:g} (the actor's: its group "
                          f"override, else actor_rollout_ref.rollout.gpu_memory_utilization={util:g}; plus the frozen "
                          "engines'): the frozen engines stay resident while the actor trains, so nothing would be left "
                          "for training",
                f"lower the frozen engines' {MEM_KEY} or the actor's share so they add up to less than 1")
    return problems
