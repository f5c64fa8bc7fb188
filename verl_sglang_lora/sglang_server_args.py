"""Apply the LoRA contract to the arguments verl passes to SGLang's ``ServerArgs``.

verl builds the ServerArgs dict inside its own ``launch_server`` (different code in every release); the
plugin wraps the ``ServerArgs`` constructor that code calls, so the LoRA keys are always the plugin's, checked
against the fields the installed SGLang declares, whatever verl put there.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

logger = logging.getLogger(__name__)

LORA_KEYS = ("enable_lora", "max_lora_rank", "lora_target_modules", "max_loras_per_batch")


def apply_lora_args(args: dict[str, Any], lora_args: dict[str, Any], declared: set[str]) -> dict[str, Any]:
    """``args`` with the LoRA keys replaced by ``lora_args`` (adapter mode) or removed (merge / no LoRA)."""
    out = {k: v for k, v in args.items() if k not in LORA_KEYS}
    missing = [k for k in lora_args if k not in declared]
    if missing:
        raise TypeError(f"the installed SGLang ServerArgs does not declare {missing}; LoRA adapters cannot be served")
    out.update(lora_args)
    return out


def wrap_server_args(original: type, lora_args: dict[str, Any]) -> Callable[..., Any]:
    """A drop-in for ``ServerArgs`` (``dataclasses.fields()`` still works on it) that applies ``lora_args``."""
    declared = set(original.__dataclass_fields__)

    def make(**args: Any) -> Any:
        final = apply_lora_args(args, lora_args, declared)
        logger.warning(
            "sglang_lora: launching SGLang with %s",
            {k: final.get(k) for k in LORA_KEYS if k in final} or "LoRA disabled (merge mode or no LoRA)",
        )
        return original(**final)

    make.__dataclass_fields__ = original.__dataclass_fields__  # type: ignore[attr-defined]
    make.__wrapped__ = original  # type: ignore[attr-defined]
    return make
