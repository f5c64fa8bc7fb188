"""Importing this module registers ``sglang_lora`` with verl. It is reached three ways, so that every
process of a run -- driver, TaskRunner, each Ray worker -- has the name on every supported verl:

1. the ``verl.plugins`` entry point (verl >= 0.9.0 loads it on ``import verl``, but swallows errors at DEBUG
   level, hence the WARNING below);
2. ``actor_rollout_ref.model.external_lib=verl_sglang_lora.register`` (set by the Hydra overlay; verl imports
   it whenever it builds its model config, on every release including 0.8.0, which has no entry points);
3. ``VERL_USE_EXTERNAL_MODULES=verl_sglang_lora.register`` in the Ray runtime env (set by the overlay), which
   ``import verl`` honours in every worker process.

It also arms a guard of transformers' Auto registries. The guard acts at the first ``import megatron.bridge``
(``runtime/bridge_registrations.py``).
"""

import logging

from verl_sglang_lora.runtime import bridge_registrations
from verl_sglang_lora.verl_glue.registration import register

try:
    register()
except Exception as _exc:  # verl's entry-point loop would hide this at DEBUG level
    logging.getLogger("verl_sglang_lora").warning(
        "verl-sglang-lora could not register rollout.name=sglang_lora: %s: %s", type(_exc).__name__, _exc
    )
    raise

try:
    bridge_registrations.install()
except Exception as _exc:  # the guard is a convenience: a Megatron run without it fails at its own import, loudly
    logging.getLogger("verl_sglang_lora").warning(
        "verl-sglang-lora could not guard megatron-bridge's transformers registrations: %s: %s",
        type(_exc).__name__, _exc,
    )
