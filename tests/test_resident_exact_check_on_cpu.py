"""The in-place write's check is exact: structured corruptions of the written slot each fail, on SGLang's real CPU
LoRA pool (the venv's SGLang), through the loader's entry point, read back whole (mirror) and block by block.

Each corruption is made after the loader's copy and before its check (``run_copies`` wrapped), as a bug in the plan,
a racing write or a lost copy would leave the slot: two sign flips, a (+d, -2d, +d) change of three bit patterns (both
invisible to a sum and a position-weighted sum of the words), two swapped rows, a stale slot (no copy at all) and a
half write.
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import sglang_or_skip
from verl_sglang_lora.runtime.resident import loader
from verl_sglang_lora.runtime.resident import protocol as P
from verl_sglang_lora.runtime.resident.execute import bits
from verl_sglang_lora.runtime.resident.protocol import ErrorCode


def _first_block(pairs):
    return next(dst for src, dst in pairs if src is not None and dst.dim() == 2 and dst.shape[0] >= 2)


def _sign_flips(pairs):
    d = _first_block(pairs)
    d[0, 0], d[1, 1] = -d[0, 0], -d[1, 1]


def _plus_minus(pairs):
    row = bits(_first_block(pairs))[0]  # a copy where the view is strided: write it back through the float view
    row[0:3] += torch.tensor([1, -2, 1], dtype=row.dtype)
    _first_block(pairs)[0].copy_(row.view(torch.bfloat16))


def _swap_rows(pairs):
    d = _first_block(pairs)
    d[[0, 1]] = d[[1, 0]].clone()


CORRUPTIONS = {
    "sign_flips": lambda pairs, copy: (copy(pairs), _sign_flips(pairs)),
    "plus_minus_2d_plus": lambda pairs, copy: (copy(pairs), _plus_minus(pairs)),
    "swapped_rows": lambda pairs, copy: (copy(pairs), _swap_rows(pairs)),
    "stale_slot": lambda pairs, copy: len(pairs),
    "half_write": lambda pairs, copy: copy(list(pairs)[: len(pairs) // 2]) * 0 + len(pairs),
}


@pytest.fixture(scope="module")
def attached():
    """A pinned slot holding version 1 (SGLang's own load), the trainer's flat buffer holding version 2."""
    sglang_or_skip("sglang.srt.lora.mem_pool")
    from tests import resident_selfcheck as selfcheck

    with selfcheck.release_scope(1, 0, 16, 3) as server_args:
        manager = selfcheck.build_manager(1, 0, 16, server_args)
        uid = selfcheck.load(manager, "verl_lora_slot0", selfcheck.peft_adapter(16, seed=1), 16, pinned=True)
        manager.fetch_new_loras({uid})
        flat, views = selfcheck.flat_copy(selfcheck.peft_adapter(16, seed=2))
        yield manager, flat, views


def _run(manager, flat, views, corruption, with_mirror: bool, monkeypatch) -> tuple[dict, str]:
    from tests import resident_selfcheck as selfcheck

    status, message = P.new_status(), P.new_message()
    reply = (P.new_status(), P.new_message())
    for k, v in selfcheck.peft_adapter(16, seed=2).items():  # the version the attach writes
        views[k].copy_(v)
    loader.apply(manager.base_model, P.request_tensors("attach", status, views, message, flat if with_mirror else None,
                                                       reply, slot="verl_lora_slot0", version=2, write=1, seq=1))
    assert P.read_status(status)["ok"], P.read_message(message)  # the clean write passes
    for k, v in selfcheck.peft_adapter(16, seed=3).items():  # the trainer's next version
        views[k].copy_(v)
    if corruption is not None:
        real = loader.run_copies
        monkeypatch.setattr(loader, "run_copies", lambda pairs: CORRUPTIONS[corruption](list(pairs), real))
    loader.apply(manager.base_model, P.request_tensors("write", torch.empty(0, dtype=torch.int64),
                                                       slot="verl_lora_slot0", version=3, seq=2))
    monkeypatch.undo()
    return P.read_status(reply[0]), P.read_message(reply[1])


@pytest.mark.parametrize("with_mirror", [True, False], ids=["mirror", "block_by_block"])
@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_each_structured_corruption_fails_the_write(attached, corruption, with_mirror, monkeypatch) -> None:
    manager, flat, views = attached
    result, message = _run(manager, flat, views, corruption, with_mirror, monkeypatch)
    assert result["seq"] == 2 and not result["ok"] and result["error"] == ErrorCode.MISMATCH, (result, message)
    assert "differ" in message


@pytest.mark.parametrize("with_mirror", [True, False], ids=["mirror", "block_by_block"])
def test_a_clean_write_passes_with_the_method_it_says(attached, with_mirror, monkeypatch) -> None:
    manager, flat, views = attached
    result, message = _run(manager, flat, views, None, with_mirror, monkeypatch)
    assert result["ok"] and result["seq"] == 2, message
    assert result["verified_by"] == (P.BY_MIRROR if with_mirror else P.BY_PAIRS)


def test_a_checksum_of_sums_would_not_see_these_corruptions() -> None:
    """Why no checksum: the sum and the position-weighted sum of the bit patterns are unchanged by (+d, -2d, +d) on
    three consecutive words, which the exact compare above catches."""
    words = torch.randint(-1000, 1000, (64,), dtype=torch.int64)
    bad = words.clone()
    bad[10:13] += torch.tensor([5, -10, 5])
    pos = torch.arange(1, 65)
    assert (bad.sum(), (bad * pos).sum()) == (words.sum(), (words * pos).sum()) and not torch.equal(bad, words)
