"""The few verl entry points the plugin builds on, resolved once with clear errors."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

VERL_SGLANG_SERVER_MODULE = "verl.workers.rollout.sglang_rollout.async_sglang_server"


def import_verl_sglang_for_driver() -> None:
    """In the trainer (no GPU needed): import verl's SGLang module through verl's own replica loader.

    That loader installs the import shims its SGLang module needs on a driver (a vLLM stand-in for some SGLang
    imports, ``SGLANG_USE_CPU_ENGINE=1`` during the import). Only for the process that builds replicas.
    """
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.get("sglang")


def load_verl_sglang_server() -> ModuleType:
    """verl's async SGLang server module, imported plainly -- as verl's own server actor imports it.

    Never through verl's replica loader in the server actor: it sets ``SGLANG_USE_CPU_ENGINE=1`` during the
    import, SGLang caches ``is_cpu()`` (and module constants derived from it) at import time, and the server
    then runs on the CPU device ("CPU device enabled" at launch, then a Triton
    "cpu tensor?" crash at the first prefill).
    """
    try:
        return importlib.import_module(VERL_SGLANG_SERVER_MODULE)
    except ImportError as exc:
        raise ImportError(
            f"rollout.name=sglang_lora needs verl's SGLang rollout, which failed to import: {exc}. Install SGLang "
            "with the tested set: `pip install '.[gpu]' -c constraints/verl0.9.1-sglang0.5.12.txt` plus SGLang with `--no-deps` (README, Install) and check `verl-sglang-lora doctor`."
        ) from exc


def refuse_sglang_cpu_engine() -> None:
    """Raise if SGLang in this process was imported in CPU-engine mode although no CPU engine is asked for now."""
    try:
        from sglang.srt.utils.common import is_cpu
    except ImportError:  # older layouts: nothing cached to check
        return
    if is_cpu() and os.environ.get("SGLANG_USE_CPU_ENGINE", "0") != "1":
        raise RuntimeError(
            "sglang_lora: SGLang was imported in this server process while SGLANG_USE_CPU_ENGINE=1 (verl's replica "
            "loader sets it during its import), so SGLang would run on the CPU device and crash at the first "
            "prefill. Import verl's async_sglang_server plainly in the server actor "
            "(verl_sglang_lora.verl_glue.imports.load_verl_sglang_server), not through RolloutReplicaRegistry.get('sglang')."
        )


def load_verl_server_adapter() -> type:
    """verl's SGLang weight-sync client class (``ServerAdapter``)."""
    try:
        module = importlib.import_module("verl.workers.rollout.sglang_rollout.sglang_rollout")
    except ImportError as exc:
        raise ImportError(
            f"rollout.name=sglang_lora needs verl's SGLang ServerAdapter, which failed to import: {exc}. "
            "Install SGLang as the tested set: `pip install '.[gpu]' -c constraints/verl0.9.1-sglang0.5.12.txt` plus SGLang with `--no-deps` (README, Install)."
        ) from exc
    return module.ServerAdapter
