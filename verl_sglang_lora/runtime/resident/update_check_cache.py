"""Keep the answer of SGLang's per-request derived-weight-cache check for the life of the scheduler process.

SGLang 0.5.23's ``update_weights_from_tensor`` calls ``_unsupported_derived_weight_cache_error(model)`` on every
request, before any loader runs: two walks of ``model.modules()`` with five missing-attribute lookups per module
(~4 ms for a 589-module tree on a CPU core; on the H200's host the 0.5.23 header-only request costs 2.3-3 ms more
than on 0.5.12, scaling with the layer count). SGLang documents the answer as fixed at start-up and the same on
every rank. The in-place path sends one request per sync, so the walk is most of SGLang's share of a sync.

Installed by the loader's attach, inside the scheduler process. The module walk's answer is kept per model object;
SGLang's check with ``model=None`` (its part that is not about the model) still runs on every call; every
``REVALIDATE_EVERY``-th call runs SGLang's own check in full and compares. A difference puts SGLang's function back,
logs an error with both answers and returns SGLang's. ``VERL_SGLANG_LORA_UPDATE_CHECK_CACHE=0`` leaves the check
as SGLang ships it.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

logger = logging.getLogger(__name__)

TARGET_MODULE = "sglang.srt.model_executor.model_runner_components.weight_updater"
TARGET = "_unsupported_derived_weight_cache_error"
REVALIDATE_EVERY = 128
OPT_OUT_ENV = "VERL_SGLANG_LORA_UPDATE_CHECK_CACHE"
_LAST: dict[str, CachedCheck] = {}  # the one installed in this process, also while SGLang's own is selected
KEPT = f"answered from one walk per model (SGLang's own check re-run every {REVALIDATE_EVERY} calls)"


@dataclass
class CachedCheck:
    """The stand-in for SGLang's check; callable with SGLang's signature (``model=None``)."""

    original: Callable[..., Optional[str]]
    module: Any
    revalidate_every: int = REVALIDATE_EVERY
    calls: int = 0
    full_runs: int = 0
    stale: Optional[str] = None  # set once a revalidation disagreed (SGLang's function is back in place)
    _by_model: dict[int, tuple[Any, Optional[str]]] = field(default_factory=dict)

    def __call__(self, model: Any = None) -> Optional[str]:
        self.calls += 1
        if model is None or self.stale is not None:
            return self.original(model)
        entry = self._by_model.get(id(model))
        if entry is None or entry[0]() is not model:
            return self._full(model)
        cached = entry[1] or self.original(None)
        if self.calls % self.revalidate_every:
            return cached
        answer = self._full(model)
        if answer != cached:
            self._give_back(f"the kept answer {cached!r} differs from SGLang's {answer!r}")
        return answer

    def _full(self, model: Any) -> Optional[str]:
        """SGLang's own check; keeps what the module walk alone decided (the answer unless it is the model=None one)."""
        self.full_runs += 1
        answer = self.original(model)
        self._by_model[id(model)] = (weakref.ref(model), answer if answer != self.original(None) else None)
        return answer

    def _give_back(self, why: str) -> None:
        self.stale = why
        if getattr(self.module, TARGET, None) is self:
            setattr(self.module, TARGET, self.original)
        logger.error("sglang_lora: SGLang's per-request weight-update check changed its answer after start-up (%s); "
                     "its own check runs on every request again", why)


def _parameters(fn: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def _takes_model_only(fn: Callable[..., Any]) -> bool:
    params = list(_parameters(fn).values())
    return (len(params) == 1 and params[0].name == "model" and params[0].default is None
            and params[0].kind in (params[0].POSITIONAL_OR_KEYWORD, params[0].KEYWORD_ONLY))


def install() -> str:
    """Put the cached check in place of SGLang's (once per process); returns what was done, for the attach reply."""
    if os.environ.get(OPT_OUT_ENV, "1") == "0":
        return f"SGLang's per-request update check left as is ({OPT_OUT_ENV}=0)"
    try:
        module = importlib.import_module(TARGET_MODULE)
    except ImportError:
        return "absent"  # releases before 0.5.23 have no such per-request walk
    current = getattr(module, TARGET, None)
    if isinstance(current, CachedCheck):
        return KEPT if current.stale is None else f"given back: {current.stale}"
    if current is None or "model" not in _parameters(current):
        return "absent"  # 0.5.18 has a check of that name that reads a flag, no model walk
    if not _takes_model_only(current):
        logger.warning("sglang_lora: %s.%s has the signature %s, not (model=None): left as is, every in-place write "
                       "pays its module walk", TARGET_MODULE, TARGET, inspect.signature(current))
        return f"left as is: unexpected signature {inspect.signature(current)}"
    if _LAST.get("check") is None or _LAST["check"].original is not current:
        _LAST["check"] = CachedCheck(current, module)
    setattr(module, TARGET, _LAST["check"])
    logger.info("sglang_lora: %s.%s answers from its first walk per model (re-checked every %d calls)",
                TARGET_MODULE, TARGET, REVALIDATE_EVERY)
    return KEPT


def select(keep: bool) -> str:
    """Put the cached check (``keep``) or SGLang's own in place for the requests after this one (the benchmark's
    side-by-side rows); returns which is in place."""
    cached = installed() or _LAST.get("check")
    if cached is None:
        return "absent"
    setattr(cached.module, TARGET, cached if keep and cached.stale is None else cached.original)
    return "cached" if installed() is not None else "SGLang's own"


def installed() -> Optional[CachedCheck]:
    """The cached check in place in this process (None where SGLang's own runs)."""
    try:
        current = getattr(importlib.import_module(TARGET_MODULE), TARGET, None)
    except ImportError:
        return None
    return current if isinstance(current, CachedCheck) else None
