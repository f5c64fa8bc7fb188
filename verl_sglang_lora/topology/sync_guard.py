"""Who may receive the trainer's weights: every replica of the model marked ``update_weights`` and nothing else.

The adapter sync reaches a server through verl's replica actors (``sglang_server_<replica>_<node>``), one per actor
engine (``replicas.py``), so every group of the actor gets every sync. Frozen models are served by the plugin's host
(``host.py``) under names verl's sync client never resolves, launched without a custom weight loader; this
module is the one check both sides call, so a frozen model receiving a sync is an error, never a silent update.
"""

from __future__ import annotations

from typing import Any, Mapping

from verl_sglang_lora.topology.schema import SETTING, Topology

VERL_SERVER_PREFIX = "sglang_server_"  # verl's replica actor names: the sync client resolves only these
# the ServerArgs key of the in-place weight path (the plugin's resident loader); a frozen model's own static LoRA
# (enable_lora + lora_paths) is its business and stays allowed
WEIGHT_PUSH_KEYS = ("custom_weight_loader",)


class FrozenModelSyncError(RuntimeError):
    """A sync aimed at a model with ``update_weights: false``."""


def sync_targets(topology: Topology) -> tuple[str, ...]:
    """The models that receive the trainer's weights (the schema allows exactly one: the actor)."""
    return tuple(m.name for m in topology.models if m.update_weights)


def check_sync_target(topology: Topology, model: str) -> None:
    """Raise unless ``model`` is marked ``update_weights``."""
    if model in sync_targets(topology):
        return
    known = [m.name for m in topology.models]
    what = "is frozen (update_weights: false)" if model in known else f"is not a model of the topology ({known})"
    raise FrozenModelSyncError(
        f"{SETTING}={topology.source}: a weight sync was aimed at `{model}`, which {what}; only "
        f"{list(sync_targets(topology))} receive the trainer's weights. Fix: set `update_weights: true` only on the "
        "trained actor; frozen models are never synced")


def check_frozen_launch(model: str, server_args: Mapping[str, Any], actor_name: str | None = None) -> None:
    """A frozen engine is launched with no in-place weight path and under a name verl's sync cannot find."""
    pushing = [k for k in WEIGHT_PUSH_KEYS if server_args.get(k)]
    if pushing:
        raise FrozenModelSyncError(f"frozen model `{model}` would launch with {pushing}: those load weights into a "
                                   "running engine. Fix: delete them from its overrides")
    if actor_name is not None and actor_name.startswith(VERL_SERVER_PREFIX):
        raise FrozenModelSyncError(f"frozen model `{model}` would run under `{actor_name}`, a name verl's weight "
                                   "sync resolves")
