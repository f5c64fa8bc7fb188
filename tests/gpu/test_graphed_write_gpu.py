"""The in-place write as a real CUDA graph (runtime/resident/graphed_write.py), without SGLang.

The slot views are strided views into wider pool buffers, as SGLang's B buffers are, with one zero block. The
sources are views of one flat byte buffer, as the trainer's collect lays them out. The graph is captured after an
eager write. Every replay must then write the trainer's current bytes and answer their checksum. A first replay
whose answer differs from the eager write's is refused. The capture also holds while another thread keeps the
GPU busy and allocating, as SGLang's threads may.
"""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from tests.test_resident_mirror_on_cpu import _flat, _pool_pairs  # noqa: E402
from verl_sglang_lora.runtime.resident import graphed_write  # noqa: E402
from verl_sglang_lora.runtime.resident.execute import run_copies  # noqa: E402
from verl_sglang_lora.runtime.resident.mirror import Mirror, flat_checksum  # noqa: E402

pytestmark = pytest.mark.gpu
SHAPES = [(32, 64), (64, 32), (8, 1024), (1024, 8)] * 24 + [(5, 300)]  # 97 pairs, odd sizes in the padding


def _slot():
    flat, views = _flat(*SHAPES, device="cuda")
    pool, pairs = _pool_pairs(views, width=1024)
    zero = torch.zeros(16, 64, dtype=torch.bfloat16, device="cuda")
    pairs.append((None, zero))
    mirror, reason = Mirror.build(flat, pairs, sum(v.numel() for v in views))
    assert mirror is not None, reason
    run_copies(pairs)
    eager = (mirror.checksum(), mirror.zero_blocks_clean())
    assert eager == (flat_checksum(flat), True)
    return flat, views, pairs, mirror, eager


def test_replays_write_each_new_version_byte_exact() -> None:
    flat, views, pairs, mirror, eager = _slot()
    graphed, why = graphed_write.capture(pairs, mirror, eager)
    assert graphed is not None, why
    gen = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(3):  # the trainer's next versions, written into the same buffer
        for v in views:
            v.copy_(torch.randn(v.shape, generator=gen, device="cuda", dtype=torch.float32))
        pairs[-1][1].fill_(1.0)  # dirt in the zero block: the replay zeroes it again
        dst, clean = graphed.run()
        assert dst == flat_checksum(flat) and clean
        assert all(torch.equal(d, s) for s, d in pairs if s is not None)
        assert not bool(pairs[-1][1].ne(0).any())


def test_a_first_replay_that_differs_is_refused() -> None:
    _, _, pairs, mirror, eager = _slot()
    (s0, s1), clean = eager
    graphed, why = graphed_write.capture(pairs, mirror, ((s0 + 1, s1), clean))
    assert graphed is None and "not byte-exact" in why


def test_capture_holds_while_another_thread_computes() -> None:
    flat, views, pairs, mirror, eager = _slot()
    stop = threading.Event()

    def busy() -> None:  # its own stream, allocating as it goes
        with torch.cuda.stream(torch.cuda.Stream()):
            while not stop.is_set():
                x = torch.randn(512, 512, device="cuda")
                (x @ x).sum().item()

    worker = threading.Thread(target=busy)
    worker.start()
    try:
        graphed, why = graphed_write.capture(pairs, mirror, eager)
    finally:
        stop.set()
        worker.join()
    assert graphed is not None, why
    views[0].add_(1)
    assert graphed.run() == (flat_checksum(flat), True)
