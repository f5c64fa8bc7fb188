"""Copy plans: where each PEFT adapter element lands in one slot of SGLang's LoRA pool, built once at attach from a
trace (rectangles of consecutive ids become one strided copy); ``bind`` turns a plan into (source, slot) view pairs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch

UNTOUCHED = -1  # probe fill: SGLang did not write this element


@dataclass(frozen=True)
class SourceSpec:
    """One adapter tensor as the plan expects it: PEFT name, 2-D shape, and its id range in a trace."""

    name: str
    shape: tuple[int, ...]
    id_offset: int  # ids of this tensor are id_offset + 1 + flat index

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape))


@dataclass(frozen=True)
class Block:
    """``dst[row0:row0+rows, col0:col0+cols]`` of ``{A,B}_buffer[module][layer][slot]`` (an expert buffer's
    [experts, rows, cols] read as [experts * rows, cols]) receives ``src.flatten()[offset + i*stride + j]`` (or
    zeros when ``src`` is None), times the adapter's scaling where ``scaled`` (SGLang's expert B)."""

    buffer: str  # "A" or "B"
    module: str  # pool key, e.g. "qkv_proj"
    layer: int
    row0: int
    rows: int
    col0: int
    cols: int
    src: Optional[str] = None
    offset: int = 0
    stride: int = 0
    scaled: bool = False


@dataclass(frozen=True)
class SlotLayout:
    """Everything needed to write an adapter of this shape into a slot of this pool, for one TP rank."""

    sources: tuple[SourceSpec, ...]
    blocks: tuple[Block, ...]
    unused_sources: tuple[str, ...] = ()

    @property
    def scaled(self) -> bool:
        """Whether a write is more than a copy: SGLang stores some blocks multiplied by the scaling."""
        return any(b.scaled for b in self.blocks)

    @property
    def copied_elements(self) -> int:
        return sum(b.rows * b.cols for b in self.blocks if b.src is not None)

    def check_sources(self, sources: Mapping[str, torch.Tensor]) -> None:
        """Same names and shapes as traced; contiguous, so that element offsets mean what the plan says."""
        want = {s.name: s.shape for s in self.sources}
        missing, extra = sorted(set(want) - set(sources)), sorted(set(sources) - set(want))
        if missing or extra:
            raise ValueError(f"adapter tensors differ from the plan: missing {missing[:4]}, extra {extra[:4]}")
        for name, shape in want.items():
            t = sources[name]
            if tuple(t.shape) != shape:
                raise ValueError(f"{name}: shape {tuple(t.shape)}, plan traced {shape}")
            if not t.is_contiguous():
                raise ValueError(f"{name}: not contiguous (the plan addresses flat element offsets)")


CopyPair = tuple[Optional[torch.Tensor], torch.Tensor]


def bind(layout: SlotLayout, pool: Any, slot: int, sources: Mapping[str, torch.Tensor],
         scaling: float | None = None) -> list[CopyPair]:
    """(source view, destination view) pairs into ``slot`` of ``pool``; nothing is copied here, except a scaled
    block's source: ``view * scaling`` in the source's dtype, the product SGLang's load stores."""
    layout.check_sources(sources)
    if layout.scaled and scaling is None:
        raise ValueError("the layout has blocks SGLang stores scaled (expert B): bind needs the adapter's scaling")
    flat = {name: t.reshape(-1) for name, t in sources.items()}
    pairs: list[CopyPair] = []
    for b in layout.blocks:
        buffers = pool.A_buffer if b.buffer == "A" else pool.B_buffer
        dst = buffers[b.module][b.layer][slot].flatten(0, -2)[b.row0:b.row0 + b.rows, b.col0:b.col0 + b.cols]
        if b.src is None:
            pairs.append((None, dst))
            continue
        base = flat[b.src]
        src = base.as_strided((b.rows, b.cols), (b.stride, 1), base.storage_offset() + b.offset)
        pairs.append((src * scaling if b.scaled else src, dst))
    return pairs


# ---- trace -> blocks ---------------------------------------------------------------------------------------------
def _runs(trace: np.ndarray) -> tuple[np.ndarray, ...]:
    """Row-wise runs of a 2-D trace (consecutive ids, zeros or untouched elements; column 0 always starts one):
    (row, col0, width, first value) per run."""
    rows, cols = trace.shape
    prev = np.empty_like(trace)
    prev[:, 0] = -2  # never continues
    prev[:, 1:] = trace[:, :-1]
    same_kind = (np.sign(trace) == np.sign(prev)) & (prev != -2)
    continues = same_kind & ((trace <= 0) | (trace == prev + 1))
    starts = np.flatnonzero(~continues.ravel())
    ends = np.append(starts[1:], rows * cols)
    return starts // cols, starts % cols, ends - starts, trace.ravel()[starts]


def blocks_from_trace(trace: np.ndarray, sources: Sequence[SourceSpec], buffer: str, module: str,
                      layer: int, scaled: bool = False) -> list[Block]:
    """Rectangles of ``trace`` (one slot of one pool buffer, 2-D) that map onto sources with unit column
    stride and a constant row stride, plus the rectangles SGLang zeroes."""
    if trace.ndim != 2:
        raise ValueError(f"{buffer}_buffer[{module}][{layer}]: {trace.ndim}-D slot (only dense 2-D slots)")
    row, col0, width, first = _runs(trace)
    keep = first != UNTOUCHED
    row, col0, width, first = row[keep], col0[keep], width[keep], first[keep]
    offsets = np.array([s.id_offset for s in sources], dtype=np.int64)
    src_idx = np.where(first > 0, np.searchsorted(offsets, first - 1, side="right") - 1, -1)
    order = np.lexsort((row, width, col0, src_idx))
    row, col0, width, first, src_idx = row[order], col0[order], width[order], first[order], src_idx[order]
    group_key = np.stack([src_idx, col0, width], axis=1)
    new_group = np.ones(len(row), dtype=bool)
    new_group[1:] = np.any(group_key[1:] != group_key[:-1], axis=1) | (row[1:] != row[:-1] + 1)
    starts = np.flatnonzero(new_group)
    ends = np.append(starts[1:], len(row))
    blocks: list[Block] = []
    for s, e in zip(starts.tolist(), ends.tolist()):
        k, c0, w = int(src_idx[s]), int(col0[s]), int(width[s])
        if k < 0:
            blocks.append(Block(buffer, module, layer, int(row[s]), e - s, c0, w))
            continue
        spec = sources[k]
        bases = first[s:e] - spec.id_offset - 1
        diffs = np.diff(bases)
        if len(diffs) and np.all(diffs == diffs[0]) and diffs[0] >= 0:  # rows that step evenly: one strided copy
            runs = [(0, e - s, int(diffs[0]))]
        else:  # one row, or rows that jump or run backwards (e.g. a reversed block): one block per row
            runs = [(j, 1, spec.shape[-1]) for j in range(e - s)]
        for j, m, step in runs:
            blocks.append(Block(buffer, module, layer, int(row[s + j]), m, c0, w, spec.name, int(bases[j]), step,
                                scaled))
    return sorted(blocks, key=lambda b: (b.layer, b.module, b.buffer, b.row0, b.col0))


def source_specs(tensors: Mapping[str, torch.Tensor]) -> tuple[SourceSpec, ...]:
    """Sorted sources with disjoint id ranges separated by one unused id, so no run spans two tensors."""
    specs, offset = [], 0
    for name in sorted(tensors):
        shape = tuple(int(d) for d in tensors[name].shape)
        spec = SourceSpec(name, shape, offset)
        specs.append(spec)
        offset += spec.numel + 1
    return tuple(specs)
