"""A pending SGLang call fails within the health probe's bound when the scheduler stops answering, and waits its
full time when the scheduler answers (e.g. a write waiting for running requests on SGLang's weight-update lock).
Timeout logic only: the scheduler here is an asyncio stand-in."""

from __future__ import annotations

import asyncio
import time

import pytest

from verl_sglang_lora.runtime.watchdog import SchedulerHung, call_watched


async def _never() -> None:
    await asyncio.Event().wait()


async def _after(seconds: float, value: str = "done") -> str:
    await asyncio.sleep(seconds)
    return value


def test_a_hung_scheduler_fails_the_call_within_the_probe_bound() -> None:
    t0 = time.monotonic()
    with pytest.raises(SchedulerHung, match="no health probe"):
        asyncio.run(call_watched(_never(), _never, timeout_s=60, probe_every_s=0.1, probe_timeout_s=0.2))
    assert time.monotonic() - t0 < 1.0  # 0.1 s before the probe + 0.2 s probe, not the 60 s timeout


def test_a_live_scheduler_lets_a_slow_call_finish() -> None:
    probes = []

    async def alive() -> list:
        probes.append(1)
        return [{}]

    assert asyncio.run(call_watched(_after(0.35), alive, timeout_s=5, probe_every_s=0.1, probe_timeout_s=0.5)) == "done"
    assert len(probes) >= 2  # asked while the call was pending


def test_the_call_timeout_still_holds_and_the_call_is_cancelled() -> None:
    cancelled = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def alive() -> None:
        return None

    async def main() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await call_watched(slow(), alive, timeout_s=0.3, probe_every_s=0.1, probe_timeout_s=0.5)
        await asyncio.sleep(0)

    asyncio.run(main())
    assert cancelled == [True]


def test_without_a_probe_only_the_timeout_applies() -> None:
    assert asyncio.run(call_watched(_after(0.05), None, timeout_s=1, probe_every_s=0.01, probe_timeout_s=0.01)) == "done"
