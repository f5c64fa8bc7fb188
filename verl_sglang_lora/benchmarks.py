"""``python -m verl_sglang_lora.benchmarks``: the adapter-sync matrix on one GPU (``tools/sync_matrix.py``).

    python -m verl_sglang_lora.benchmarks --shape qwen3-0.6b --shape qwen3-8b --rank 8 --rank 32 --rank 128 \\
        --iters 30 --json matrix.json [--engine-arg attention_backend=triton ...]

``--http`` runs the older HTTP benchmark instead (``tools/benchmarks.py``: versioned / disk / verl-stock paths against a
``launch_server`` subprocess, plus base-weight sync throughput).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def engine_args(pairs: list[str], cuda_graph: bool) -> dict[str, Any]:
    """``key=value`` pairs as ``sglang.Engine`` keyword arguments (ints and booleans parsed)."""
    out: dict[str, Any] = {"disable_cuda_graph": not cuda_graph}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--engine-arg {pair!r}: expected key=value, e.g. attention_backend=triton")
        lowered = value.lower()
        out[key.replace("-", "_")] = int(value) if value.lstrip("-").isdigit() else \
            (lowered == "true") if lowered in ("true", "false") else value
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    from verl_sglang_lora.tools.benchmarks import DENSE_SHAPES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append", choices=DENSE_SHAPES, help="repeatable; default qwen3-0.6b")
    p.add_argument("--rank", action="append", type=int, help="repeatable; default 8, 32, 128")
    p.add_argument("--iters", type=int, default=30, help="timed iterations per path (after --warmup)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--settle-ms", type=float, default=0.0,
                   help="idle gap before each path's sync (a run syncs after a training step, not after a request)")
    p.add_argument("--mem-fraction", type=float, default=0.5)
    p.add_argument("--no-cuda-graph", action="store_true", help="CUDA graphs are on by default, as in a rollout")
    p.add_argument("--engine-arg", action="append", default=[], help="key=value for sglang.Engine (repeatable)")
    p.add_argument("--json", type=Path, help="write the rows (shape, rank, path, p50_ms, ..., correct) here")
    p.add_argument("--http", action="store_true", help="the older HTTP benchmark (tools/benchmarks.py)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--http" in argv:
        from verl_sglang_lora.tools.benchmarks import main as http_main

        return http_main([a for a in argv if a != "--http"])
    args = parse(argv)
    from verl_sglang_lora.install_advice import require_sglang
    from verl_sglang_lora.tools.sync_matrix import main as matrix_main

    require_sglang("python -m verl_sglang_lora.benchmarks")  # before a checkpoint is written for an engine

    return matrix_main(args.shape or ["qwen3-0.6b"], sorted(set(args.rank or [8, 32, 128])), args.iters,
                       args.warmup, args.mem_fraction, args.json, engine_args(args.engine_arg, not args.no_cuda_graph),
                       args.settle_ms)


if __name__ == "__main__":
    raise SystemExit(main())
