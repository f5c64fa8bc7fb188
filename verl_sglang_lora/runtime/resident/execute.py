"""Run a bound copy plan, and checksum both sides of it cheaply.

The checksum is two int64 sums over the bit patterns of all elements, in plan order: the plain sum and the
sum weighted by 1-based global position (a permutation or a shifted block changes the second). Integer sums
wrap mod 2**64 identically on CPU and CUDA, so source and slot sums compare exactly. The source side is
first cast to the slot's dtype (that is what ``copy_`` writes); a zero block counts as zeros on the source
side. On a GPU the sums stay on the device until one ``.tolist()`` at the end.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import torch

from .plan import CopyPair

INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def run_copies(pairs: Iterable[CopyPair], non_blocking: bool = True) -> int:
    """``dst.copy_(src)`` for every pair (``dst.zero_()`` where ``src`` is None); returns the pair count.

    One fused ``_foreach_copy_`` / ``_foreach_zero_`` call instead of a Python loop: a plan has one pair per
    adapter tensor (392 for a Qwen3-0.6B all-linear adapter), and the loop's per-call overhead, not the bytes,
    is what a write costs.
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


_CHUNK = 1 << 24  # elements per fused checksum step: bounds the int64 temporaries to 128 MiB


def _bits(flat: torch.Tensor) -> torch.Tensor:
    if flat.dtype.is_floating_point or flat.dtype.is_complex or flat.dtype == torch.bool:
        flat = flat.view(INT_VIEW[flat.element_size()])
    return flat.to(torch.int64)


def _accumulate(tensors: Sequence[Optional[torch.Tensor]], sizes: Sequence[int], device: torch.device) -> torch.Tensor:
    """[sum(bits), sum(position * bits)] over the concatenation; None stands for that many zeros.

    Views are gathered into chunks of ~16M elements, so a plan of hundreds of pairs costs one small copy per
    pair plus a handful of kernels per chunk, not a dozen kernels per pair.
    """
    acc = torch.zeros(2, dtype=torch.int64, device=device)
    pos, chunk, chunk_start, chunk_len = 1, [], 1, 0

    def flush() -> None:
        nonlocal chunk, chunk_len
        if chunk:
            bits = _bits(torch.cat(chunk))
            weights = torch.arange(chunk_start, chunk_start + bits.numel(), dtype=torch.int64, device=device)
            acc[0] += bits.sum()
            acc[1] += (bits * weights).sum()
        chunk, chunk_len = [], 0

    for t, n in zip(tensors, sizes):
        if t is None:  # zeros add nothing; just move the position on
            flush()
            pos += n
            chunk_start = pos
            continue
        chunk.append(t.reshape(-1))
        chunk_len += n
        pos += n
        if chunk_len >= _CHUNK:
            flush()
            chunk_start = pos
    flush()
    return acc


def pair_checksums(pairs: Sequence[CopyPair]) -> tuple[tuple[int, int], tuple[int, int]]:
    """(source checksum, destination checksum); equal iff (with overwhelming odds) the slot holds the source."""
    if not pairs:
        return (0, 0), (0, 0)
    device = pairs[0][1].device
    sizes = [dst.numel() for _, dst in pairs]
    srcs = [None if src is None else src.to(device=device, dtype=dst.dtype) for src, dst in pairs]
    src_sum = _accumulate(srcs, sizes, device)
    dst_sum = _accumulate([dst for _, dst in pairs], sizes, device)
    both = torch.stack([src_sum, dst_sum]).tolist()
    return (both[0][0], both[0][1]), (both[1][0], both[1][1])


def slot_checksum(pairs: Sequence[CopyPair]) -> tuple[int, int]:
    """Checksum of the slot side only (what the slot holds now, in plan order)."""
    if not pairs:
        return (0, 0)
    device = pairs[0][1].device
    acc = _accumulate([dst for _, dst in pairs], [dst.numel() for _, dst in pairs], device)
    return tuple(acc.tolist())  # type: ignore[return-value]
