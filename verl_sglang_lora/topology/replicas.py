"""Which of the actor's server groups each of verl's rollout replicas is.

verl 0.9.1 builds ``trainer GPUs // rollout TP`` replicas from one ``RolloutConfig``; replica ``r`` holds trainer ranks
``[r*tp, (r+1)*tp)`` (``LLMServerManager._initialize_llm_servers``, ``RolloutReplica.init_hybrid``). The placement plan
lays the actor's engines on the same GPUs in the same order, so replica ``r`` *is* the actor's engine ``r``: it
launches with that engine's group overrides. Mixed TP sizes cannot be expressed this way and are refused by the schema.
"""

from __future__ import annotations

from verl_sglang_lora.topology.placement import Placement, plan_placement
from verl_sglang_lora.topology.schema import SETTING, Topology


def model_key(topology: Topology, name: str) -> str:
    """``sglang[i]``: where the model sits in the YAML (for refusals)."""
    return f"sglang[{[m.name for m in topology.models].index(name)}]"


def actor_engines(topology: Topology) -> list[Placement]:
    return [row for row in plan_placement(topology) if row.model == topology.actor.name]


def replica_engine(topology: Topology, replica_rank: int) -> Placement:
    """The actor engine that verl's replica ``replica_rank`` is; refuses a replica the YAML does not place."""
    rows = actor_engines(topology)
    if not 0 <= replica_rank < len(rows):
        key = model_key(topology, topology.actor.name)
        raise ValueError(
            f"{SETTING}={topology.source}: {key}.server_groups: verl started rollout replica {replica_rank} but the "
            f"actor's groups place {len(rows)} engine(s) of {rows[0].tp if rows else '?'} GPU(s). Fix: make the actor's "
            "num_gpus add up to trainer.n_gpus_per_node x trainer.nnodes (`verl-sglang-lora doctor` checks it)")
    return rows[replica_rank]
