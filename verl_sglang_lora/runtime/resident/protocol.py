"""The wire format's codec: tensor names, status fields and error codes (docs/resident_sync.md, section 3)."""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any, Iterable, Optional

import torch

PREFIX = "verl_resident.v1"
MESSAGE_NAME = f"{PREFIX}|message"
FLAT_NAME = f"{PREFIX}|flat"
REPLY_STATUS_NAME = f"{PREFIX}|reply_status"
REPLY_MESSAGE_NAME = f"{PREFIX}|reply_message"
MAGIC = 0x56534C52  # "VSLR"
STATUS_LEN = 24
OPS = ("attach", "write", "compare", "detach", "verify")

# the status row's fields (indexes 15 and up stay 0)
(MAGIC_I, STATE, ERROR, VERSION, BUFFER_ID, N_COPIES, MISMATCHES, COPY_NS, TOTAL_NS, SEQ, VERIFY_NS, SCALING_BITS,
 LORA_R, VERIFIED_BY, START_WALL_NS) = range(15)
NOT_VERIFIED, BY_PAIRS, BY_MIRROR = 0, 1, 2  # VERIFIED_BY
PENDING, OK, FAILED = 0, 1, 2


class ErrorCode(enum.IntEnum):
    """Why a loader request failed: the value travels in the status row's ERROR field (0: none); ``text`` says it in
    the loader's log and the client's error."""

    def __new__(cls, value: int, text: str) -> "ErrorCode":
        code = int.__new__(cls, value)
        code._value_, code.text = value, text
        return code

    BAD_REQUEST = 1, "bad request"
    LOADER_EXCEPTION = 2, "unexpected exception in the loader"
    LORA_DISABLED = 3, "LoRA is not enabled on the server"
    UNKNOWN_SLOT = 4, "unknown slot name"
    NOT_RESIDENT = 5, "slot adapter is not resident in the pool"
    ADAPTER_REBUILD = 6, "cannot rebuild SGLang's LoRAAdapter"
    UNSUPPORTED_LAYOUT = 7, "unsupported adapter or pool layout"
    TRACE_INCONSISTENT = 8, "traced layout is inconsistent"
    SLOT_MOVED = 9, "slot moved to another pool index since attach"
    NOT_PINNED = 10, "slot adapter is not pinned"
    NOT_ATTACHED = 11, "no attached sources for this slot"
    MISMATCH = 12, "the slot's bytes differ from the trainer's"
    SLOTS_DIFFER = 14, "slots differ"  # 13 stays unassigned, so logs that carry it keep their meaning


ERRORS = {code: code.text for code in ErrorCode}


@dataclass(frozen=True)
class Request:
    op: str
    fields: dict[str, str]
    status: Optional[torch.Tensor]  # None: the header was empty, the answer goes to the slot's reply channel
    message: Optional[torch.Tensor]
    tensors: dict[str, torch.Tensor]
    flat: Optional[torch.Tensor] = None
    reply: Optional[tuple[torch.Tensor, torch.Tensor]] = None  # the reply channel an attach hands over

    def get(self, key: str) -> Optional[str]:
        return self.fields.get(key)

    def int(self, key: str, default: int = 0) -> int:
        value = self.fields.get(key)
        return default if value is None else int(value)


