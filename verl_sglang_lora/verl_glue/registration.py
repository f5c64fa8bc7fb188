"""Teach verl the rollout name ``sglang_lora`` in both of its registries.

- ``RolloutReplicaRegistry`` (server side, used where replicas are built): a lazy loader, so registering
  does not import SGLang;
- ``_ROLLOUT_REGISTRY[("sglang_lora", "async")]`` (weight-sync client, used inside the Ray workers): the
  dotted path of :class:`verl_sglang_lora.runtime.sync_client.SGLangLoRAServerAdapter`.

Both must be filled in every process, Ray workers included; see ``verl_sglang_lora.register`` for how.
"""

from __future__ import annotations

from verl_sglang_lora import ROLLOUT_NAME
from verl_sglang_lora.verl_glue import trainer_metrics

ADAPTER_FQN = "verl_sglang_lora.runtime.sync_client.SGLangLoRAServerAdapter"


def load_replica_class() -> type:
    """Loader verl calls on ``RolloutReplicaRegistry.get("sglang_lora")`` (in the trainer, which builds replicas)."""
    from verl_sglang_lora.verl_glue.imports import import_verl_sglang_for_driver

    import_verl_sglang_for_driver()
    from verl_sglang_lora.runtime.server import SGLangLoRAReplica

    return SGLangLoRAReplica


def register() -> None:
    """Fill both registries; safe to call any number of times."""
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register(ROLLOUT_NAME, load_replica_class)
    base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = ADAPTER_FQN
    trainer_metrics.install()  # sglang_lora/* sync figures in verl's per-step metrics


def registration_state() -> dict[str, bool]:
    """Whether each registry knows the name in this process (does not register)."""
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    return {
        "RolloutReplicaRegistry": RolloutReplicaRegistry._registry.get(ROLLOUT_NAME) is load_replica_class,
        "_ROLLOUT_REGISTRY": base._ROLLOUT_REGISTRY.get((ROLLOUT_NAME, "async")) == ADAPTER_FQN,
    }
