"""Dependency lists for pyproject.toml (which holds all other metadata), computed so that no version is written twice.

- `dependencies`: the verl range from verl_sglang_lora/releases.json (the releases the plugin is checked against).
- `gpu` extra: the default tested GPU pair, pinned: the constraints/verl<V>-sglang<S>.txt that says `# extra: gpu`
  (SGLang 0.5.12, verl 0.9.1's own pin; constraints/generate.py makes it from the offline bundle's lock), minus the
  packages marked `--no-deps` (SGLang itself and its kernels: SGLang 0.5.12 pins transformers==5.6.0, which verl
  0.9.1 excludes, so no resolver can install it beside verl; README, Install, installs them with
  `pip install --no-deps -c <that file>`). Another tested pair (SGLang 0.5.23) has no extra: this package's own
  requirement on verl would bring verl's transformers range back into the resolve; its requirements file
  (constraints/requires/) serves instead. There is no extra that pulls SGLang by itself: it would let the resolver
  pick an untested verl x SGLang pair without a word.
"""

from __future__ import annotations

import json
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
RELEASES = json.loads((HERE / "verl_sglang_lora" / "releases.json").read_text(encoding="utf-8"))
NO_DEPS_MARK = "# --no-deps"  # written by constraints/generate.py


def verl_range() -> str:
    """From the oldest checked verl up to (not including) the next minor after the newest."""
    major, minor = (int(x) for x in RELEASES["verl"][-1].split(".")[:2])
    return f"verl>={RELEASES['verl'][0]},<{major}.{minor + 1}"


EXTRA_MARK = "# extra:"  # written by constraints/generate.py into the default pair's file


def tested_gpu_set() -> list[str]:
    """The pins of the default pair's constraints file (``# extra: gpu``), without its --no-deps packages."""
    files = [f for f in sorted((HERE / "constraints").glob("verl*-sglang*.txt"))
             if f"{EXTRA_MARK} gpu" in f.read_text(encoding="utf-8").splitlines()]
    if len(files) != 1:
        raise SystemExit(f"setup.py: expected one constraints/verl*-sglang*.txt with '{EXTRA_MARK} gpu', found "
                         f"{[f.name for f in files]}")
    pins = []
    for raw in files[0].read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and NO_DEPS_MARK not in line:
            pins.append(line)
    return pins


setup(
    install_requires=[verl_range(), "torch", "aiohttp", "hydra-core>=1.3"],
    extras_require={
        "test": ["pytest>=8", "pytest-asyncio", "pytest-xdist", "peft", "ray[default]>=2.41", "msgspec", "pydantic>=2"],
        "gpu": tested_gpu_set(),
        "fsdp": ["peft"],
        # not pinned by the constraints: the lock the GPU runs use has no Megatron stack (docs/megatron_gpu.md)
        "megatron": ["megatron-core", "peft"],
    },
)
