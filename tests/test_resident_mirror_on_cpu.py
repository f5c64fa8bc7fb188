"""The mirror that verifies an in-place write against the trainer's checksum: it rebuilds the trainer's flat buffer
from the slot exactly, sees a single wrong element or a moved block, and refuses the layouts where a rebuild would
be ambiguous or partial (each with its reason)."""

from __future__ import annotations

import pytest
import torch

from verl_sglang_lora.runtime.resident.mirror import Mirror, flat_checksum


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
    trainer = flat_checksum(flat)
    assert mirror.checksum() != trainer  # the slot is still empty: the check can fail
    for src, dst in pairs:
        dst.copy_(src)
    assert mirror.checksum() == trainer
    assert torch.equal(mirror.buf, flat)


def test_one_wrong_element_and_a_swapped_block_are_seen() -> None:
    flat, views = _flat((8, 16), (8, 16))
    pool, pairs = _pool_pairs(views)
    mirror, _ = Mirror.build(flat, pairs, sum(v.numel() for v in views))
    trainer = flat_checksum(flat)
    for src, dst in pairs:
        dst.copy_(src)
    pairs[1][1][3, 5] = pairs[1][1][3, 5] + 1  # one element off
    assert mirror.checksum() != trainer
    pairs[0][1].copy_(pairs[1][0])  # the two tensors swapped: same multiset of bytes, other places
    pairs[1][1].copy_(pairs[0][0])
    assert mirror.checksum()[0] == trainer[0] and mirror.checksum() != trainer  # the weighted sum sees the move


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


def test_flat_checksum_is_order_sensitive_and_covers_the_tail() -> None:
    buf = torch.arange(19, dtype=torch.uint8)  # 2 int64 words + 3 tail bytes
    s = flat_checksum(buf)
    tail_changed = buf.clone()
    tail_changed[-1] += 1
    assert flat_checksum(tail_changed) != s
    swapped = torch.cat([buf[8:16], buf[:8], buf[16:]])
    assert flat_checksum(swapped)[0] == s[0] and flat_checksum(swapped) != s


def test_zero_blocks_are_checked_to_hold_zero_bytes() -> None:
    """An adapter without k_proj: SGLang zeroes the k rows; the mirror covers the copied tensors and checks the zero
    rows separately (bit patterns: -0.0 is not clean)."""
    flat, views = _flat((8, 16))
    pool = torch.zeros(12, 16, dtype=torch.bfloat16)
    pairs = [(views[0], pool[:8]), (None, pool[8:12])]
    mirror, reason = Mirror.build(flat, pairs, views[0].numel())
    assert mirror is not None, reason
    pool[:8].copy_(views[0])
    assert mirror.checksum() == flat_checksum(flat) and mirror.zero_blocks_clean()
    pool[10, 3] = -0.0
    assert not mirror.zero_blocks_clean()


def _reference_checksum(data: bytes) -> tuple[int, int]:
    """The definition, in Python integers: int64 words (little-endian), then the tail's bytes, positions from 1,
    both sums wrapped to int64."""
    n = len(data) // 8
    values = [int.from_bytes(data[8 * i:8 * i + 8], "little", signed=True) for i in range(n)] + list(data[8 * n:])
    wrap = lambda x: (x + 2**63) % 2**64 - 2**63  # noqa: E731
    return wrap(sum(values)), wrap(sum(i * v for i, v in enumerate(values, 1)))


@pytest.mark.parametrize("size", [0, 5, 8, 8 * 4096, 8 * 4096 * 3 + 8 * 17 + 3, 8 * 4095 + 7])
def test_flat_checksum_equals_its_definition_across_row_boundaries_and_wraparound(size) -> None:
    """The two-reduction form (row and column sums) against the plain definition, on random bytes whose words are
    large enough that every sum wraps past 2**63."""
    gen = torch.Generator().manual_seed(size)
    buf = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=gen)
    assert flat_checksum(buf) == _reference_checksum(bytes(buf.tolist()))
