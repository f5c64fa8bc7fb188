"""Let megatron-bridge import on a transformers that ships a model type the bridge also vendors.

megatron-bridge 0.5.1 registers its own copy of Qwen3-ASR with transformers' Auto classes when it is imported
(``AutoConfig.register("qwen3_asr", ...)``, without ``exist_ok``). transformers 5.19 is SGLang 0.5.23's pin, and it
ships ``qwen3_asr`` itself. So ``from megatron.bridge import AutoBridge`` raises ``'qwen3_asr' is already used by a
Transformers config`` and verl's Megatron engine never starts (seen with megatron-bridge 0.5.1 and transformers 5.19).

megatron-bridge 0.6.2 decides the way this guard does: where transformers has the model type, transformers' classes
serve it, and the vendored copy is not registered. The guard applies only to a registration from a
``megatron.bridge`` module that transformers refuses as already used, for a model type it ships. Every other
registration, and every other error, passes through unchanged. Each skip is a WARNING.

``install`` costs nothing up front. It puts a finder on ``sys.meta_path`` that guards the registries only when
``megatron.bridge`` is first imported: importing transformers' Auto modules takes seconds, and an FSDP run never
needs them. ``VERL_SGLANG_LORA_BRIDGE_REGISTRATIONS=0`` opts out.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import inspect
import logging
import os
import sys
from typing import Any, Callable

logger = logging.getLogger(__name__)

OPT_OUT_ENV = "VERL_SGLANG_LORA_BRIDGE_REGISTRATIONS"
BRIDGE_PACKAGE = "megatron.bridge"
# (module, class, the register parameter naming the model type or its config, the parameter naming the class
# registered) for each Auto registry megatron-bridge writes to; the model classes share one register method
REGISTRIES = (
    ("transformers.models.auto.configuration_auto", "AutoConfig", "model_type", "config"),
    ("transformers.models.auto.auto_factory", "_BaseAutoModelClass", "config_class", "model_class"),
    ("transformers.models.auto.processing_auto", "AutoProcessor", "config_class", "processor_class"),
)
_MARK = "_sglang_lora_bridge_guard"

skipped: list[tuple[str, str, str]] = []  # (registry, model type, the bridge class left unregistered)
guarded: list[str] = []  # the registries whose register is wrapped in this process


def _model_type(key: Any) -> str | None:
    return key if isinstance(key, str) else getattr(key, "model_type", None)


def _native_model_types() -> frozenset[str]:
    """The model types transformers itself ships (its own name table, not what was registered at run time)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return frozenset(CONFIG_MAPPING_NAMES)


def _from_bridge(cls: Any) -> bool:
    module = getattr(cls, "__module__", "") or ""
    return module == BRIDGE_PACKAGE or module.startswith(BRIDGE_PACKAGE + ".")


def _guarded(registry: str, func: Callable, key_param: str, class_param: str) -> Callable:
    signature = inspect.signature(func)

    @functools.wraps(func)
    def register(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ValueError as exc:
            bound = signature.bind(*args, **kwargs).arguments
            model_type = _model_type(bound.get(key_param))
            cls = bound.get(class_param)
            if not (_from_bridge(cls) and model_type in _native_model_types() and "already used" in str(exc)):
                raise
            import transformers

            auto = getattr(bound.get("cls"), "__name__", registry)  # the model classes: the one called
            skipped.append((auto, str(model_type), f"{cls.__module__}.{cls.__qualname__}"))
            logger.warning(
                "sglang_lora: megatron-bridge's own %s for model type %r is not registered with transformers' %s: "
                "transformers %s ships that model type, and its classes serve it (as megatron-bridge >= 0.6.2 "
                "decides). transformers said: %s (%s=0 turns this guard off)",
                cls.__qualname__, model_type, auto, transformers.__version__, exc, OPT_OUT_ENV,
            )
            return None

    setattr(register, _MARK, True)
    return register


def _install_one(module_name: str, owner_name: str, key_param: str, class_param: str) -> bool:
    owner = getattr(importlib.import_module(module_name), owner_name, None)
    static = inspect.getattr_static(owner, "register", None) if owner is not None else None
    func = getattr(static, "__func__", static)
    if func is None or getattr(func, _MARK, False):
        return func is not None
    params = inspect.signature(func).parameters
    if key_param not in params or class_param not in params:
        logger.warning("sglang_lora: megatron-bridge registration guard not installed for transformers' %s: its "
                       "register takes %s, not %s and %s", owner_name, list(params), key_param, class_param)
        return False
    wrapped = _guarded(owner_name, func, key_param, class_param)
    setattr(owner, "register", type(static)(wrapped) if isinstance(static, (staticmethod, classmethod)) else wrapped)
    return True


def guard_registries() -> list[str]:
    """Wrap the Auto registries' ``register`` (idempotent); the names of those wrapped. One that cannot be wrapped is
    a WARNING, and the others are still wrapped."""
    for module, owner, key, cls in REGISTRIES:
        try:
            if _install_one(module, owner, key, cls) and owner not in guarded:
                guarded.append(owner)
        except Exception as exc:  # noqa: BLE001 - the bridge's import then fails as it would without the guard
            logger.warning("sglang_lora: megatron-bridge registration guard not installed for transformers' %s: "
                           "%s: %s", owner, type(exc).__name__, exc)
    return list(guarded)


class _OnBridgeImport(importlib.abc.MetaPathFinder):
    """Guards the registries when ``megatron.bridge`` is about to be imported, then leaves the import to the other
    finders; removes itself after its one use."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname == BRIDGE_PACKAGE:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            guard_registries()
        return None


def opted_out() -> bool:
    """``VERL_SGLANG_LORA_BRIDGE_REGISTRATIONS=0``: the guard stays off in this process."""
    return os.environ.get(OPT_OUT_ENV, "1") == "0"


def install() -> bool:
    """Arm the guard for this process: True when it will act at the first ``import megatron.bridge`` (not where the
    bridge is already imported, or with the opt-out). Idempotent."""
    if opted_out() or BRIDGE_PACKAGE in sys.modules:
        return False
    if not any(isinstance(finder, _OnBridgeImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OnBridgeImport())
    return True
