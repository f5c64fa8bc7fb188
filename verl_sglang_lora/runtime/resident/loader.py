"""The ``--custom-weight-loader`` entry point (``LOADER_PATH``), run in each TP rank's scheduler process. It never
raises (an exception would escape into SGLang's request loop): every outcome goes to the status tensor and the log.
Ops and their fields: docs/resident_sync.md, section 3."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Iterable, Optional

import torch

from . import protocol as P
from .access import ResidentError, buffer_id, find_lora_manager, resolve_uid
from .execute import compare_slots, differing_pairs, run_copies
from .mirror import Mirror
from .plan import CopyPair, bind
from .protocol import ErrorCode as E
from .trace import trace_layout

logger = logging.getLogger(__name__)


@dataclass
class SlotState:
    """What one attach left behind for one slot on this rank."""

    buffer_id: int
    pairs: list[CopyPair]
    flat: Optional[torch.Tensor]  # the trainer's flat buffer (CUDA-IPC view), kept referenced
    mirror: Optional[Mirror]
    reply: Optional[tuple[torch.Tensor, torch.Tensor]]  # the slot's reply channel (status, message)
    version: int = -1


_SLOTS: dict[tuple[int, str], SlotState] = {}
# The last status/message tensors per (op, slot): holding them keeps torch's CUDA-IPC handle cache warm, so the
# next request's identical handles are not opened again (an IPC open costs more than the whole copy).
_KEEP: dict[tuple[str, str], tuple] = {}


def _bind(manager: Any, uid: str, slot: int, req: P.Request, write: bool) -> list[CopyPair]:
    """The request's adapter tensors bound to ``slot`` by the layout SGLang's own load gives them on this rank."""
    if not req.tensors:
        raise ResidentError(E.BAD_REQUEST, f"op={req.op} carries the adapter tensors")
    layout = trace_layout(manager, uid, req.tensors)
    if layout.unused_sources:
        raise ResidentError(E.UNSUPPORTED_LAYOUT, f"SGLang's load ignores {len(layout.unused_sources)} tensors, "
                                                  f"e.g. {layout.unused_sources[0]}: they would never reach the slot")
    if write and layout.scaled:
        raise ResidentError(E.UNSUPPORTED_LAYOUT, "SGLang stores expert LoRA B multiplied by the scaling: an in-place "
                                                  "write would be arithmetic, not the trainer's bytes (versioned loads "
                                                  "of this adapter are verified instead)")
    return bind(layout, manager.memory_pool, slot, req.tensors, getattr(manager.loras.get(uid), "scaling", None))


def _check_pairs(pairs: list[CopyPair], what: str) -> None:
    bad = differing_pairs(pairs)
    if bad:
        raise ResidentError(E.MISMATCH, f"{what}: {len(bad)} of {len(pairs)} blocks differ from the trainer's bytes "
                                        f"(first: block {bad[0]})")


def _write(manager: Any, state: SlotState) -> dict[int, int]:
    """Copy the attached sources into the slot, then verify it: against the trainer's buffer (mirror), or by block."""
    t0 = time.perf_counter_ns()
    run_copies(state.pairs)
    if state.pairs and state.pairs[0][1].is_cuda:
        torch.cuda.current_stream(state.pairs[0][1].device).synchronize()
    t1 = time.perf_counter_ns()
    if state.mirror is not None:
        if not state.mirror.matches(state.flat):
            raise ResidentError(E.MISMATCH, "the slot read back differs from the trainer's buffer (or a zero block "
                                            "SGLang keeps zero, e.g. a missing k_proj, holds non-zero bits)")
        by = P.BY_MIRROR
    else:
        _check_pairs(state.pairs, "written slot")
        by = P.BY_PAIRS
    # from 0.5.18 on LoRA modules may cache per-slot state and refresh it on this hook; older releases lack it
    hook = getattr(manager, "_notify_lora_slots_updated", None)
    if callable(hook):
        hook({state.buffer_id})
    return {P.N_COPIES: len(state.pairs), P.COPY_NS: t1 - t0, P.VERIFY_NS: time.perf_counter_ns() - t1,
            P.VERIFIED_BY: by}


def _adapter_facts(manager: Any, uid: str) -> dict[int, int]:
    """The scaling and rank SGLang applies for this slot, for the client to compare; absent: 0 (unknown)."""
    adapter = manager.loras.get(uid)
    scaling = getattr(adapter, "scaling", None)
    rank = getattr(getattr(adapter, "config", None), "r", None)
    if scaling is None or not rank:
        return {}
    return {P.SCALING_BITS: P.float_to_bits(scaling), P.LORA_R: int(rank)}


def _slot(manager: Any, req: P.Request) -> tuple[str, int]:
    name = req.get("slot")
    if not name:
        raise ResidentError(E.BAD_REQUEST, f"op={req.op} needs slot=<lora_name>")
    uid = resolve_uid(manager, name)
    pinned = getattr(manager.lora_refs.get(uid), "pinned", False)
    if not pinned and req.get("allow_unpinned") != "1":
        raise ResidentError(E.NOT_PINNED, f"slot {name!r} is not pinned: SGLang may evict it and reload stale weights")
    if uid not in manager.memory_pool.uid_to_buffer_id:
        manager.fetch_new_loras({uid})  # SGLang's own fetch into the pool, as its scheduler does before a batch
    return uid, buffer_id(manager, uid)


