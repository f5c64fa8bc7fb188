"""Keep the answer of SGLang's per-request derived-weight-cache check for the plugin's own loader requests.

SGLang 0.5.23's ``update_weights_from_tensor`` calls ``_unsupported_derived_weight_cache_error(model)`` on every
request, before any loader runs: two walks of ``model.modules()`` with five missing-attribute lookups per module
(~4 ms for a 589-module tree on a CPU core; on the H200's host the 0.5.23 header-only request costs 2.3-3 ms more
than on 0.5.12, scaling with the layer count). The in-place path sends one request per sync, so the walk is most
of SGLang's share of a sync.

Installed by the loader's attach, inside the scheduler process. The kept answer serves only a call from
``update_weights_from_tensor`` whose ``load_format`` is the plugin's loader: those requests change no model weight,
only LoRA pool bytes. Every other call (a base-weight update, a disk or distributed load, all of which can make
SGLang re-derive a model's caches, e.g. fp8's ``_derived_weight_cache_error``) runs SGLang's own check and drops
what was kept. SGLang's ``model=None`` part (its process-wide flags) is asked on every call; SGLang's own check is
re-run in full every ``REVALIDATE_EVERY``-th call per model, and a different answer puts SGLang's function back,
logs an error with both answers and returns SGLang's. ``VERL_SGLANG_LORA_UPDATE_CHECK_CACHE=0`` leaves the check as
SGLang ships it.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
import weakref
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable, Optional

from . import LOADER_PATH

logger = logging.getLogger(__name__)

TARGET_MODULE = "sglang.srt.model_executor.model_runner_components.weight_updater"
TARGET = "_unsupported_derived_weight_cache_error"
CALLER = "update_weights_from_tensor"  # the only caller whose requests may be answered from the kept answer
REVALIDATE_EVERY = 128  # per model: a write in 128 pays SGLang's walk again (the matrix's 30 writes: at most one)
OPT_OUT_ENV = "VERL_SGLANG_LORA_UPDATE_CHECK_CACHE"
KEPT = f"answered from one walk per model (SGLang's own check re-run every {REVALIDATE_EVERY} calls)"


@dataclass
class _Kept:
    model: weakref.ref
    answer: Optional[str]  # what the module walk alone decided; None: nothing, SGLang's model=None part decides
    calls: int = 0


def _from_loader_write(frame: Optional[FrameType]) -> bool:
    """Whether SGLang's caller is a tensor update for the plugin's loader (read off the caller's frame)."""
    return (frame is not None and frame.f_code.co_name == CALLER
            and frame.f_locals.get("load_format") == LOADER_PATH)


@dataclass
class CachedCheck:
    """The stand-in for SGLang's check; callable with SGLang's signature (``model=None``)."""

    original: Callable[..., Optional[str]]
    module: Any
    revalidate_every: int = REVALIDATE_EVERY
    stale: Optional[str] = None  # set once a revalidation disagreed (SGLang's function is back in place)
    _kept: dict[int, _Kept] = field(default_factory=dict, repr=False)

    def __call__(self, model: Any = None) -> Optional[str]:
        if model is None or self.stale is not None or not _from_loader_write(sys._getframe(1)):
            self._kept.clear()  # this update may make SGLang re-derive the model's caches: walk again next time
            return self.original(model)
        kept = self._kept.get(id(model))
        if kept is None or kept.model() is not model:
            return self._walk(model)
        kept.calls += 1
        if kept.calls % self.revalidate_every:
            return self._answer(kept)
        before = self._answer(kept)
        answer = self._walk(model)
        if answer != before:
            self._give_back(f"the kept answer {before!r} differs from SGLang's {answer!r}")
        return answer

    def _answer(self, kept: _Kept) -> Optional[str]:
        return kept.answer if kept.answer is not None else self.original(None)

    def _walk(self, model: Any) -> Optional[str]:
        """SGLang's own check; keeps what the module walk alone decided (the answer unless it is the model=None one)."""
        answer = self.original(model)
        try:
            ref = weakref.ref(model)
        except TypeError:  # nothing to key a kept answer on safely: SGLang's check every time
            return answer
        self._kept[id(model)] = _Kept(ref, answer if answer != self.original(None) else None)
        return answer

    def _give_back(self, why: str) -> None:
        self.stale = why
        if getattr(self.module, TARGET, None) is self:
            setattr(self.module, TARGET, self.original)
        logger.error("sglang_lora: SGLang's per-request weight-update check changed its answer (%s); its own check "
                     "runs on every request again", why)


_INSTALLED: Optional[CachedCheck] = None  # the one made in this process, also while SGLang's own is selected


def _parameters(fn: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def _takes_model_only(fn: Callable[..., Any]) -> bool:
    params = list(_parameters(fn).values())
    return (len(params) == 1 and params[0].name == "model" and params[0].default is None
            and params[0].kind in (params[0].POSITIONAL_OR_KEYWORD, params[0].KEYWORD_ONLY))


def _target_module() -> Any:
    try:
        return importlib.import_module(TARGET_MODULE)
    except ImportError:
        return None  # releases before 0.5.23 have no such per-request walk


def install() -> str:
    """Put the cached check in place of SGLang's (once per process); returns what was done, for the attach reply."""
    global _INSTALLED
    if os.environ.get(OPT_OUT_ENV, "1") == "0":
        return f"left as is ({OPT_OUT_ENV}=0)"
    module = _target_module()
    current = getattr(module, TARGET, None) if module is not None else None
    if _INSTALLED is not None and current in (_INSTALLED, _INSTALLED.original):
        if _INSTALLED.stale is not None:
            return f"given back: {_INSTALLED.stale}"
        setattr(module, TARGET, _INSTALLED)
        return KEPT
    if current is None or "model" not in _parameters(current):
        return "absent"  # 0.5.18 has a check of that name that reads a flag, no model walk
    if not _takes_model_only(current):
        logger.warning("sglang_lora: %s.%s has the signature %s, not (model=None): left as is, every in-place write "
                       "pays its module walk", TARGET_MODULE, TARGET, inspect.signature(current))
        return f"left as is: unexpected signature {inspect.signature(current)}"
    _INSTALLED = CachedCheck(current, module)
    setattr(module, TARGET, _INSTALLED)
    logger.info("sglang_lora: %s.%s answers the loader's writes from one walk per model (re-checked every %d calls)",
                TARGET_MODULE, TARGET, REVALIDATE_EVERY)
    return KEPT


def select(keep: bool) -> str:
    """Put the cached check (``keep``) or SGLang's own in place for the requests after this one (the benchmark's
    side-by-side rows); returns which is in place: "cached", "SGLang's own", or why neither was touched."""
    cached = _INSTALLED
    if cached is None:
        return "absent"
    current = getattr(cached.module, TARGET, None)
    if current not in (cached, cached.original):
        return f"left as is: replaced by {current!r}"
    if keep and cached.stale is not None:
        return f"given back: {cached.stale}"
    setattr(cached.module, TARGET, cached if keep else cached.original)
    return "cached" if keep else "SGLang's own"


def installed() -> Optional[CachedCheck]:
    """The cached check in place in this process (None where SGLang's own runs)."""
    module = _target_module()
    current = getattr(module, TARGET, None) if module is not None else None
    return current if isinstance(current, CachedCheck) else None
