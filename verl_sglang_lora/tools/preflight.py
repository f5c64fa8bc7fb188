"""The examples' first step: stop within seconds, with one clear message, where a run cannot start.

    python -m verl_sglang_lora.tools.preflight [--gpus N]

Checks what a GRPO run needs before verl starts Ray and SGLang (which otherwise hang or fail minutes later with a
traceback): a CUDA GPU visible to torch (N of them), and the packages of the README's Install recipe. Exit code 0
when the run can start, 2 otherwise. ``verl-sglang-lora doctor`` checks the config itself (no GPU needed).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

INSTALL = "README.md, Install"
# module -> what to install (verl 0.9.1's v1 trainer imports transfer_queue; the README's recipe installs it)
MODULES = {"verl": "verl==0.9.1", "sglang": "SGLang (see the recipe)", "ray": "ray", "transfer_queue": "TransferQueue"}


def problems(gpus: int) -> list[str]:
    found = []
    missing = [f"{mod} ({what})" for mod, what in MODULES.items() if importlib.util.find_spec(mod) is None]
    if missing:
        found.append(f"not installed: {', '.join(missing)}. Fix: the install recipe in {INSTALL}.")
    try:
        import torch
    except ImportError:
        return found + [f"torch is not installed. Fix: {INSTALL}."]
    if not torch.cuda.is_available():
        found.append(f"no usable CUDA GPU: torch {torch.__version__} (CUDA build: {torch.version.cuda or 'none'}) sees "
                     "none. The example trains and serves on GPUs; on this machine run the CPU checks instead: "
                     "`verl-sglang-lora doctor` (config) and `bash scripts/run_cpu_tests.sh` (tests).")
    elif torch.cuda.device_count() < gpus:
        found.append(f"NGPUS={gpus} but torch sees {torch.cuda.device_count()} GPU(s). Fix: NGPUS="
                     f"{torch.cuda.device_count()} or make the GPUs visible (CUDA_VISIBLE_DEVICES).")
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=1)
    args = p.parse_args(argv)
    found = problems(args.gpus)
    for line in found:
        print(f"verl-sglang-lora preflight: {line}", file=sys.stderr)
    return 2 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
