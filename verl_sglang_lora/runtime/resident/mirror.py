"""Verify an in-place write against the trainer's own checksum: one fused read-back copy and two reductions.

The trainer's adapter lives in one flat byte buffer (``runtime/sync/flat_adapter``; padding between tensors is
zero). A ``Mirror`` is a zeroed buffer of the same size plus, for every copy pair, a view into it with the
geometry of the pair's *source* view. Reading the slot back through those views (one ``_foreach_copy_``)
rebuilds the trainer's buffer from what the slot holds; its ``flat_checksum`` must then equal the checksum the
trainer computed over its buffer before the request. That compares the slot with the trainer's bytes, not with
the (CUDA-IPC) source mapping the copy read from, so a stale mapping is caught too.

It applies only where the rebuild is exact: source and slot share the dtype, and the sources cover each element of
the flat buffer's tensors exactly once (checked once, at build, with a counter buffer). Zero blocks (where SGLang
writes zeros, e.g. the k rows of an adapter without ``k_proj``) are not part of the trainer's buffer: they are checked
to hold only zero bytes. Otherwise ``build`` returns the reason and the loader keeps the per-pair checksum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from .execute import INT_VIEW
from .plan import CopyPair

_WEIGHTS: dict[tuple[str, int], torch.Tensor] = {}


def _weights(n: int, device: torch.device) -> torch.Tensor:
    """1..n as int64 on ``device``, cached: the position weights of every checksum of that size. Not cached while a
    CUDA graph is being captured: that tensor would live in the graph's pool, filled only by its replays."""
    key = (str(device), n)
    if key in _WEIGHTS:
        return _WEIGHTS[key]
    weights = torch.arange(1, n + 1, dtype=torch.int64, device=device)
    if not (weights.is_cuda and torch.cuda.is_current_stream_capturing()):
        _WEIGHTS[key] = weights
    return weights


_ROW = 4096  # words per row of the checksum's 2-D view of the buffer


def flat_checksum(buf: torch.Tensor) -> tuple[int, int]:
    """(sum, position-weighted sum) of a contiguous byte buffer read as int64 words (a short tail as bytes; positions
    count from 1): ``flat_checksum_tensor`` read back."""
    a, b = flat_checksum_tensor(buf).tolist()
    return int(a), int(b)


def flat_checksum_tensor(buf: torch.Tensor) -> torch.Tensor:
    """``flat_checksum`` as an int64[2] on ``buf``'s device, with no host sync (so a CUDA graph can hold it).

    Integer sums wrap mod 2**64 in any order, so the trainer's and the scheduler's kernels agree exactly; the
    weighted sum sees a moved or swapped block that the plain sum does not. The weighted sum is taken without a
    buffer-sized product: with the words as rows of ``_ROW``, position(b, j) = b * _ROW + j + 1, so
    sum(position * w) = _ROW * sum_b b * rowsum_b + sum_j (j + 1) * colsum_j (mod 2**64) -- two reductions that read
    the buffer once each.
    """
    if buf.dtype != torch.uint8 or buf.dim() != 1 or not buf.is_contiguous():
        raise ValueError(f"flat_checksum needs a contiguous 1-D uint8 buffer, got {buf.dtype}{tuple(buf.shape)}")
    n_words = buf.numel() // 8
    rows = n_words // _ROW
    words = buf[: n_words * 8].view(torch.int64)
    rest = torch.cat([words[rows * _ROW:], buf[n_words * 8:].to(torch.int64)])  # < _ROW + 8 elements
    rest_weights = _weights(rest.numel(), buf.device) + rows * _ROW
    s0, s1 = rest.sum(), (rest * rest_weights).sum()
    if rows:
        block = words[: rows * _ROW].view(rows, _ROW)
        row_sums, col_sums = block.sum(1), block.sum(0)
        total = row_sums.sum()
        s0 = s0 + total
        s1 = s1 + _ROW * ((row_sums * _weights(rows, buf.device)).sum() - total) \
            + (col_sums * _weights(_ROW, buf.device)).sum()
    return torch.stack([s0, s1])


