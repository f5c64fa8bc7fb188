"""Loader requests: built and checked by the sync client, sent by the server actor (docs/resident_sync.md, sec. 0)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from verl_sglang_lora.runtime.resident import protocol as P
from verl_sglang_lora.sglang_contract.installed import io_struct, struct_fields
from verl_sglang_lora.sglang_contract.lora_request import serialize_payload
from verl_sglang_lora.sglang_contract.update_session import Call, HeldSession

SLOTS = ("verl_lora_slot0", "verl_lora_slot1")


@dataclass
class ResidentSlots:
    """The server actor's view of the two slots in one SGLang launch (docs/resident_sync.md, section 0)."""

    created: bool = False  # both slots loaded (pinned) in this SGLang launch
    attached: bool = False  # the loader holds the client's flat-buffer views for both slots
    active: str | None = None  # the slot new requests name
    written: str | None = None  # the slot the last write (or the attach) filled: served only once committed
    disabled: str | None = None  # why the in-place path is off for the rest of this launch

    def idle(self, refs: dict[str, int]) -> str | None:
        """The slot a write may touch: not the served one, and no request holds it."""
        for slot in SLOTS:
            if slot != self.active and refs.get(slot, 0) == 0:
                return slot
        return None


def update_request(blobs: list[Any], load_format: str) -> Any:
    """SGLang's ``update_weights_from_tensor`` request for the loader: no cache flush (prefixes are keyed by version,
    ``prefix_tags``); a speculative draft model has no LoRA slots."""
    cls = io_struct("UpdateWeightsFromTensorReqInput")
    declared = struct_fields(cls)
    kwargs: dict[str, Any] = {"serialized_named_tensors": blobs, "load_format": load_format, "flush_cache": False}
    if "disable_draft_model" in declared:
        kwargs["disable_draft_model"] = True
    if "selector" in declared:
        kwargs["selector"] = "target"
    return cls(**kwargs)


async def send_loader_request(call: Call, blobs: list[Any], load_format: str, session: HeldSession) -> None:
    """The update, inside ``session`` where the release has one (0.5.23 takes tensor updates only inside one)."""
    await session.run(call, "update_weights_from_tensor", update_request(blobs, load_format))


class LoadVerifyError(RuntimeError):
    """SGLang's pool holds other bytes for a loaded version than the trainer sent: the run must not go on with it."""


@dataclass
class LoaderCall:
    """One loader op for the server actor: the serialized named-tensor list per TP rank, and its status tensor."""

    op: str
    slot: str
    blobs: list[bytes]
    status: torch.Tensor = field(repr=False)
    message: torch.Tensor = field(repr=False)
    seq: int = 0  # the request's number: an answer with another seq is an older one (reply channels are reused)
    build_ms: dict[str, float] = field(default_factory=dict)  # where building it went: stream sync, serialization

    def result(self) -> dict[str, Any]:
        out = P.read_status(self.status)
        out["message"] = P.read_message(self.message)
        return out


class ResidentRequests:
    """Builds the loader calls of one sync client (TP size 1: the sources live on this GPU)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seq = 0
        self._status: dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor]] = {}
        self._empty = torch.empty(0, dtype=torch.int64, device=device)  # a header that moves no memory

    def _pair(self, op: str, slot: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The op's status/message pair, made once and kept alive (the loader may hold it: the slot's reply channel is
        its write pair). Made only when missing: a write that launches no kernel leaves its stream sync no work."""
        pair = self._status.get((op, slot))
        if pair is None:
            pair = self._status[(op, slot)] = (P.new_status(self.device), P.new_message(device=self.device))
        return pair

    def call(self, op: str, slot: str, adapter: dict[str, torch.Tensor] | None = None,
             flat: torch.Tensor | None = None, on_reply_channel: bool = False, pair: str | None = None,
             **fields: Any) -> LoaderCall:
        """One loader op. ``on_reply_channel``: an empty header, answered on the slot's reply channel (nothing is
        zeroed: the seq tells answers apart). ``pair``: the status pair's key for a name that changes every version."""
        self.seq += 1
        if on_reply_channel:
            status, message = self._pair("write", slot)
            named = P.request_tensors(op, self._empty, slot=slot, seq=self.seq, **fields)
        else:
            status, message = self._pair(op, pair or slot)
            status.zero_()
            message.zero_()
            reply = self._pair("write", slot) if op == "attach" else None
            named = P.request_tensors(op, status, adapter, message, flat, reply, slot=slot, seq=self.seq, **fields)
        t0 = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()  # the sources (and a zeroed status) are visible
        t1 = time.perf_counter()
        blobs = [serialize_payload(named)]
        t2 = time.perf_counter()
        return LoaderCall(op, slot, blobs, status, message, self.seq,
                          {"sync": (t1 - t0) * 1e3, "serialize": (t2 - t1) * 1e3})

    def attach(self, adapter: dict[str, torch.Tensor], version: int, flat: torch.Tensor) -> list[LoaderCall]:
        """Both slots bound to ``adapter`` (views of ``flat``); slot1 written, verified, then compared with slot0."""
        return [self.call("attach", SLOTS[0], adapter, flat, version=version, write=0),
                self.call("attach", SLOTS[1], adapter, flat, version=version, write=1),
                self.call("compare", SLOTS[1], ref=SLOTS[0])]

    def writes(self, version: int, slots: tuple[str, ...] = SLOTS) -> dict[str, LoaderCall]:
        """An in-place write for each of ``slots``; the server actor sends the one for its idle slot."""
        return {slot: self.call("write", slot, on_reply_channel=True, version=version) for slot in slots}


