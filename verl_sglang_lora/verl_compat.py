"""The few verl entry points the plugin builds on, resolved once with clear errors."""

from __future__ import annotations

import importlib
from types import ModuleType


def load_verl_sglang_server() -> ModuleType:
    """verl's async SGLang server module, imported through verl's own replica loader.

    verl's loader for "sglang" installs the import shims its SGLang module needs (a vLLM stand-in for some
    SGLang imports, SGLANG_USE_CPU_ENGINE during import); going through it keeps those facts in verl.
    """
    try:
        from verl.workers.rollout.replica import RolloutReplicaRegistry

        RolloutReplicaRegistry.get("sglang")
        return importlib.import_module("verl.workers.rollout.sglang_rollout.async_sglang_server")
    except ImportError as exc:
        raise ImportError(
            f"rollout.name=sglang_lora needs verl's SGLang rollout, which failed to import: {exc}. Install SGLang "
            "with `pip install 'verl-sglang-lora[sglang]'` (README, Install) and check `verl-sglang-lora doctor`."
        ) from exc


def load_verl_server_adapter() -> type:
    """verl's SGLang weight-sync client class (``ServerAdapter``)."""
    try:
        module = importlib.import_module("verl.workers.rollout.sglang_rollout.sglang_rollout")
    except ImportError as exc:
        raise ImportError(
            f"rollout.name=sglang_lora needs verl's SGLang ServerAdapter, which failed to import: {exc}. "
            "Install SGLang with `pip install 'verl-sglang-lora[sglang]'`."
        ) from exc
    return module.ServerAdapter
