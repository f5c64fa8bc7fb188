"""Verify an in-place write by reading the slot back as the trainer's flat buffer (docs/resident_sync.md, section 2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from .execute import INT_VIEW
from .plan import CopyPair

@dataclass
class Mirror:
    """The slot's pairs read back into the trainer buffer's layout."""

    buf: torch.Tensor  # uint8, same size as the trainer's flat buffer, zero outside the tensors
    views: list[torch.Tensor]  # one per copying pair, the source's geometry inside ``buf``
    dsts: list[torch.Tensor]
    zeros: list[torch.Tensor]  # the slot's zero blocks

    def matches(self, flat: torch.Tensor) -> bool:
        """Read the slot back (one fused copy): True iff it rebuilds ``flat`` byte for byte and every zero block
        holds only zero bits (a NaN or -0.0 is not zero)."""
        torch._foreach_copy_(self.views, self.dsts)
        dirty = [z.view(INT_VIEW[z.element_size()]).ne(0).any() for z in self.zeros]
        return torch.equal(self.buf, flat) and not (dirty and bool(torch.stack(dirty).any()))

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
        typed, counter = buf.view(pairs[0][0].dtype), buf.view(INT_VIEW[itemsize])
        try:
            views = [typed.as_strided(src.shape, src.stride(), off) for (src, _), off in zip(pairs, offsets)]
        except RuntimeError as exc:
            return None, f"a source view does not fit the flat buffer ({exc})"
        for view in views:  # one kernel after another: overlapping views must not race
            view.view(counter.dtype).add_(1)
        once, more = int((counter == 1).sum()), int((counter > 1).sum())
        if more:
            return None, f"{more} source elements feed more than one slot element"
        if once != total_elements:
            return None, (f"the sources cover {once} of the adapter's {total_elements} elements (this rank uses part "
                          "of the adapter, e.g. a TP slice): the trainer's buffer holds all of it")
        buf.zero_()
        return cls(buf, views, [dst for _, dst in pairs], zeros), ""
