"""A call into SGLang's scheduler that surfaces a hung scheduler in seconds, not at the call's own timeout.

An adapter load or a loader write may legitimately wait (SGLang's weight-update lock waits for running requests),
so its own timeout (``http_timeout_s``) is long. While it waits, a cheap request that round-trips through the
scheduler (``get_internal_state``: the scheduler answers it between batches) is sent every ``probe_every_s``; one
that does not answer within ``probe_timeout_s`` means the scheduler is hung or dead, and the call fails then.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable


class SchedulerHung(RuntimeError):
    """SGLang's scheduler answered no health probe while a call was pending."""


async def call_watched(call: Awaitable[Any], probe: Callable[[], Awaitable[Any]] | None, timeout_s: float,
                       probe_every_s: float, probe_timeout_s: float) -> Any:
    """``call``'s result; ``asyncio.TimeoutError`` past ``timeout_s``; ``SchedulerHung`` when a probe sent while the
    call is pending gets no answer within ``probe_timeout_s``. The pending call is cancelled either way."""
    task = asyncio.ensure_future(call)
    start = time.monotonic()
    try:
        while True:
            left = timeout_s - (time.monotonic() - start)
            if left <= 0:
                raise asyncio.TimeoutError
            done, _ = await asyncio.wait({task}, timeout=min(probe_every_s, left) if probe else left)
            if done:
                return task.result()
            if probe is None:
                continue
            try:
                await asyncio.wait_for(probe(), probe_timeout_s)
            except asyncio.TimeoutError:
                raise SchedulerHung(f"SGLang's scheduler answered no health probe (get_internal_state) within "
                                    f"{probe_timeout_s:g} s, after the call had waited "
                                    f"{time.monotonic() - start:.0f} s") from None
    finally:
        if not task.done():
            task.cancel()
