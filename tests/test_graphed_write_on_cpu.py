"""The loader's side of the graphed in-place write (runtime/resident/graphed_write.py), on CPU.

A CUDA graph cannot be captured here. tests/gpu/test_graphed_write_gpu.py captures and replays a real one. These
tests cover the rest:
- on CPU, capture declines and says why;
- the loader trusts a graph's answer only as far as the eager path's: the trainer's checksum must match and the
  zero blocks must be clean. The graph here is a stand-in that replays the same body eagerly;
- the ping switch turns the graph off and back on, and refuses a bad value.
"""

from __future__ import annotations

import pytest
import torch

from tests.test_resident_mirror_on_cpu import _flat, _pool_pairs
from verl_sglang_lora.runtime.resident import graphed_write, loader
from verl_sglang_lora.runtime.resident import protocol as P
from verl_sglang_lora.runtime.resident.access import ResidentError
from verl_sglang_lora.runtime.resident.mirror import Mirror, flat_checksum


class EagerReplay:
    """Stands in for ``torch.cuda.CUDAGraph``: each replay runs the captured body again, eagerly, into the same
    answer tensor, as a graph replay writes its output buffer."""

    def __init__(self, pairs, mirror) -> None:
        self.pairs, self.mirror = pairs, mirror
        self.answer = graphed_write._body(pairs, mirror)
        self.replays = 0

    def replay(self) -> None:
        self.answer.copy_(graphed_write._body(self.pairs, self.mirror))
        self.replays += 1


def _state(with_zero_block: bool = False):
    flat, views = _flat((8, 16), (12, 8), (5, 32))
    pool, pairs = _pool_pairs(views)
    total = sum(v.numel() for v in views)
    if with_zero_block:
        pairs.append((None, torch.zeros(4, 16, dtype=torch.bfloat16)))
    mirror, reason = Mirror.build(flat, pairs, total)
    assert mirror is not None, reason
    state = loader.SlotState("slot", 0, None, pairs, mirror=mirror, flat=flat)  # type: ignore[arg-type]
    return flat, views, pairs, state


def test_capture_declines_off_cuda_and_the_eager_write_stands() -> None:
    flat, _, pairs, state = _state()
    out = loader._copy(pairs, True, state, flat_checksum(flat))
    assert out[P.VERIFIED_BY] == P.BY_TRAINER_SUM and P.GRAPHED not in out
    assert state.graphed is None and state.graph_reason == "the slot is not on a CUDA device"
    assert "writes eager: the slot is not on a CUDA device" in loader._write_mode(state)


def test_a_refused_graph_leaves_no_byte_of_its_replay(monkeypatch) -> None:
    """A capture whose first replay wrote other bytes and was refused: the loader writes and verifies the slot again
    before its reply says verified, and the write's reply says why the writes stay eager."""
    flat, views, pairs, state = _state()

    def refused(pairs, mirror, eager):
        for _, dst in pairs:  # what a wrong graph's replay could leave behind
            dst.fill_(7.0)
        return None, "the graph's first replay answered (1, 2), the eager write (3, 4): not byte-exact"

    monkeypatch.setattr(graphed_write, "capture", refused)
    out = loader._copy(pairs, True, state, flat_checksum(flat))
    assert all(torch.equal(dst, src) for src, dst in pairs)
    assert (out[P.DST0], out[P.DST1]) == flat_checksum(flat) and P.GRAPHED not in out
    assert state.graph_news and "writes eager: the graph's first replay" in loader._write_mode(state)
    assert not state.graph_news  # said once


def test_a_graph_answer_is_checked_as_the_eager_one() -> None:
    flat, views, pairs, state = _state(with_zero_block=True)
    stand_in = EagerReplay(pairs, state.mirror)
    state.graphed = graphed_write.GraphedWrite(stand_in, stand_in.answer)
    state.graph_reason = loader.GRAPHED
    for v in views:  # a new version in the trainer's buffer
        v.add_(1)
    out = loader._copy(pairs, True, state, flat_checksum(flat))
    assert out[P.GRAPHED] == 1 and stand_in.replays == 1
    assert (out[P.DST0], out[P.DST1]) == flat_checksum(flat)
    assert all(torch.equal(dst, src) for src, dst in pairs if src is not None)
    with pytest.raises(ResidentError) as err:  # the trainer sent another checksum: the graph's answer is refused
        loader._copy(pairs, True, state, (1, 2))
    assert err.value.code == 12
    pairs[-1][1][0, 0] = -0.0  # a zero block the replay re-zeroes: still clean after it
    loader._copy(pairs, True, state, flat_checksum(flat))
    assert not bool(pairs[-1][1].view(torch.int16).ne(0).any())


def test_the_switch_keeps_writes_eager_and_back() -> None:
    flat, _, pairs, state = _state()
    stand_in = EagerReplay(pairs, state.mirror)
    state.graphed = graphed_write.GraphedWrite(stand_in, stand_in.answer)
    state.graph_reason = loader.GRAPHED

    def ping(**fields: str) -> str:
        return loader.handle(None, P.Request("ping", fields, None, None, {}))[1]

    try:
        assert ping(graphed="0") == "pong; in-place writes: eager"
        out = loader._copy(pairs, True, state, flat_checksum(flat))
        assert P.GRAPHED not in out and stand_in.replays == 0 and out[P.VERIFY_NS] > 0
        assert "switched off" in loader._write_mode(state)
        assert ping(graphed="1") == "pong; in-place writes: graphed"
        assert loader._copy(pairs, True, state, flat_checksum(flat))[P.GRAPHED] == 1
        with pytest.raises(ResidentError) as err:
            ping(graphed="yes")
        assert err.value.code == 1 and "graphed='yes'" in str(err.value)
    finally:
        graphed_write.select(True)
