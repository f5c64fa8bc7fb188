"""Run a bound copy plan, and compare both sides of it bit for bit.

``differing_pairs`` is the exact check of a slot written without a mirror (``mirror``): every block of the slot
against the source view it was copied from, as integer bit patterns (so -0.0, NaN payloads and a flipped sign all
count), and every zero block against zero. No checksum: two different byte strings never compare equal.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch

from .plan import CopyPair

INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def run_copies(pairs: Iterable[CopyPair], non_blocking: bool = True) -> int:
    """``dst.copy_(src)`` for every pair (``dst.zero_()`` where ``src`` is None); returns the pair count.

    One fused ``_foreach_copy_`` / ``_foreach_zero_`` call instead of a Python loop: a plan has one pair per
    adapter block (hundreds for an all-linear adapter), and the per-call overhead, not the bytes, is what a write
    costs.
    """
    pairs = list(pairs)
    copies = [(src, dst) for src, dst in pairs if src is not None]
    zeros = [dst for src, dst in pairs if src is None]
    try:
        if copies:
            torch._foreach_copy_([d for _, d in copies], [s for s, _ in copies], non_blocking=non_blocking)
        if zeros:
            torch._foreach_zero_(zeros)
    except (AttributeError, RuntimeError, TypeError):  # a torch without the fused ops (or a pair they refuse)
        for src, dst in copies:
            dst.copy_(src, non_blocking=non_blocking)
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
