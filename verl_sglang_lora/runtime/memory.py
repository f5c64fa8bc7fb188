"""Sleep level and GPU memory tags for sleep and wake-up, decided in one place from the LoRA mode.

SGLang keeps the released tags in a set and ``resume_memory_occupation`` removes each requested tag from it,
so resuming a tag that was never released raises ``KeyError: 'weights'`` (seed layer 4). The ledger below is
the single place that decides what is released and what may be resumed: ``sleep()``, ``wake_up()`` and the
weight-sync client's ``resume(tags=...)`` all go through it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

KV_CACHE = "kv_cache"
WEIGHTS = "weights"
KNOWN_TAGS = (KV_CACHE, WEIGHTS)


def sleep_level(as_adapter: bool) -> int:
    """verl's convention: 1 releases only the KV cache, 2 releases KV cache and weights."""
    return 1 if as_adapter else 2


def release_plan(as_adapter: bool) -> tuple[str, ...]:
    """Adapter mode keeps the base weights resident (only the LoRA delta is pushed); otherwise both go."""
    return (KV_CACHE,) if as_adapter else (KV_CACHE, WEIGHTS)


@dataclass
class MemoryTagLedger:
    """Tracks which tags are released right now, so a resume never names a tag SGLang does not hold."""

    as_adapter: bool
    released: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def sleep_level(self) -> int:
        return sleep_level(self.as_adapter)

    @property
    def plan(self) -> tuple[str, ...]:
        return release_plan(self.as_adapter)

    def to_release(self, requested: tuple[str, ...] | list[str] | None = None) -> list[str]:
        """Tags to send to ``release_memory_occupation`` and mark released (already-released ones are skipped)."""
        wanted = self._check(requested if requested is not None else self.plan)
        with self._lock:
            out = [t for t in wanted if t not in self.released]
            self.released.update(out)
        return out

    def to_resume(self, requested: tuple[str, ...] | list[str] | None = None) -> list[str]:
        """Tags to send to ``resume_memory_occupation``: the requested ones that are actually released.

        A request for a tag that is not released (verl 0.9.1 asks for ``weights`` for any rollout name but
        "sglang") is dropped with a log line instead of being forwarded into SGLang's ``KeyError``.
        """
        wanted = self._check(requested if requested is not None else KNOWN_TAGS)
        with self._lock:
            out = [t for t in wanted if t in self.released]
            skipped = [t for t in wanted if t not in self.released]
            self.released.difference_update(out)
        if skipped and requested is not None:
            logger.info("resume(tags=%s): %s not released (adapter mode=%s), not resumed", list(wanted), skipped, self.as_adapter)
        return out

    def undo_release(self, tags: list[str]) -> None:
        """Forget a release that SGLang did not perform (the HTTP/IPC call failed)."""
        with self._lock:
            self.released.difference_update(tags)

    def undo_resume(self, tags: list[str]) -> None:
        """Re-mark tags whose resume failed: they are still released inside SGLang."""
        with self._lock:
            self.released.update(tags)

    @staticmethod
    def _check(tags) -> list[str]:
        tags = [tags] if isinstance(tags, str) else list(tags)
        unknown = [t for t in tags if t not in KNOWN_TAGS]
        if unknown:
            raise ValueError(f"unknown SGLang memory tag(s) {unknown}; known: {list(KNOWN_TAGS)}")
        return tags
