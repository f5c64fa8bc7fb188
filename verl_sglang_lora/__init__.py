"""verl-sglang-lora: LoRA training with SGLang rollouts for verl, selected by ``rollout.name=sglang_lora``.

Importing this package is cheap and has no side effects; ``verl_sglang_lora.register`` is the module whose
import fills verl's registries (verl loads it through the ``verl.plugins`` entry point and through
``actor_rollout_ref.model.external_lib``).
"""

__version__ = "0.2.0"

ROLLOUT_NAME = "sglang_lora"

__all__ = ["ROLLOUT_NAME", "__version__"]