def header_name(op: str, **fields: Any) -> str:
    """The header tensor's name for ``op`` with ``key=value`` fields (no '|' or '=' inside values)."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}")
    parts = [PREFIX, f"op={op}"]
    for key, value in fields.items():
        text = str(value)
        if "|" in text or "=" in text:
            raise ValueError(f"{key}={text!r}: '|' and '=' are reserved")
        parts.append(f"{key}={text}")
    return "|".join(parts)


def new_status(device: Any = None) -> torch.Tensor:
    status = torch.zeros(STATUS_LEN, dtype=torch.int64, device=device)
    status[MAGIC_I] = MAGIC
    return status


def new_message(size: int = 4096, device: Any = None) -> torch.Tensor:
    return torch.zeros(size, dtype=torch.uint8, device=device)


def request_tensors(op: str, status: torch.Tensor, adapter: Optional[dict] = None,
                    message: Optional[torch.Tensor] = None, flat: Optional[torch.Tensor] = None,
                    reply: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
                    **fields: Any) -> list[tuple[str, torch.Tensor]]:
    """The named-tensor list a client sends (one TP rank's list). ``status`` empty: answer on the slot's reply
    channel; ``reply``: the (status, message) pair an attach hands over as that channel."""
    out = [(header_name(op, **fields), status)]
    if message is not None:
        out.append((MESSAGE_NAME, message))
    if flat is not None:
        out.append((FLAT_NAME, flat))
    if reply is not None:
        out += [(REPLY_STATUS_NAME, reply[0]), (REPLY_MESSAGE_NAME, reply[1])]
    out.extend(sorted((adapter or {}).items()))
    return out


def parse(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> Request:
    """Split a loader call into header fields, status/message tensors and adapter tensors."""
    header, status, message, flat, tensors, reply = None, None, None, None, {}, {}
    for name, tensor in named_tensors:
        if name == MESSAGE_NAME:
            message = tensor
        elif name == FLAT_NAME:
            flat = tensor
        elif name in (REPLY_STATUS_NAME, REPLY_MESSAGE_NAME):
            reply[name] = tensor
        elif name.startswith(PREFIX + "|"):
            if header is not None:
                raise ValueError("two header tensors in one request")
            header, status = name, tensor
        else:
            tensors[name] = tensor
    if header is None or status is None:
        raise ValueError(f"no '{PREFIX}|op=...' header tensor in the request")
    if status.numel() and not _holds_status(status):
        raise ValueError(f"status tensor must be int64[{STATUS_LEN}] (or empty: answer on the slot's reply "
                         f"channel), got {status.dtype}{tuple(status.shape)}")
    if reply:
        r_status, r_message = reply.get(REPLY_STATUS_NAME), reply.get(REPLY_MESSAGE_NAME)
        if r_status is None or r_message is None:
            raise ValueError(f"a reply channel needs both {REPLY_STATUS_NAME} and {REPLY_MESSAGE_NAME}")
        if not _holds_status(r_status) or r_message.dtype != torch.uint8 or r_message.numel() == 0:
            raise ValueError(f"a reply channel is int64[{STATUS_LEN}] + a non-empty uint8 message, got "
                             f"{r_status.dtype}{tuple(r_status.shape)} + {r_message.dtype}{tuple(r_message.shape)}")
    fields = dict(part.split("=", 1) for part in header.split("|")[1:])
    op = fields.pop("op", "")
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}")
    channel = (reply[REPLY_STATUS_NAME], reply[REPLY_MESSAGE_NAME]) if reply else None
    return Request(op, fields, status if status.numel() else None, message, tensors, flat, channel)


def _holds_status(tensor: torch.Tensor) -> bool:
    return tensor.dtype == torch.int64 and tensor.numel() >= STATUS_LEN


def write_status(status: torch.Tensor, values: dict[int, int]) -> None:
    """One small H2D copy of the whole status row (magic included), then a sync so the caller can read it."""
    row = [0] * STATUS_LEN  # built in Python: one tensor, not one indexed store per field
    row[MAGIC_I] = MAGIC
    for index, value in values.items():
        row[index] = int(value)
    status.view(-1)[:STATUS_LEN].copy_(torch.tensor(row, dtype=torch.int64))
    if status.is_cuda:
        torch.cuda.current_stream(status.device).synchronize()


def write_message(message: Optional[torch.Tensor], text: str) -> None:
    """Unsynced: the ``write_status`` that follows on the same stream syncs this copy too."""
    if message is None or message.numel() == 0:
        return
    data = text.encode("utf-8")[: message.numel() - 1] + b"\0"
    message.view(-1)[: len(data)].copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))


def read_status(status: torch.Tensor) -> dict[str, Any]:
    """Client side: the status row as a dict (``ok``, ``error``, how it was verified, timings)."""
    v = status.view(-1)[:STATUS_LEN].tolist()
    return {
        "magic_ok": v[MAGIC_I] == MAGIC, "state": v[STATE], "ok": v[STATE] == OK, "error": v[ERROR],
        "error_text": ERRORS.get(v[ERROR], ""), "version": v[VERSION],
        "buffer_id": v[BUFFER_ID], "copies": v[N_COPIES], "mismatches": v[MISMATCHES], "copy_ns": v[COPY_NS],
        "total_ns": v[TOTAL_NS], "seq": v[SEQ], "verify_ns": v[VERIFY_NS],
        "scaling": bits_to_float(v[SCALING_BITS]) if v[LORA_R] else None, "lora_r": v[LORA_R],
        "verified_by": v[VERIFIED_BY], "start_wall_ns": v[START_WALL_NS],
    }


def float_to_bits(value: float) -> int:
    """A float64 as the int64 with the same bits (the status row is int64)."""
    return struct.unpack("<q", struct.pack("<d", float(value)))[0]


def bits_to_float(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", int(bits)))[0]


def read_message(message: torch.Tensor) -> str:
    data = message.view(-1).cpu().numpy().tobytes()  # 4 KiB: one buffer, not 4096 Python ints
    return data.split(b"\0", 1)[0].decode("utf-8", errors="replace")

