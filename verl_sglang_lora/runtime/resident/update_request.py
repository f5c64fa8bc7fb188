"""One request to the plugin's custom weight loader, as the installed SGLang takes it.

Built from the release's declared fields (``flush_cache`` off: prefixes are keyed by version, ``prefix_tags``; a
speculative draft model has no LoRA slots, so ``disable_draft_model`` or ``selector=target``). SGLang >= 0.5.23 takes
a tensor update only inside ``begin_weight_update`` ... ``end_weight_update``: the writes share one held session
(``update_session.HeldSession``); ``support.session_unsafe_base`` keeps the path off where begin/end would touch the
served base weights. The server actor, the sync matrix and the
resident check send it through the same function, each with its own ``call``.
"""

from __future__ import annotations

from typing import Any

from verl_sglang_lora.sglang_contract.installed import io_struct, struct_fields
from verl_sglang_lora.sglang_contract.update_session import Call, HeldSession


def update_request(blobs: list[Any], load_format: str) -> Any:
    cls = io_struct("UpdateWeightsFromTensorReqInput")
    declared = struct_fields(cls)
    kwargs: dict[str, Any] = {"serialized_named_tensors": blobs, "load_format": load_format, "flush_cache": False}
    if "disable_draft_model" in declared:
        kwargs["disable_draft_model"] = True
    if "selector" in declared:
        kwargs["selector"] = "target"
    return cls(**kwargs)


async def send_loader_request(call: Call, blobs: list[Any], load_format: str, session: HeldSession) -> None:
    """The update, inside ``session`` where the release has them (held open for the next write)."""
    await session.run(call, "update_weights_from_tensor", update_request(blobs, load_format))
