"""The ``--custom-weight-loader`` entry point: ``verl_sglang_lora.runtime.resident.loader.apply``.

SGLang imports it by dotted path (``dynamic_import``) inside each TP rank's scheduler process and calls
``apply(model, named_tensors)`` from ``update_weights_from_tensor`` when the request's ``load_format`` equals
that path (the path must also be listed in ``--custom-weight-loader``). The tensors are that rank's list,
already moved to the rank's current CUDA device. See ``protocol`` for the request format.

``apply`` never raises: an exception there would escape ``update_weights_from_tensor`` into the scheduler's
request loop. Every outcome, failures included, goes to the status tensor (and the log).

Ops (``op=`` in the header name):
  attach   slot=<lora_name> [version=N] [write=1] + adapter tensors: trace SGLang's layout for this rank, bind
           it to these tensors (kept referenced: send persistent buffers, e.g. CUDA IPC views of the trainer's
           flat buffer) and optionally write them.
           With a reply channel (``protocol``), later requests for the slot with an empty header answer there.
  write    slot=<lora_name> version=N [checksum=0] [sum0=.. sum1=..]: copy the attached sources into the slot;
           adapter tensors in the same request are used instead (bound with the attached or a freshly traced
           layout). With the trainer's checksum of its flat buffer (sum0/sum1) and a mirror built at attach, the
           slot is read back into the buffer's layout and must checksum to exactly that (``mirror``).
  compare  slot=<lora_name> ref=<lora_name>: byte-compare two resident slots (e.g. against an adapter that
           SGLang loaded the normal way); the mismatch list goes to the message tensor.
  checksum slot=<lora_name>: checksum of the slot over the attached plan.
  detach   slot=<lora_name>: forget the attached binding.
  verify   slot=<lora_name> [allow_unpinned=1] + adapter tensors: the bytes SGLang's own load put in the pool for
           any loaded adapter (made resident first) against those tensors, on this rank's slice: a versioned or disk
           load proven byte for byte, as a write is.
  ping     slot=<lora_name> [update_check=0|1]: nothing but the answer (with an empty header: on the slot's reply
           channel) -- the fixed cost of a loader request through SGLang, which the benchmark sets beside the write;
           ``update_check`` puts SGLang's own per-request check (0) or the cached one (1) in place for the requests
           after it (``update_check_cache``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Iterable, Optional

import torch

from . import protocol as P
from .protocol import ErrorCode as E
from .access import (ResidentError, buffer_id, ensure_resident, find_lora_manager, is_pinned,
                     notify_slots_updated, resolve_uid)
from . import graphed_write
from .execute import pair_checksums, run_copies, slot_checksum
from .mirror import Mirror, flat_checksum
from .plan import CopyPair, SlotLayout, bind
from .trace import trace_layout
from . import update_check_cache
from .verify import compare_slots

logger = logging.getLogger(__name__)


@dataclass
class SlotState:
    """What one attach left behind for one slot on this rank."""

    uid: str
    buffer_id: int
    layout: SlotLayout
    pairs: list[CopyPair]
    version: int = -1
    mirror: Optional[Mirror] = None
    mirror_reason: str = ""  # why there is no mirror (said in every reply verified pair by pair)
    flat: Optional[torch.Tensor] = None  # the trainer's flat buffer (CUDA-IPC view), kept referenced
    reply: Optional[tuple[torch.Tensor, torch.Tensor]] = None  # the slot's reply channel (status, message)
    graphed: Optional[graphed_write.GraphedWrite] = None  # the write as one CUDA graph, from its first eager write
    graph_reason: str = ""  # why the writes stay eager ("" while not yet tried)
    graph_news: bool = False  # decided in this request: its reply says how later writes run


_SLOTS: dict[tuple[int, str], SlotState] = {}
# The last status/message tensors per (op, slot): holding them keeps torch's CUDA-IPC handle cache warm, so the
# next request's identical handles are not opened again (an IPC open costs more than the whole copy).
_KEEP: dict[tuple[str, str], tuple] = {}


def _sync(pairs: list[CopyPair]) -> None:
    if pairs and pairs[0][1].is_cuda:
        torch.cuda.current_stream(pairs[0][1].device).synchronize()


def _layout_for(manager: Any, uid: str, tensors: dict, known: Optional[SlotLayout]) -> SlotLayout:
    if known is not None:
        try:
            known.check_sources(tensors)
            return known
        except ValueError:
            pass
    layout = trace_layout(manager, uid, tensors)
    if layout.unused_sources:
        raise ResidentError(E.UNSUPPORTED_LAYOUT, f"SGLang's load ignores {len(layout.unused_sources)} tensors, "
                                                  f"e.g. {layout.unused_sources[0]}: they would never reach the slot")
    return layout


def _trainer_sum(req: P.Request) -> Optional[tuple[int, int]]:
    s0, s1 = req.get("sum0"), req.get("sum1")
    return (int(s0), int(s1)) if s0 is not None and s1 is not None else None


def _copy(pairs: list[CopyPair], checksum: bool, state: Optional[SlotState] = None,
          trainer_sum: Optional[tuple[int, int]] = None) -> dict[int, int]:
    """Run the copies; with ``checksum``, verify the slot: against the trainer's own checksum through the mirror
    when there is one (a fused read-back and two reductions), else source vs slot pair by pair. A slot with a mirror
    is written by its CUDA graph once one was captured (``graphed_write``), from its first eager write on."""
    mirror = state.mirror if state is not None and pairs is state.pairs else None
    if checksum and mirror is not None and state.graphed is not None and graphed_write.enabled():
        t0 = time.perf_counter_ns()
        dst, clean = state.graphed.run()
        out = {P.N_COPIES: len(pairs), P.COPY_NS: time.perf_counter_ns() - t0, P.GRAPHED: 1}
        return _checked(out, trainer_sum, state, dst, clean)
    t0 = time.perf_counter_ns()
    n = run_copies(pairs)
    _sync(pairs)
    t1 = time.perf_counter_ns()
    out = {P.N_COPIES: n, P.COPY_NS: t1 - t0}
    if not checksum:
        return out
    if mirror is None:
        src, dst = pair_checksums(pairs)
        out.update({P.SRC0: src[0], P.SRC1: src[1], P.DST0: dst[0], P.DST1: dst[1], P.VERIFIED_BY: P.BY_SOURCE,
                    P.VERIFY_NS: time.perf_counter_ns() - t1})
        if src != dst:
            raise ResidentError(E.MISMATCH, f"slot checksum {dst} != source checksum {src}")
        return out
    dst, clean = mirror.checksum(), mirror.zero_blocks_clean()
    out = _checked(out, trainer_sum, state, dst, clean)
    out[P.VERIFY_NS] = time.perf_counter_ns() - t1
    if not state.graph_reason and graphed_write.enabled():  # verified eagerly: later writes may replay it
        state.graphed, why = graphed_write.capture(pairs, mirror, (dst, clean))
        state.graph_reason, state.graph_news = why or GRAPHED, True
        if why and why != graphed_write.NOT_CUDA:
            logger.warning("verl resident loader: slot %s keeps eager writes: %s", state.uid, why)
            # a refused graph may have replayed into the slot: write it and verify it again before answering
            run_copies(pairs)
            _checked(out, trainer_sum, state, mirror.checksum(), mirror.zero_blocks_clean())
    return out


def _checked(out: dict[int, int], trainer_sum: Optional[tuple[int, int]], state: SlotState, dst: tuple[int, int],
             clean: bool) -> dict[int, int]:
    """The mirror's answer against the trainer's checksum (or, without one, the flat buffer's as mapped here)."""
    src = trainer_sum if trainer_sum is not None else flat_checksum(state.flat)
    by = P.BY_TRAINER_SUM if trainer_sum is not None else P.BY_SOURCE
    out.update({P.SRC0: src[0], P.SRC1: src[1], P.DST0: dst[0], P.DST1: dst[1], P.VERIFIED_BY: by})
    if not clean:
        raise ResidentError(E.MISMATCH, "a zero block of the slot (rows SGLang zeroes, e.g. a missing k_proj) "
                                        "holds non-zero bytes")
    if src != dst:
        whose = "the trainer's checksum" if by == P.BY_TRAINER_SUM else "source checksum"
        raise ResidentError(E.MISMATCH, f"slot checksum {dst} != {whose} {src}")
    return out


GRAPHED = "graphed"


def _write_mode(state: SlotState) -> str:
    """Said in the reply of the request that decided it (an attach says it always): whether this slot's writes replay
    a CUDA graph, and if not, why."""
    state.graph_news = False
    if state.graphed is not None:
        return "; writes: one CUDA graph" + ("" if graphed_write.enabled() else " (switched off: eager)")
    return f"; writes eager: {state.graph_reason}" if state.graph_reason else ""


def _adapter_facts(manager: Any, uid: str) -> dict[int, int]:
    """The scaling and rank SGLang applies for this slot (``LoRAAdapter.scaling``, ``config.r``), for the client's
    comparison with the trainer's scaling; absent fields stay 0 (unknown)."""
    adapter = getattr(manager, "loras", {}).get(uid)
    scaling = getattr(adapter, "scaling", None)
    rank = getattr(getattr(adapter, "config", None), "r", None)
    if scaling is None or not rank:
        return {}
    return {P.SCALING_BITS: P.float_to_bits(scaling), P.LORA_R: int(rank)}


def _build_mirror(req: P.Request, pairs: list[CopyPair], uid: str) -> tuple[Optional[Mirror], str]:
    if req.flat is None:
        return None, "the attach carried no flat buffer"
    mirror, reason = Mirror.build(req.flat, pairs, sum(t.numel() for t in req.tensors.values()))
    if mirror is None:
        logger.warning("verl resident loader: slot %s is verified pair by pair, not against the trainer's "
                       "checksum: %s", uid, reason)
    return mirror, reason


def _how_verified(fields: dict[int, int], why: str) -> str:
    """Said in the reply (the scheduler's log is often out of the user's sight): why a write was checked pair by
    pair rather than against the trainer's checksum."""
    return f" (verified pair by pair: {why})" if fields.get(P.VERIFIED_BY) == P.BY_SOURCE else ""


def _slot(manager: Any, req: P.Request) -> tuple[str, int]:
    name = req.get("slot")
    if not name:
        raise ResidentError(E.BAD_REQUEST, f"op={req.op} needs slot=<lora_name>")
    uid = resolve_uid(manager, name)
    if not is_pinned(manager, uid) and req.get("allow_unpinned") != "1":
        raise ResidentError(E.NOT_PINNED, f"slot {name!r} is not pinned: SGLang may evict it and reload stale weights")
    return uid, ensure_resident(manager, uid)


def handle(model: Any, req: P.Request) -> tuple[dict[int, int], str]:
    """Run one request; returns (status fields, message). Raises ``ResidentError`` on a failed guard."""
    if req.op == "ping":
        return {}, _ping(req)
    manager = find_lora_manager(model)
    uid, slot = _slot(manager, req)
    key = (id(manager), uid)
    state = _SLOTS.get(key)
    fields: dict[int, int] = {P.BUFFER_ID: slot, P.VERSION: req.int("version", state.version if state else -1),
                              **_adapter_facts(manager, uid)}
    if req.op == "detach":
        _SLOTS.pop(key, None)
        return fields, "detached"
    if req.op == "compare":
        ref_uid = resolve_uid(manager, req.get("ref") or "")
        mismatches = compare_slots(manager.memory_pool, slot, buffer_id(manager, ref_uid))
        fields[P.MISMATCHES] = len(mismatches)
        text = "\n".join(str(m) for m in mismatches) or "slots are byte-identical"
        if mismatches and req.get("fail_on_mismatch", "1") == "1":
            raise ResidentError(E.SLOTS_DIFFER, text)
        return fields, text
    if req.op == "verify":
        return _verify(manager, uid, slot, req, fields)
    if state is not None and state.buffer_id != slot:
        raise ResidentError(E.SLOT_MOVED, f"slot {uid} moved from pool index {state.buffer_id} to {slot}")
    if req.op == "attach":
        if not req.tensors:
            raise ResidentError(E.BAD_REQUEST, "op=attach carries the adapter tensors")
        layout = _layout_for(manager, uid, req.tensors, state.layout if state else None)
        pairs = bind(layout, manager.memory_pool, slot, req.tensors)
        mirror, reason = _build_mirror(req, pairs, uid)
        state = SlotState(uid, slot, layout, pairs, fields[P.VERSION], mirror, reason, req.flat, req.reply)
        _SLOTS[key] = state
        if req.get("write") == "1":
            fields.update(_copy(state.pairs, req.get("checksum", "1") == "1", state, _trainer_sum(req)))
            notify_slots_updated(manager, {slot})
        check = _keep_update_check_answer()
        return fields, (f"attached {len(state.pairs)} copies ({state.layout.copied_elements} elements)"
                        + _how_verified(fields, reason) + _write_mode(state)
                        + ("" if check == "absent" else f"; SGLang's per-request update check: {check}"))
    if req.op == "checksum":
        if state is None:
            raise ResidentError(E.NOT_ATTACHED, "op=checksum needs an attached slot")
        d0, d1 = state.mirror.checksum() if state.mirror is not None else slot_checksum(state.pairs)
        fields.update({P.DST0: d0, P.DST1: d1, P.N_COPIES: len(state.pairs),
                       P.VERIFIED_BY: P.BY_TRAINER_SUM if state.mirror is not None else P.BY_SOURCE})
        return fields, "checksum"
    # write
    if req.tensors:
        layout = _layout_for(manager, uid, req.tensors, state.layout if state else None)
        pairs = bind(layout, manager.memory_pool, slot, req.tensors)
    elif state is not None:
        pairs = state.pairs
    else:
        raise ResidentError(E.NOT_ATTACHED, "op=write without adapter tensors needs an attached slot")
    fields.update(_copy(pairs, req.get("checksum", "1") == "1", state, _trainer_sum(req)))
    notify_slots_updated(manager, {slot})
    if state is not None:
        state.version = fields[P.VERSION]
    why = ("the write carried its own tensors (bound anew, not the attached layout's mirror)" if req.tensors
           else state.mirror_reason)
    return fields, "written" + _how_verified(fields, why) + (_write_mode(state) if state and state.graph_news else "")


def _ping(req: P.Request) -> str:
    """The benchmark's switches, for the requests after this one: ``update_check`` (SGLang's own per-request check
    or the kept answer) and ``graphed`` (eager writes or the slot's CUDA graph)."""
    answer = "pong"
    for key, switch, off, on in (("update_check", update_check_cache.select, "SGLang's own check", "the kept answer"),
                                 ("graphed", graphed_write.select, "eager writes", "the slot's CUDA graph")):
        mode = req.get(key)
        if mode is None:
            continue
        if mode not in ("0", "1"):
            raise ResidentError(E.BAD_REQUEST, f"op=ping {key}={mode!r}: 0 ({off}) or 1 ({on})")
        label = "SGLang's per-request update check" if key == "update_check" else "in-place writes"
        answer += f"; {label}: {switch(mode == '1')}"
    return answer


def _keep_update_check_answer() -> str:
    """SGLang 0.5.23's per-request module walk, most of a write's cost there (``update_check_cache``); never fails an
    attach whose copies already ran."""
    try:
        return update_check_cache.install()
    except Exception as exc:  # noqa: BLE001 - the attach's result stands, the reply says what went wrong
        logger.exception("verl resident loader: SGLang's per-request update check left as is")
        return f"left as is: {type(exc).__name__}: {exc}"


def _verify(manager: Any, uid: str, slot: int, req: P.Request, fields: dict[int, int]) -> tuple[dict[int, int], str]:
    """SGLang's own load of ``uid`` against the tensors it was loaded from (traced for this rank, checksummed both
    sides in plan order)."""
    if not req.tensors:
        raise ResidentError(E.BAD_REQUEST, "op=verify carries the adapter tensors the loaded adapter must hold")
    pairs = bind(_layout_for(manager, uid, req.tensors, None), manager.memory_pool, slot, req.tensors)
    src, dst = pair_checksums(pairs)
    fields.update({P.SRC0: src[0], P.SRC1: src[1], P.DST0: dst[0], P.DST1: dst[1], P.N_COPIES: len(pairs),
                   P.VERIFIED_BY: P.BY_SOURCE})
    if src != dst:
        raise ResidentError(E.MISMATCH, f"the pool holds other bytes for {req.get('slot')!r} than the tensors sent: "
                                        f"slot checksum {dst} != source {src}")
    return fields, f"verified {len(pairs)} blocks against the tensors sent"


def apply(model: Any, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
    """SGLang's custom-weight-loader hook. Never raises; reports through the request's status tensor."""
    wall0, t0 = time.time_ns(), time.perf_counter_ns()
    req = None
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
        fields.update({P.STATE: P.OK, P.SEQ: seq, P.TOTAL_NS: time.perf_counter_ns() - t0})
    except ResidentError as exc:
        fields, message = {P.STATE: P.FAILED, P.ERROR: int(exc.code), P.SEQ: seq}, str(exc)
        logger.error("verl resident loader: op=%s failed (%s): %s", req.op, P.ERRORS.get(exc.code), exc)
    except Exception as exc:  # noqa: BLE001 - must not escape into SGLang's request loop
        fields = {P.STATE: P.FAILED, P.ERROR: int(E.LOADER_EXCEPTION), P.SEQ: seq}
        message = f"{type(exc).__name__}: {exc}"
        logger.exception("verl resident loader: op=%s raised", req.op)
    fields[P.START_WALL_NS] = wall0
    try:  # the message first, unsynced: the status row's copy and sync on the same stream cover both
        P.write_message(out, message, sync=False)
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

