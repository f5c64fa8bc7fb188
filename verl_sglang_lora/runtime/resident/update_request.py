"""One request to the plugin's custom weight loader, as the installed SGLang takes it.

Built from the release's declared fields (``flush_cache`` off: prefixes are keyed by version, ``prefix_tags``; a
speculative draft model has no LoRA slots, so ``disable_draft_model`` or ``selector=target``). SGLang >= 0.5.23 takes
a tensor update only inside ``begin_weight_update`` ... ``end_weight_update``; ``support.session_unsafe_base`` keeps
the path off where the session's end would re-process base weights. The server actor, the sync matrix and the
resident check send it through the same function, each with its own ``call``.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from verl_sglang_lora.sglang_contract.installed import io_struct, struct_fields

logger = logging.getLogger(__name__)

# (tokenizer-manager method, request) -> SGLang's answer; raises when SGLang refuses or does not answer
Call = Callable[[str, Any], Awaitable[Any]]


def update_request(blobs: list[Any], load_format: str) -> Any:
    cls = io_struct("UpdateWeightsFromTensorReqInput")
    declared = struct_fields(cls)
    kwargs: dict[str, Any] = {"serialized_named_tensors": blobs, "load_format": load_format, "flush_cache": False}
    if "disable_draft_model" in declared:
        kwargs["disable_draft_model"] = True
    if "selector" in declared:
        kwargs["selector"] = "target"
    return cls(**kwargs)


def begin_request() -> Any:
    cls = io_struct("BeginWeightUpdateReqInput")
    return cls(selector="target") if "selector" in struct_fields(cls) else cls()


async def send_loader_request(call: Call, blobs: list[Any], load_format: str, session: bool) -> None:
    """The update, inside a weight-update session when ``session``; a session this opened is always closed (a
    timed-out begin may have opened one, and SGLang refuses a second)."""
    if not session:
        await call("update_weights_from_tensor", update_request(blobs, load_format))
        return
    try:
        await call("begin_weight_update", begin_request())
        await call("update_weights_from_tensor", update_request(blobs, load_format))
    except BaseException:
        await _end_quietly(call)
        raise
    await call("end_weight_update", io_struct("EndWeightUpdateReqInput")())


async def _end_quietly(call: Call) -> None:
    try:
        await call("end_weight_update", io_struct("EndWeightUpdateReqInput")())
    except Exception as exc:  # noqa: BLE001 - the caller's error is the one raised; this one is said
        logger.warning("sglang_lora: closing the weight-update session after a failed loader request: %s", exc)
