"""A call into SGLang's scheduler that surfaces a hung scheduler in seconds, not at the call's own timeout.

An adapter load or a loader write may legitimately wait (SGLang's weight-update lock waits for running requests),
so its own timeout (``http_timeout_s``) is long. While it waits, a cheap request that round-trips through the
scheduler (``get_internal_state``: answered between batches) is sent; one that stays unanswered past the health bound
means the scheduler is hung or dead, and the call fails then.

Nothing sent to SGLang is ever cancelled here: SGLang's tokenizer-side communicators keep per-kind state across an
awaited call (0.5.8/0.5.12 would stay blocked for that kind; later releases would hand a late answer to the next
caller), so the call and the probe are shielded and left to finish in the background; at most one probe is in
flight per watcher.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable


class SchedulerHung(RuntimeError):
    """SGLang's scheduler answered no health probe while a call was pending."""


class Watchdog:
    """Watches calls to one SGLang engine; ``probe`` is its ``get_internal_state`` (None: no probe)."""

    def __init__(self, probe: Callable[[], Awaitable[Any]] | None, health_s: float) -> None:
        self.probe, self.health_s = probe, health_s
        self._probe_task: asyncio.Future | None = None
        self._probe_sent = 0.0

    def _probe_overdue(self) -> bool:
        """Send a probe if none is in flight; True when the one in flight has gone unanswered past the bound."""
        if self._probe_task is None or self._probe_task.done():
            self._probe_task = asyncio.ensure_future(self.probe())
            self._probe_sent = time.monotonic()
            return False
        return time.monotonic() - self._probe_sent > self.health_s * 2 / 3

    async def call(self, call: Awaitable[Any], timeout_s: float) -> Any:
        """``call``'s result; ``asyncio.TimeoutError`` past ``timeout_s``; ``SchedulerHung`` when the scheduler
        answers no probe within the health bound (about ``health_s`` after the call started waiting)."""
        task = asyncio.ensure_future(call)
        start = time.monotonic()
        step = self.health_s / 3
        while True:
            left = timeout_s - (time.monotonic() - start)
            if left <= 0:
                raise asyncio.TimeoutError
            done, _ = await asyncio.wait({task}, timeout=min(step, left) if self.probe else left)
            if done:
                return task.result()
            if self.probe is not None and self._probe_overdue():
                raise SchedulerHung(f"SGLang's scheduler answered no health probe (get_internal_state) for "
                                    f"{time.monotonic() - self._probe_sent:.0f} s, after the call had waited "
                                    f"{time.monotonic() - start:.0f} s")
