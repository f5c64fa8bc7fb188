"""The weight-update session helpers (``sglang_contract/update_session.py``) with a recorder for SGLang's answers;
the per-release request structs and order are checked against each release's own classes in
tests/test_compat_matrix_on_cpu.py (``loader_request_flow``, ``http_client``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from verl_sglang_lora.sglang_contract import update_session as session_module
from verl_sglang_lora.sglang_contract.update_session import HeldSession, update_session

BEGIN, UPDATE, END = "begin_weight_update", "update_weights_from_tensor", "end_weight_update"


@pytest.fixture(autouse=True)
def _any_release(monkeypatch):
    """The order logic on any installed release: the session's request structs (0.5.23's own, checked per release
    in the compat matrix) replaced by markers where the venv's SGLang has none."""
    monkeypatch.setattr(session_module, "begin_request", lambda selector="target": f"begin:{selector}")
    monkeypatch.setattr(session_module, "end_request", lambda: "end")


class Recorder:
    def __init__(self, refuse: set[str] | None = None) -> None:
        self.sent: list[str] = []
        self.refuse = refuse or set()

    async def __call__(self, method: str, request: Any) -> Any:
        self.sent.append(method)
        if method in self.refuse:
            raise RuntimeError(f"{method} refused")
        return True, "Success"


class OnceRefused(Recorder):
    def __init__(self, method: str) -> None:
        super().__init__({method})

    async def __call__(self, method: str, request: Any) -> Any:
        try:
            return await super().__call__(method, request)
        finally:
            self.refuse.discard(method)


def test_update_session_closes_what_it_opened_whatever_happens():
    async def body(call: Recorder, fail: bool) -> None:
        async with update_session(call, required=True) as opened:
            assert opened is True
            await call(UPDATE, None)
            if fail:
                raise ValueError("the body failed")

    ok = Recorder()
    asyncio.run(body(ok, fail=False))
    assert ok.sent == [BEGIN, UPDATE, END]
    failed = Recorder()
    with pytest.raises(ValueError):
        asyncio.run(body(failed, fail=True))
    assert failed.sent == [BEGIN, UPDATE, END]
    refused_begin = Recorder({BEGIN})
    with pytest.raises(RuntimeError, match="begin_weight_update refused"):
        asyncio.run(body(refused_begin, fail=False))
    # a session left open (a lost end) is closed and the begin tried once more; a timed-out begin may have opened one
    assert refused_begin.sent == [BEGIN, END, BEGIN, END]
    off = Recorder()

    async def without() -> None:
        async with update_session(off, required=False) as opened:
            assert opened is False
            await off(UPDATE, None)

    asyncio.run(without())
    assert off.sent == [UPDATE]


def test_held_session_opens_once_and_closes_on_demand_or_failure():
    call, session = Recorder(), HeldSession(required=True)

    async def writes(n: int) -> None:
        for _ in range(n):
            await session.run(call, UPDATE, None)

    asyncio.run(writes(3))
    assert call.sent == [BEGIN, UPDATE, UPDATE, UPDATE] and session.is_open
    asyncio.run(session.close(call))
    asyncio.run(session.close(call))  # closing a closed session sends nothing
    assert call.sent[-1] == END and call.sent.count(END) == 1 and not session.is_open
    asyncio.run(writes(1))  # the next write opens a new one
    assert call.sent[-2:] == [BEGIN, UPDATE]
    session.forget()  # a relaunched server holds no session: the next write begins again, nothing is closed
    asyncio.run(writes(1))
    assert call.sent[-2:] == [BEGIN, UPDATE] and call.sent.count(END) == 1

    failing, held = Recorder({UPDATE}), HeldSession(required=True)
    with pytest.raises(RuntimeError, match="update_weights_from_tensor refused"):
        asyncio.run(held.run(failing, UPDATE, None))
    assert failing.sent == [BEGIN, UPDATE, END] and not held.is_open

    stale = OnceRefused(BEGIN)  # SGLang still holds a session whose end was lost: closed, then begun again
    held = HeldSession(required=True)
    asyncio.run(held.run(stale, UPDATE, None))
    assert stale.sent == [BEGIN, END, BEGIN, UPDATE] and held.is_open

    no_end, held = Recorder({END}), HeldSession(required=True)
    asyncio.run(held.run(no_end, UPDATE, None))
    with pytest.raises(RuntimeError, match="end_weight_update refused"):  # a refused close is loud
        asyncio.run(held.close(no_end))


def test_held_session_sends_only_the_update_where_the_release_has_no_session():
    call, session = Recorder(), HeldSession(required=False)
    asyncio.run(session.run(call, UPDATE, None))
    asyncio.run(session.close(call))
    assert call.sent == [UPDATE] and not session.is_open
