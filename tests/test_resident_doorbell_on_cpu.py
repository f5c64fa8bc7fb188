"""The doorbell's transport (``runtime/resident/doorbell.py``): what the server actor sees when the loader answers,
stalls, raises, or is not there. The loader's side of it -- real slots in SGLang's real pool, written over the
doorbell, answered on the reply channel -- is ``selfcheck._doorbell_cases`` (tests/test_resident_slot_on_cpu.py, on
every release the suite carries); here the line handler is a stand-in, as the issue allows for timeout logic."""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import pytest

from verl_sglang_lora.runtime.resident import doorbell

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract Unix sockets are Linux-only")


def _ring(address: str, *lines: str, timeout_s: float = 5.0) -> list:
    async def go() -> list:
        client = doorbell.DoorbellClient(address, timeout_s)
        out = []
        try:
            for line in lines:
                try:
                    out.append(await client.ring(line))
                except (OSError, doorbell.DoorbellError) as exc:
                    out.append(exc)
        finally:
            client.close()
        return out

    return asyncio.run(go())


def test_lines_are_answered_in_order_on_one_connection_and_a_raising_handler_is_refused() -> None:
    address, seen = doorbell.new_address(), []

    def serve(line: str) -> str:
        seen.append((line, threading.current_thread().name))
        if line == "boom":
            raise ValueError("bad line")
        return f"ok {line}"

    assert doorbell.ensure_listener(address, serve) is None
    try:
        assert _ring(address, "a", "boom", "b") == ["ok a", "refused ValueError: bad line", "ok b"]
        assert [line for line, _ in seen] == ["a", "boom", "b"]
        assert {thread for _, thread in seen} == {"verl-resident-doorbell"}  # not the caller's thread
        assert sys.getswitchinterval() <= doorbell.SWITCH_INTERVAL_S  # the thread gets the GIL within that
        # a second attach naming the same doorbell rebinds it (newest binding answers), no second listener
        assert doorbell.ensure_listener(address, lambda line: f"new {line}") is None
        assert _ring(address, "c") == ["new c"]
    finally:
        doorbell.stop_listener(address)
    refused = _ring(address, "d")  # stopped: the server actor takes SGLang's request path
    assert isinstance(refused[0], ConnectionRefusedError)


def test_a_stalled_loader_is_an_error_after_the_timeout_not_a_hang() -> None:
    address, release = doorbell.new_address(), threading.Event()
    doorbell.ensure_listener(address, lambda line: "ok" if release.wait(30) else "late")
    try:
        t0 = time.perf_counter()
        (stalled,) = _ring(address, "write", timeout_s=0.5)
        elapsed = time.perf_counter() - t0
        assert isinstance(stalled, doorbell.DoorbellError) and "within 0.5 s" in str(stalled)
        assert 0.5 <= elapsed < 5.0
    finally:
        release.set()
        doorbell.stop_listener(address)


def test_a_loader_that_dies_mid_answer_is_an_error() -> None:
    address = doorbell.new_address()

    def die(line: str) -> str:
        raise SystemExit  # the thread ends with the connection open: the client reads end of stream

    doorbell.ensure_listener(address, die)
    try:
        (dead,) = _ring(address, "write")
        assert isinstance(dead, doorbell.DoorbellError) and "closed mid-answer" in str(dead)
    finally:
        doorbell.stop_listener(address)


def test_a_name_no_socket_can_take_is_refused_with_the_reason() -> None:
    why = doorbell.ensure_listener("x" * 200, lambda line: "ok")  # longer than a socket name may be
    assert why is not None and why.startswith("cannot listen on") and "x" * 200 not in doorbell._LISTENERS
