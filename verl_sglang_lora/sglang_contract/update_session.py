"""SGLang's weight-update session: from 0.5.23 on, ``update_weights_from_tensor`` is refused unless it runs between
``begin_weight_update`` and ``end_weight_update`` ("update_weights_from_tensor must run between ...", HTTP 400).

One context manager opens and closes it for any transport (the server actor's tokenizer manager, verl's HTTP
client, a test's client); where the installed release has no session it does nothing.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

from verl_sglang_lora.sglang_contract.installed import io_struct, struct_fields, weight_update_session

logger = logging.getLogger(__name__)

# (tokenizer-manager method / HTTP endpoint, request struct) -> SGLang's answer; raises when SGLang refuses
Call = Callable[[str, Any], Awaitable[Any]]


def begin_request() -> Any:
    """Only the target model: a speculative draft has no LoRA slots and its base weights are not synced here."""
    cls = io_struct("BeginWeightUpdateReqInput")
    return cls(selector="target") if "selector" in struct_fields(cls) else cls()


def end_request() -> Any:
    return io_struct("EndWeightUpdateReqInput")()


@asynccontextmanager
async def update_session(call: Call, required: bool | None = None) -> AsyncIterator[bool]:
    """Hold a session around the body where ``required`` (default: the installed release has sessions); yields
    whether one is open. A session this opened is always closed: a failed or timed-out begin may have opened one,
    and SGLang refuses a second begin until it is closed."""
    if required is None:
        required = weight_update_session()
    if not required:
        yield False
        return
    try:
        await call("begin_weight_update", begin_request())
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
    change no served weight. Holding it saves two scheduler round trips per write (session 15 on the H200: the
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
            try:
                await call("begin_weight_update", begin_request())
            except BaseException:
                await _end_quietly(call)  # a timed-out begin may have opened one
                raise
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
