"""SGLang's weight-update session: from 0.5.23 on, ``update_weights_from_tensor`` is refused unless it runs between
``begin_weight_update`` and ``end_weight_update`` ("update_weights_from_tensor must run between ...", HTTP 400).

One context manager opens and closes it for any transport (the server actor's tokenizer manager, verl's HTTP
client, a test's client); where the installed release has no session it does nothing.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

from verl_sglang_lora.sglang_contract.installed import io_struct, struct_fields, weight_update_session

logger = logging.getLogger(__name__)

# (tokenizer-manager method / HTTP endpoint, request struct) -> SGLang's answer; raises when SGLang refuses
Call = Callable[[str, Any], Awaitable[Any]]


def begin_request(selector: str = "target") -> Any:
    """``target`` for the resident writes (a speculative draft has no LoRA slots); ``all`` for a base-weight sync,
    whose update names no selector and so reaches every runner."""
    cls = io_struct("BeginWeightUpdateReqInput")
    return cls(selector=selector) if "selector" in struct_fields(cls) else cls()


def end_request() -> Any:
    return io_struct("EndWeightUpdateReqInput")()


async def _begin(call: Call, selector: str) -> None:
    """Open a session. A refused begin may mean one was left open (an end that was lost, a begin that landed after its
    timeout): that one is closed and the begin tried once more; a second refusal raises."""
    try:
        await call("begin_weight_update", begin_request(selector))
        return
    except asyncio.CancelledError:
        await _end_quietly(call)
        raise
    except Exception as exc:  # noqa: BLE001 - retried once below, raised if it fails again
        logger.warning("sglang_lora: begin_weight_update refused (%s); closing any open session and trying again", exc)
        await _end_quietly(call)
    try:
        await call("begin_weight_update", begin_request(selector))
    except BaseException:
        await _end_quietly(call)  # a timed-out begin may have opened one
        raise


@asynccontextmanager
async def update_session(call: Call, required: bool | None = None, selector: str = "target") -> AsyncIterator[bool]:
    """Hold a session around the body where ``required`` (default: the installed release has sessions); yields
    whether one is open. A session this opened is always closed (SGLang refuses a second begin until it is)."""
    if required is None:
        required = weight_update_session()
    if not required:
        yield False
        return
    await _begin(call, selector)
    try:
        yield True
    except BaseException:
        await _end_quietly(call)
        raise
    await call("end_weight_update", end_request())


async def _end_quietly(call: Call) -> None:
    try:
        await call("end_weight_update", end_request())
    except Exception as exc:  # noqa: BLE001 - the caller's error is the one raised; this one is said
        logger.warning("sglang_lora: closing the weight-update session after a failed request: %s", exc)


class HeldSession:
    """One weight-update session opened at the first update and held across the later ones, closed on demand.

    For the resident path's in-place writes: SGLang 0.5.23 checks the session only in tensor / distributed updates
    and begin/end themselves (not in generation, LoRA loads or memory release), and on the bases the resident path
    accepts on such a release (unquantized, dense: ``runtime/resident/support.session_unsafe_base``) begin and end
    change no served weight. Holding it saves two scheduler round trips per write (on an H200 the
    in-place write took 21-23 ms with a session per write, of it 1.9 ms the loader's own work). Anything else that
    updates weights (verl's base sync) must ``close`` it first: SGLang refuses a second begin.
    """

    def __init__(self, required: bool | None = None) -> None:
        self.required = weight_update_session() if required is None else required
        self.is_open = False

    async def run(self, call: Call, method: str, request: Any) -> Any:
        """``method`` inside the held session (opened first if need be); a failure closes it."""
        if not self.required:
            return await call(method, request)
        if not self.is_open:
            await _begin(call, "target")
            self.is_open = True
        try:
            return await call(method, request)
        except BaseException:
            await self.close(call, quietly=True)
            raise

    async def close(self, call: Call, quietly: bool = False) -> None:
        if not self.is_open:
            return
        self.is_open = False
        if quietly:
            await _end_quietly(call)
        else:
            await call("end_weight_update", end_request())

    def forget(self) -> None:
        """The server process it was open in is gone (a relaunch starts without a session)."""
        self.is_open = False
