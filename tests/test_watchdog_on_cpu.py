"""A pending SGLang call fails within the health bound when the scheduler stops answering, and waits its full time
when the scheduler answers (e.g. a write waiting for running requests on SGLang's weight-update lock). Nothing sent
is cancelled (SGLang's communicators keep state across an awaited call). Timeout logic only: the scheduler here is
an asyncio stand-in."""

from __future__ import annotations

import asyncio
import time

import pytest

from verl_sglang_lora.runtime.watchdog import SchedulerHung, Watchdog


def test_a_hung_scheduler_fails_the_call_within_the_bound_and_nothing_is_cancelled() -> None:
    cancelled = []

    async def never() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> float:
        t0 = time.monotonic()
        with pytest.raises(SchedulerHung, match="no health probe"):
            await Watchdog(never, health_s=0.3).call(never(), timeout_s=60)
        elapsed = time.monotonic() - t0
        await asyncio.sleep(0.05)
        assert cancelled == []  # left to finish: a cancel would jam SGLang's communicator for that request kind
        return elapsed

    assert asyncio.run(main()) < 1.0  # about health_s, not the 60 s timeout


def test_a_live_scheduler_lets_a_slow_call_finish_and_probes_one_at_a_time() -> None:
    probes, in_flight = [], []

    async def alive() -> list:
        in_flight.append(1)
        probes.append(len(in_flight))
        await asyncio.sleep(0.05)
        in_flight.pop()
        return [{}]

    async def slow() -> str:
        await asyncio.sleep(0.5)
        return "done"

    assert asyncio.run(Watchdog(alive, health_s=0.3).call(slow(), timeout_s=5)) == "done"
    assert len(probes) >= 2 and max(probes) == 1


def test_the_call_timeout_still_holds() -> None:
    async def alive() -> None:
        return None

    async def slow() -> None:
        await asyncio.sleep(10)

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(Watchdog(alive, health_s=0.3).call(slow(), timeout_s=0.3))


def test_without_a_probe_only_the_timeout_applies() -> None:
    async def quick() -> str:
        await asyncio.sleep(0.05)
        return "done"

    assert asyncio.run(Watchdog(None, health_s=0.01).call(quick(), timeout_s=1)) == "done"
