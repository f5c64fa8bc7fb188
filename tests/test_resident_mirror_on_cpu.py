"""The mirror that verifies an in-place write against the trainer's buffer byte for byte: it rebuilds the trainer's
flat buffer from the slot exactly, sees a single wrong element or a moved block, and refuses the layouts where a
rebuild would be ambiguous or partial (each with its reason)."""

from __future__ import annotations

import torch

from verl_sglang_lora.runtime.resident.mirror import Mirror


def _flat(*shapes: tuple[int, int], pad: int = 256, device: str = "cpu") -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A zero-padded byte buffer with bf16 views, as the sync client lays it out."""
    sizes = [r * c * 2 for r, c in shapes]
    offsets, total = [], 0
    for n in sizes:
        offsets.append(total)
        total += -(-n // pad) * pad
    flat = torch.zeros(total, dtype=torch.uint8, device=device)
    gen = torch.Generator().manual_seed(0)
    views = []
    for (r, c), off, n in zip(shapes, offsets, sizes):
        v = flat[off: off + n].view(torch.bfloat16).view(r, c)
        v.copy_(torch.randn(r, c, generator=gen))
        views.append(v)
    return flat, views


def _pool_pairs(views: list[torch.Tensor], width: int = 64) -> tuple[torch.Tensor, list]:
    """Slot views in a pool buffer wider than the sources (a strided [:, :r] slot, as SGLang's B buffers)."""
    pool = torch.zeros(sum(v.shape[0] for v in views), width, dtype=torch.bfloat16, device=views[0].device)
    pairs, row = [], 0
    for v in views:
        pairs.append((v, pool[row: row + v.shape[0], : v.shape[1]]))
        row += v.shape[0]
    return pool, pairs


def test_mirror_rebuilds_the_trainer_buffer_exactly() -> None:
    flat, views = _flat((8, 16), (12, 8), (5, 32))
    pool, pairs = _pool_pairs(views)
    mirror, reason = Mirror.build(flat, pairs, sum(v.numel() for v in views))
    assert mirror is not None, reason
    assert not mirror.matches(flat)  # the slot is still empty: the check can fail
    for src, dst in pairs:
        dst.copy_(src)
    assert mirror.matches(flat)
    assert torch.equal(mirror.buf, flat)


def test_one_wrong_element_and_a_swapped_block_are_seen() -> None:
    flat, views = _flat((8, 16), (8, 16))
    pool, pairs = _pool_pairs(views)
    mirror, _ = Mirror.build(flat, pairs, sum(v.numel() for v in views))
    for src, dst in pairs:
        dst.copy_(src)
    assert mirror.matches(flat)
    pairs[1][1][3, 5] = pairs[1][1][3, 5] + 1  # one element off
    assert not mirror.matches(flat)
    pairs[0][1].copy_(pairs[1][0])  # the two tensors swapped: same multiset of bytes, other places
    pairs[1][1].copy_(pairs[0][0])
    assert not mirror.matches(flat)


def test_layouts_the_mirror_refuses_say_why() -> None:
    flat, views = _flat((8, 16), (8, 16))
    pool, pairs = _pool_pairs(views)
    total = sum(v.numel() for v in views)
    assert "cover" in Mirror.build(flat, pairs[:1], total)[1]  # a TP slice: part of the adapter
    cast = [(src, torch.zeros(src.shape, dtype=torch.float32)) for src, _ in pairs]
    assert "dtypes differ" in Mirror.build(flat, cast, total)[1]
    repeated = views[0][:1].expand(4, 16)  # one source row feeding four slot rows (replicated kv heads)
    assert "repeats" in Mirror.build(flat, [(repeated, pool[:4, :16]), pairs[1]], total)[1]
    twice = [pairs[0], (views[0], pool[8:16, :16])]
    assert "more than one" in Mirror.build(flat, twice, total)[1]
    outside = torch.zeros(8, 16, dtype=torch.bfloat16)
    assert "inside the flat buffer" in Mirror.build(flat, [(outside, pairs[0][1])], total)[1]


def test_zero_blocks_are_checked_to_hold_zero_bytes() -> None:
    """An adapter without k_proj: SGLang zeroes the k rows; the mirror covers the copied tensors and checks the zero
    rows separately (bit patterns: -0.0 is not clean)."""
    flat, views = _flat((8, 16))
    pool = torch.zeros(12, 16, dtype=torch.bfloat16)
    pairs = [(views[0], pool[:8]), (None, pool[8:12])]
    mirror, reason = Mirror.build(flat, pairs, views[0].numel())
    assert mirror is not None, reason
    pool[:8].copy_(views[0])
    assert mirror.matches(flat)
    pool[10, 3] = -0.0
    assert not mirror.matches(flat)
