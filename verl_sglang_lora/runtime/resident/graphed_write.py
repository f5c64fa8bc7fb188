"""The in-place write as one CUDA graph. It holds the slot copies, the read-back through the mirror, and the checksum
and zero-block check. It is captured once per attached slot and replayed on every later write.

Eager, a 0.6B r32 write launches about 800 small kernels from the scheduler's Python thread: 392 copies, 392
read-backs, and a dozen for the checksum. On the H200 that was 1.0-1.5 ms of the loader's time (docs/benchmarks.md),
against 0.05 ms for the bytes themselves. A replay launches them all at once.

It is captured at the first eager write of an attached slot that has a mirror. The sources are the trainer's flat
buffer, mapped once, so their addresses do not change. Right after capture the graph is replayed once. It is kept
only if that replay's answer equals the eager write's: the slot's checksum and the zero-block check. Otherwise the
slot keeps the eager write, and the reply and the log say why. The replay writes into the slot, which is idle. A
refused replay may have written wrong bytes there, so the loader then writes and verifies the slot eagerly again
before it answers.

The graph is captured with ``capture_begin``/``capture_end`` on a side stream, in ``thread_local`` mode. That mode
lets SGLang's other threads keep using CUDA during capture. Using those two calls, rather than ``torch.cuda.graph``,
also skips that context's device-wide sync and ``empty_cache()``, which would drop SGLang's cached blocks. The graph's
temporaries live in its own memory pool: a few KiB for the checksum's row and column sums.

``VERL_SGLANG_LORA_GRAPHED_WRITE=0`` keeps every write eager. A loader ``ping graphed=0|1`` switches between the two
for the requests after it (the benchmark's side-by-side row).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from .execute import run_copies
from .mirror import Mirror
from .plan import CopyPair

logger = logging.getLogger(__name__)

ENV = "VERL_SGLANG_LORA_GRAPHED_WRITE"
NOT_CUDA = "the slot is not on a CUDA device"  # declined before anything ran
_enabled = os.environ.get(ENV, "1") != "0"


def enabled() -> bool:
    return _enabled


def select(on: bool) -> str:
    """The loader's ``ping graphed=0|1``: graphed or eager writes for the requests after it (this process); what is in
    force. The environment's opt-out stands: ``graphed=1`` does not undo it."""
    global _enabled
    if on and os.environ.get(ENV, "1") == "0":
        return f"eager ({ENV}=0)"
    _enabled = on
    return "graphed" if on else "eager"


def _body(pairs: Sequence[CopyPair], mirror: Mirror) -> torch.Tensor:
    """The write and its verification, with no host sync: int64[3] = (slot checksum, zero-block dirt)."""
    run_copies(pairs)
    return torch.cat([mirror.checksum_tensor(), mirror.zero_dirt_tensor().to(torch.int64).view(1)])


@dataclass
class GraphedWrite:
    graph: Any  # torch.cuda.CUDAGraph
    answer: torch.Tensor  # int64[3] in the graph's pool, rewritten by every replay

    def run(self) -> tuple[tuple[int, int], bool]:
        """Replay: the slot's checksum and whether its zero blocks are clean (one host sync)."""
        self.graph.replay()
        s0, s1, dirt = self.answer.tolist()
        return (int(s0), int(s1)), not dirt


def capture(pairs: Sequence[CopyPair], mirror: Mirror,
            eager: tuple[tuple[int, int], bool]) -> tuple[Optional[GraphedWrite], str]:
    """The graph of this slot's write, or (None, why not). ``eager``: the answer of the eager write that just ran
    with the same sources (checksum, zero blocks clean), which the first replay must reproduce."""
    if not pairs or not pairs[0][1].is_cuda:
        return None, NOT_CUDA
    device = pairs[0][1].device
    try:
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))  # the eager write's kernels come first
        with torch.cuda.stream(stream):
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                answer = _body(pairs, mirror)
            finally:
                graph.capture_end()
        torch.cuda.current_stream(device).wait_stream(stream)
        graphed = GraphedWrite(graph, answer)
        replay = graphed.run()
    except Exception as exc:  # noqa: BLE001 - any capture failure leaves the eager write, said once per slot
        return None, f"capture failed: {type(exc).__name__}: {exc}"
    if replay != eager:
        return None, f"the graph's first replay answered {replay}, the eager write {eager}: not byte-exact"
    return graphed, ""