def _attach(manager: Any, uid: str, slot: int, req: P.Request, fields: dict[int, int]) -> str:
    pairs = _bind(manager, uid, slot, req, write=True)
    mirror, reason = (None, "the attach carried no flat buffer") if req.flat is None else \
        Mirror.build(req.flat, pairs, sum(t.numel() for t in req.tensors.values()))
    state = SlotState(slot, pairs, req.flat, mirror, req.reply, fields[P.VERSION])
    _SLOTS[(id(manager), uid)] = state
    if req.get("write") == "1":
        fields.update(_write(manager, state))
    extra = f" for {mirror.buf.numel()} bytes" if mirror is not None else f" (verified block by block: {reason})"
    return f"attached {len(pairs)} copies, mirror{extra}"


def handle(model: Any, req: P.Request) -> tuple[dict[int, int], str]:
    """Run one request; returns (status fields, message). Raises ``ResidentError`` on a failed guard."""
    manager = find_lora_manager(model)
    uid, slot = _slot(manager, req)
    key = (id(manager), uid)
    state = _SLOTS.get(key)
    fields: dict[int, int] = {P.BUFFER_ID: slot, P.VERSION: req.int("version", state.version if state else -1),
                              **_adapter_facts(manager, uid)}
    if req.op == "detach":
        _SLOTS.pop(key, None)
        return fields, "detached" if state is not None else "not attached"
    if req.op == "compare":
        mismatches = compare_slots(manager.memory_pool, slot, buffer_id(manager, resolve_uid(manager, req.get("ref") or "")))
        fields[P.MISMATCHES] = len(mismatches)
        text = "\n".join(mismatches) or "slots are byte-identical"
        if mismatches:
            raise ResidentError(E.SLOTS_DIFFER, text)
        return fields, text
    if req.op == "verify":
        pairs = _bind(manager, uid, slot, req, write=False)
        _check_pairs(pairs, f"the pool's bytes for {req.get('slot')!r}")
        fields.update({P.N_COPIES: len(pairs), P.VERIFIED_BY: P.BY_PAIRS})
        return fields, f"verified {len(pairs)} blocks against the tensors sent"
    if state is not None and state.buffer_id != slot:
        raise ResidentError(E.SLOT_MOVED, f"slot {uid} moved from pool index {state.buffer_id} to {slot}")
    if req.op == "attach":
        return fields, _attach(manager, uid, slot, req, fields)
    if state is None:  # write
        raise ResidentError(E.NOT_ATTACHED, "op=write needs an attached slot")
    fields.update(_write(manager, state))
    state.version = fields[P.VERSION]
    return fields, "written"


def apply(model: Any, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
    """SGLang's custom-weight-loader hook. Never raises; reports through the request's status tensor."""
    wall0, t0 = time.time_ns(), time.perf_counter_ns()
    try:
        req = P.parse(named_tensors)
    except Exception as exc:  # noqa: BLE001 - nothing to report into without a header
        logger.error("verl resident loader: unusable request (%s: %s)", type(exc).__name__, exc)
        return
    seq = req.int("seq", 0) if (req.get("seq") or "").lstrip("-").isdigit() else 0
    if req.status is not None:
        _KEEP[(req.op, req.get("slot") or "")] = (req.status, req.message)
        status, out = req.status, req.message
    else:  # the slot's reply channel, found first: a request nobody would hear the answer to is never run
        try:
            status, out = _reply_channel(model, req)
        except Exception as exc:  # noqa: BLE001 - the caller sees no answer under its seq
            logger.error("verl resident loader: op=%s seq=%s not run, no reply channel to answer on: %s", req.op,
                         seq, exc)
            return
    try:
        fields, message = handle(model, req)
        fields.update({P.STATE: P.OK, P.TOTAL_NS: time.perf_counter_ns() - t0})
    except ResidentError as exc:
        fields, message = {P.STATE: P.FAILED, P.ERROR: int(exc.code)}, str(exc)
        logger.error("verl resident loader: op=%s failed (%s): %s", req.op, exc.code.text, exc)
    except Exception as exc:  # noqa: BLE001 - must not escape into SGLang's request loop
        fields, message = {P.STATE: P.FAILED, P.ERROR: int(E.LOADER_EXCEPTION)}, f"{type(exc).__name__}: {exc}"
        logger.exception("verl resident loader: op=%s raised", req.op)
    fields.update({P.SEQ: seq, P.START_WALL_NS: wall0})
    try:  # the message first, unsynced: the status row's copy and sync on the same stream cover both
        P.write_message(out, message)
        P.write_status(status, fields)
    except Exception:  # noqa: BLE001 - the caller sees a stale seq and says the loader never reported
        logger.exception("verl resident loader: op=%s seq=%s: could not report (%s)", req.op, seq, message)


def _reply_channel(model: Any, req: P.Request) -> tuple[torch.Tensor, torch.Tensor]:
    """The reply channel the slot's attach handed over, for a request with an empty header."""
    manager = find_lora_manager(model)
    state = _SLOTS.get((id(manager), resolve_uid(manager, req.get("slot") or "")))
    if state is None or state.reply is None:
        raise ResidentError(E.NOT_ATTACHED,
                            f"slot {req.get('slot')!r} has no reply channel: its attach did not hand one over")
    return state.reply