def detach_request(slot: str) -> list[bytes]:
    """The loader's ``detach`` of ``slot``, built by the server actor: an empty header, on no CUDA memory."""
    empty = torch.empty(0, dtype=torch.int64)
    return [serialize_payload(P.request_tensors("detach", empty, slot=slot, seq=0))]


def write_targets(served: str | None) -> tuple[str, ...]:
    """The slots a client builds in-place writes for: the one the server does not serve, or both when the client
    does not know which it serves (first write after an attach it did not see, a load in between)."""
    other = tuple(s for s in SLOTS if s != served)
    return other if len(other) == 1 else SLOTS


def attach_summary(calls: list[LoaderCall]) -> str:
    """What the loader said about each attach that ran (its copy count, and how it verifies the slot)."""
    return "; ".join(f"{c.slot}: {c.result().get('message') or '(no message)'}" for c in calls if c.op == "attach")


def scaling_problem(result: dict[str, Any], scaling: float | None) -> str | None:
    """Why the scaling SGLang reported for a slot (a loader answer's fields) is not the trainer's ``scaling``; None
    when it is, or when no trainer scaling is given."""
    if scaling is None:
        return None
    if result["scaling"] is None:
        return "SGLang's scaling for the slot could not be read"
    if not math.isclose(result["scaling"], scaling, rel_tol=1e-9):
        return (f"SGLang serves the slot at scaling {result['scaling']:.6g} (r={result['lora_r']}), the trainer's "
                f"scaling is {scaling:.6g}")
    return None


def check_results(calls: list[LoaderCall], scaling: float | None = None) -> str | None:
    """None when every call the server ran succeeded (docs/resident_sync.md: "What the client accepts"), else why."""
    for call in calls:
        r = call.result()
        if not r["magic_ok"] or r["state"] == P.PENDING:
            return f"{call.op} {call.slot}: the loader never reported (status untouched)"
        if call.seq and r["seq"] != call.seq:
            return (f"{call.op} {call.slot}: the loader never answered request {call.seq} (its status holds request "
                    f"{r['seq']}'s answer); the reason is in SGLang's scheduler log ('verl resident loader')")
        if not r["ok"]:
            return f"{call.op} {call.slot}: {r['error_text'] or r['error']}: {r['message']}"
        wrong_scale = scaling_problem(r, scaling) if call.op in ("attach", "write", "verify") else None
        if wrong_scale:
            return f"{call.op} {call.slot}: {wrong_scale}"
        if r["copies"] and r["verified_by"] == P.NOT_VERIFIED:
            return f"{call.op} {call.slot}: the loader wrote the slot without verifying it"
    return None


def verify_for_push(verifier: ResidentRequests | None, push: Any, adapter: dict[str, torch.Tensor],
                    name: str) -> LoaderCall | None:
    """The loader's ``verify`` of ``push``'s ordinary load under ``name``, set on ``push.verify`` (the server runs it
    only when it loads the version). None where no loader runs (``verifier`` None) or the push carries no load."""
    if verifier is None or not push.request_fields or "attach" in (push.resident or {}):
        push.verify = None  # an attach sync compares the written slot with SGLang's own load instead
        return None
    call = verifier.call("verify", name, adapter, pair="loaded_version", allow_unpinned=1)
    push.verify = {"name": name, "blobs": call.blobs}
    return call


def check_load_verify(result: dict, call: LoaderCall | None, scaling: float | None = None) -> None:
    """Raise ``LoadVerifyError`` unless the loader proved the loaded version's pool bytes equal the trainer's, and,
    given the trainer's ``scaling``, that SGLang applies that scaling to it (a check that did not decide counts as
    failed); nothing to check where no loader runs (``call`` None)."""
    state = result.get("verify")
    if call is None or not state:
        return
    version, name = result.get("version"), result.get("name")
    if not state.get("ran"):
        raise LoadVerifyError(f"sglang_lora: version {version} loaded as {name} could not be verified byte for byte "
                              f"in SGLang's pool ({state.get('reason')}); it is not served")
    failed = check_results([call])  # the bytes first; the scaling only of an answer that proved them
    if failed is None:
        wrong_scale = scaling_problem(call.result(), scaling)
        if wrong_scale:  # equal bytes, served at another lora_alpha / r
            raise LoadVerifyError(f"sglang_lora: version {version} loaded as {name} has the trainer's bytes, but "
                                  f"{wrong_scale}; it is not served")
        return
    if call.result()["error"] == P.ErrorCode.MISMATCH:
        raise LoadVerifyError(f"sglang_lora: SGLang holds version {version} as {name} with other bytes than the "
                              f"trainer sent (loader verify): {failed}")
    raise LoadVerifyError(f"sglang_lora: the loader's verify of version {version} as {name} did not decide: {failed}; "
                          "it is not served")
