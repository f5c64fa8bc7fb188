"""Run a bound copy plan, and compare slots bit for bit: as integer bit patterns, so -0.0, NaN payloads and a flipped
sign all count (no checksum)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from .access import EMBEDDING_BUFFERS
from .plan import CopyPair

INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def run_copies(pairs: Sequence[CopyPair]) -> int:
    """``dst.copy_(src)`` for every pair (``dst.zero_()`` where ``src`` is None); returns the pair count. Fused: a plan
    has hundreds of small blocks, and per-call overhead, not the bytes, is what a write costs."""
    copies = [(src, dst) for src, dst in pairs if src is not None]
    zeros = [dst for src, dst in pairs if src is None]
    try:
        if copies:
            torch._foreach_copy_([d for _, d in copies], [s for s, _ in copies], non_blocking=True)
        if zeros:
            torch._foreach_zero_(zeros)
    except (AttributeError, RuntimeError, TypeError):  # a torch without the fused ops (or a pair they refuse)
        for src, dst in copies:
            dst.copy_(src, non_blocking=True)
        for dst in zeros:
            dst.zero_()
    return len(pairs)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns as a same-sized integer view (a copy only where the view is not contiguous)."""
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        return t.contiguous().view(INT_VIEW[t.element_size()])
    return t


def differing_pairs(pairs: Sequence[CopyPair]) -> list[int]:
    """Indexes of the pairs whose slot block is not bit-identical to its source (zero blocks: to zero). The source
    is cast to the slot's dtype first, as ``copy_`` writes it."""
    flags = []
    for src, dst in pairs:
        want = torch.zeros_like(dst) if src is None else src.to(device=dst.device, dtype=dst.dtype)
        flags.append(torch.ne(bits(want), bits(dst)).any())
    if not flags:
        return []
    return torch.stack(flags).nonzero().flatten().tolist()  # one host sync for the whole plan


def _difference(where: str, a: torch.Tensor, b: torch.Tensor) -> Optional[str]:
    """Where ``a`` and ``b`` (one slot of one buffer each) differ bit for bit; None where they do not."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{where}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
    diff = bits(a) != bits(b)
    count = int(diff.sum())
    if count == 0:
        return None
    first = tuple(int(i) for i in torch.nonzero(diff)[0].tolist())
    return f"{where}: {count}/{a.numel()} elements differ, first at {first} ({float(a[first])!r} vs {float(b[first])!r})"


def compare_slots(pool: Any, slot_a: int, slot_b: int) -> list[str]:
    """Every element of slot ``slot_a`` against slot ``slot_b``, all per-layer and embedding buffers (the whole slot:
    a write a plan misses shows too); one line per buffer that differs."""
    out: list[Optional[str]] = []
    for family, buffers in (("A", pool.A_buffer), ("B", pool.B_buffer)):
        for module in sorted(buffers):
            for layer, buf in enumerate(buffers[module]):
                out.append(_difference(f"{family}[{module}][layer {layer}]", buf[slot_a], buf[slot_b]))
    for family in EMBEDDING_BUFFERS:
        for module, buf in sorted(getattr(pool, family, {}).items()):
            out.append(_difference(f"{family}[{module}]", buf[slot_a], buf[slot_b]))
    return [m for m in out if m is not None]
