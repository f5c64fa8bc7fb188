"""Reach SGLang's LoRA state from the served model, all a custom loader is given (docs/resident_sync.md, section 2)."""

from __future__ import annotations

import gc
import inspect
import weakref
from typing import Any

from .protocol import ErrorCode as E

_MANAGERS: dict[int, "weakref.ref[Any]"] = {}  # id(model) -> manager; weak, so tests do not pin pools
# The pool's buffers beside the per-layer ``A_buffer`` / ``B_buffer`` (dicts keyed by module; absent on older releases)
EMBEDDING_BUFFERS = ("embedding_A_buffer", "embedding_B_buffer", "lm_head_A_buffer", "lm_head_B_buffer",
                     "new_embeddings_buffer")


class ResidentError(RuntimeError):
    """A guard of the resident path failed; ``code`` travels back in the status tensor."""

    def __init__(self, code: E, message: str) -> None:
        super().__init__(message)
        self.code = code


def find_lora_manager(model: Any) -> Any:
    """The ``LoRAManager`` serving ``model`` (raises ``ResidentError`` if LoRA is not enabled). SGLang hands a custom
    loader only the model; its manager (``model_runner.lora_manager``) is the live ``LoRAManager`` whose
    ``base_model`` is that model, found once per model among the collector's objects and then cached."""
    ref = _MANAGERS.get(id(model))
    cached = ref() if ref is not None else None
    if cached is not None and cached.base_model is model:
        return cached
    found = [o for o in gc.get_objects() if type(o).__name__ == "LoRAManager" and getattr(o, "base_model", None) is model]
    if not found:
        raise ResidentError(E.LORA_DISABLED, "no LoRAManager holds the served model: launch SGLang with --enable-lora "
                                             "(and do not call its /freeze_gc, which hides the manager from this lookup)")
    _MANAGERS[id(model)] = weakref.ref(found[0])
    return found[0]


def resolve_uid(manager: Any, slot: str) -> str:
    """The pool uid (``lora_id``) of a slot named by its ``lora_name`` or already by its ``lora_id``."""
    if slot in manager.loras:
        return slot
    hits = [uid for uid, ref in manager.lora_refs.items() if getattr(ref, "lora_name", None) == slot]
    if len(hits) != 1:
        raise ResidentError(E.UNKNOWN_SLOT, f"slot {slot!r}: {len(hits)} loaded adapters carry that name")
    return hits[0]


def buffer_id(manager: Any, uid: str) -> int:
    """The pool slot index holding ``uid`` (raises if the adapter is not resident)."""
    slot = manager.memory_pool.uid_to_buffer_id.get(uid)
    if slot is None:
        raise ResidentError(E.NOT_RESIDENT, f"adapter {uid} is not resident in the LoRA memory pool")
    return int(slot)


def new_adapter(manager: Any, uid: str) -> Any:
    """A fresh ``LoRAAdapter`` built like the one of ``uid``, its constructor arguments read from the release's
    signature (for feeding SGLang's own normalization other tensors)."""
    existing = manager.loras[uid]
    cls = type(existing)
    kwargs = {}
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if hasattr(existing, name):
            kwargs[name] = getattr(existing, name)
        elif name == "base_hf_config":
            kwargs[name] = manager.base_hf_config
        elif param.default is inspect.Parameter.empty:
            raise ResidentError(E.ADAPTER_REBUILD, f"cannot rebuild {cls.__name__}: no value for {name!r}")
    return cls(**kwargs)
