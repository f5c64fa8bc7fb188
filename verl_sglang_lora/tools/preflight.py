"""The examples' checks: stop within seconds, with one clear message, where a run cannot start.

    python -m verl_sglang_lora.tools.preflight [--gpus N] [--gpu-only | --packages-only]
                                               [--constraints FILE] [--megatron [--attn-backend B]]

Two parts, which the examples run at different times:
- GPU (``--gpu-only``, the examples' very first step, before any environment is built): the NVIDIA driver answers
  (``nvidia-smi -L``) with N devices, and, where the interpreter has torch, torch can use them.
- packages (``--packages-only``, in the environment the run will use): the packages of the README's Install
  recipe import; with ``--constraints`` every pin of that tested set is installed at its version; with
  ``--megatron`` the Megatron stack (not part of any tested set) too.
With neither flag both run. Exit code 0 when the run can start, 2 otherwise. ``verl-sglang-lora doctor`` checks the
config itself (no GPU needed).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import NamedTuple

INSTALL = "README.md, Install"
CPU_HINT = ("The example trains and serves on GPUs; on this machine run the CPU checks instead: "
            "`verl-sglang-lora doctor` (config) and `bash scripts/run_cpu_tests.sh` (tests).")
# module -> what to install (verl 0.9.1's v1 trainer imports transfer_queue; the README's recipe installs it)
MODULES = {"verl": "verl==0.9.1", "sglang": "SGLang (see the recipe)", "ray": "ray", "transfer_queue": "TransferQueue"}
NO_DEPS_MARK = "# --no-deps"  # written by constraints/generate.py
NVIDIA_SMI_TIMEOUT_S = 15.0  # a wedged driver makes nvidia-smi hang; the check must not
MEGATRON_DOC = "docs/megatron_gpu.md"


class Pin(NamedTuple):
    name: str
    version: str
    no_deps: bool


def tested_set(constraints: Path) -> list[Pin]:
    """The pins of a constraints/verl*-sglang*.txt file (``name==version``, SGLang's own marked ``# --no-deps``)."""
    pins = []
    for raw in Path(constraints).read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if "==" in line:
            name, version = (part.strip() for part in line.split("==", 1))
            pins.append(Pin(name, version, NO_DEPS_MARK in raw))
    return pins


def _installed(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _env_note() -> str:
    # an env made by the examples' set-up (gpu_env) says how to rebuild it rather than how to install by hand
    from verl_sglang_lora.tools.gpu_env import STAMP

    if (Path(sys.prefix) / STAMP).exists():
        return f" ({sys.prefix} was made by the examples' set-up: VSL_REBUILD=1 rebuilds it)"
    return ""


def version_mismatches(pins: list[Pin]) -> list[str]:
    """'name have (tested want)' for every pin not installed at its version (the local label, +cu130, ignored)."""
    out = []
    for pin in pins:
        have = _installed(pin.name)
        if have is None:
            out.append(f"{pin.name} missing (tested {pin.version})")
        elif have.split("+", 1)[0] != pin.version:
            out.append(f"{pin.name} {have} (tested {pin.version})")
    return out


def package_problems(constraints: Path | None = None) -> list[str]:
    found = []
    missing = [f"{mod} ({what})" for mod, what in MODULES.items() if importlib.util.find_spec(mod) is None]
    if missing:
        found.append(f"not installed in {sys.executable}: {', '.join(missing)}. Fix: the install recipe in "
                     f"{INSTALL}{_env_note()}.")
    if constraints is not None:
        off = version_mismatches(tested_set(constraints))
        if off:
            shown = ", ".join(off[:8]) + (f", ... ({len(off) - 8} more)" if len(off) > 8 else "")
            found.append(f"{sys.executable} does not have the tested set of {Path(constraints).name}: {shown}. Fix: "
                         f"pip install '.[gpu]' -c {constraints} plus its --no-deps lines ({INSTALL}){_env_note()}.")
    return found


def megatron_problems(attn_backend: str = "flash") -> list[str]:
    """The Megatron stack verl 0.9.1's Megatron LoRA path imports (Megatron-Bridge -> TransformerEngine's torch
    extension); no constraints file pins it, so nothing installs it for the example."""
    def present(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            return False

    needed = {"megatron.core": "megatron-core", "megatron.bridge": "megatron-bridge",
              "transformer_engine": "transformer-engine"}
    missing = [pkg for module, pkg in needed.items() if not present(module)]
    # TE's torch extension is no top-level module: only its distribution says it is there
    if _installed("transformer_engine_torch") is None:
        missing.append("transformer-engine-torch")
    found = []
    if missing:
        found.append(f"the Megatron stack is not installed in {sys.executable}: {', '.join(missing)} (not part of the "
                     "tested set, so the set-up does not install it). Fix: pip install megatron-core megatron-bridge "
                     "'transformer-engine[pytorch]' into that python (TE's torch extension compiles against its torch: "
                     f"CUDA headers, ~2 min on 16 cores; offline: {MEGATRON_DOC}).")
    if attn_backend == "flash" and not present("flash_attn"):
        found.append("ATTN_BACKEND=flash (verl's default) needs the flash-attn package, not installed. Fix: "
                     f"ATTN_BACKEND=unfused (what the H200 run used, {MEGATRON_DOC}) or pip install flash-attn.")
    return found


def driver_problem(gpus: int) -> str | None:
    """The NVIDIA driver, asked without importing anything heavy: absent, failing, hung, or too few devices."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return f"no usable CUDA GPU: no NVIDIA driver here (nvidia-smi not found). {CPU_HINT}"
    try:
        proc = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return (f"no usable CUDA GPU: nvidia-smi did not answer within {NVIDIA_SMI_TIMEOUT_S:.0f} s (a hung driver). "
                "Fix: check the driver (dmesg, nvidia-smi) or use another machine.")
    except OSError as exc:
        return f"no usable CUDA GPU: nvidia-smi cannot run ({exc}). {CPU_HINT}"
    text = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        first = text.splitlines()[0] if text else f"exit code {proc.returncode}"
        return f"no usable CUDA GPU: nvidia-smi fails: {first}. Fix: load / reinstall the NVIDIA driver, or {CPU_HINT}"
    count = sum(1 for line in text.splitlines() if line.startswith("GPU "))
    if count == 0:
        return f"no usable CUDA GPU: nvidia-smi lists no device. {CPU_HINT}"
    if count < gpus:
        return f"NGPUS={gpus} but this machine has {count} GPU(s) (nvidia-smi -L). Fix: NGPUS={count}."
    return None


def torch_problem(gpus: int) -> str | None:
    """torch in this interpreter can use the GPUs (skipped where it has no torch: the set-up brings one)."""
    if importlib.util.find_spec("torch") is None:
        return None
    with warnings.catch_warnings(record=True) as caught:  # CUDA init failures come as warnings: fold them in
        warnings.simplefilter("always")
        try:
            import torch

            usable = torch.cuda.is_available()
            count = torch.cuda.device_count() if usable else 0
        except Exception as exc:  # a broken install: say so, no traceback
            return f"torch in {sys.executable} fails to import: {type(exc).__name__}: {exc}. Fix: reinstall torch."
    if not usable:
        why = "; ".join(str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip())
        build = torch.version.cuda or "none: a CPU-only build"
        return (f"no usable CUDA GPU: the driver lists GPUs but torch {torch.__version__} in {sys.executable} "
                f"(CUDA build: {build}) cannot use them{f' ({why})' if why else ''}. Fix: a CUDA build of torch that "
                "this driver supports "
                "(tested: 2.11.0+cu130), or check CUDA_VISIBLE_DEVICES.")
    if count < gpus:
        return (f"NGPUS={gpus} but torch sees {count} GPU(s). Fix: NGPUS={count} or make the GPUs visible "
                "(CUDA_VISIBLE_DEVICES).")
    return None


def gpu_problems(gpus: int) -> list[str]:
    # the driver first: on a machine without one this answers in milliseconds, before torch is imported
    problem = driver_problem(gpus) or torch_problem(gpus)
    return [problem] if problem else []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=1)
    only = p.add_mutually_exclusive_group()
    only.add_argument("--gpu-only", action="store_true", help="the driver and torch's view of the GPUs only")
    only.add_argument("--packages-only", action="store_true", help="the packages only (no GPU needed)")
    p.add_argument("--constraints", help="also require every pin of this tested set ('auto': the one the examples' "
                   "set-up installs, VSL_CONSTRAINTS or constraints/verl*-sglang*.txt)")
    p.add_argument("--megatron", action="store_true", help="also require the Megatron stack")
    p.add_argument("--attn-backend", default="flash", help="the Megatron example's ATTN_BACKEND")
    args = p.parse_args(argv)
    if args.constraints == "auto":
        from verl_sglang_lora.tools.gpu_env import SetupError, default_constraints

        try:
            args.constraints = os.environ.get("VSL_CONSTRAINTS") or default_constraints()
        except SetupError as exc:
            print(f"verl-sglang-lora preflight: {exc}", file=sys.stderr)
            return 2
    if args.constraints is not None:
        args.constraints = Path(args.constraints)
    # the GPU first, as in the examples: without one, what is installed does not matter
    found = [] if args.packages_only else gpu_problems(args.gpus)
    if not args.gpu_only and not found:
        found += package_problems(args.constraints)
        if args.megatron:
            found += megatron_problems(args.attn_backend)
    for line in found:
        print(f"verl-sglang-lora preflight: {line}", file=sys.stderr)
    return 2 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