@dataclass
class Mirror:
    """The slot's pairs read back into the trainer buffer's layout."""

    buf: torch.Tensor  # uint8, same size as the trainer's flat buffer, zero outside the tensors
    views: list[torch.Tensor]  # one per copying pair, the source's geometry inside ``buf``
    dsts: list[torch.Tensor]
    zeros: list[torch.Tensor]  # the slot's zero blocks

    def checksum(self) -> tuple[int, int]:
        """Read the slot back (one fused copy) and checksum the rebuilt buffer."""
        a, b = self.checksum_tensor().tolist()
        return int(a), int(b)

    def checksum_tensor(self) -> torch.Tensor:
        """``checksum`` as an int64[2] on the device, with no host sync."""
        torch._foreach_copy_(self.views, self.dsts)
        return flat_checksum_tensor(self.buf)

    def zero_blocks_clean(self) -> bool:
        """Whether every zero block holds only zero bytes (bit patterns: a NaN or -0.0 is not clean)."""
        return not bool(self.zero_dirt_tensor())

    def zero_dirt_tensor(self) -> torch.Tensor:
        """A bool[] on the device: some zero block holds a non-zero byte. No host sync."""
        if not self.zeros:
            return torch.zeros((), dtype=torch.bool, device=self.buf.device)
        return torch.stack([z.view(INT_VIEW[z.element_size()]).ne(0).any() for z in self.zeros]).any()

    @classmethod
    def build(cls, flat: torch.Tensor, pairs: Sequence[CopyPair], total_elements: int) -> tuple[Optional["Mirror"], str]:
        """A mirror of ``flat`` for ``pairs``, or (None, why not). ``total_elements``: the adapter's element count
        (all its tensors), which the sources must cover exactly once for the rebuild to equal the trainer's buffer."""
        if flat.dtype != torch.uint8 or flat.dim() != 1 or not flat.is_contiguous():
            return None, f"the flat buffer is {flat.dtype}{tuple(flat.shape)}, not contiguous uint8"
        zeros = [dst for src, dst in pairs if src is None]
        pairs = [(src, dst) for src, dst in pairs if src is not None]
        if not pairs:
            return None, "no copy pairs"
        itemsize = pairs[0][0].element_size()
        if any(src.dtype != dst.dtype or src.element_size() != itemsize for src, dst in pairs):
            return None, "source and slot dtypes differ (the copy casts): bytes cannot be compared"
        if flat.numel() % itemsize or any(src.device != flat.device for src, _ in pairs):
            return None, "the sources are not on the flat buffer's device, or its size is not a whole element count"
        base = flat.untyped_storage().data_ptr() + flat.storage_offset()
        offsets = []
        for src, _ in pairs:
            start = src.untyped_storage().data_ptr() + src.storage_offset() * itemsize
            if not base <= start < base + flat.numel() or (start - base) % itemsize:
                return None, "a source view does not lie inside the flat buffer"
            if torch._debug_has_internal_overlap(src) != 0:
                return None, "a source view repeats elements (a replicated block): the rebuild would be ambiguous"
            offsets.append((start - base) // itemsize)
        buf = torch.zeros_like(flat)
        counter = buf.view(INT_VIEW[itemsize])
        try:
            counts = [counter.as_strided(src.shape, src.stride(), off) for (src, _), off in zip(pairs, offsets)]
        except RuntimeError as exc:
            return None, f"a source view does not fit the flat buffer ({exc})"
        for view in counts:  # one kernel after another: overlapping views must not race
            view.add_(1)
        once, more = int((counter == 1).sum()), int((counter > 1).sum())
        if more:
            return None, f"{more} source elements feed more than one slot element"
        if once != total_elements:
            return None, (f"the sources cover {once} of the adapter's {total_elements} elements (this rank uses part "
                          "of the adapter, e.g. a TP slice): the trainer's checksum covers all of it")
        buf.zero_()
        typed = buf.view(pairs[0][0].dtype)
        views = [typed.as_strided(src.shape, src.stride(), off) for (src, _), off in zip(pairs, offsets)]
        return cls(buf, views, [dst for _, dst in pairs], zeros), ""
