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
