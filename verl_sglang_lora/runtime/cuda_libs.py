"""Whether the CUDA libraries torch loads are the ones it was built for (``verl-sglang-lora doctor``'s cuDNN row; the
weight-sync client says it once per worker).

A torch wheel pins its cuDNN (``nvidia-cudnn-cu*``); a host or bundle that brings an older one lets SGLang serve but
fails the trainer: on the H200, torch 2.14.1 (cuDNN 9.24) over the host's 9.19 stopped the FSDP actor's first
``loss.backward()`` (SDPA) with ``cuDNN Frontend error ... CUDNN_STATUS_BAD_PARAM``. torch's own check
(``torch.backends.cudnn.version()``) says so before any GPU memory is allocated.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import re
from pathlib import Path

logger = logging.getLogger(__name__)


def cudnn_state() -> tuple[str, str]:
    """("absent", "") on a torch without cuDNN (CPU), ("ok", version) where torch's own check passes, else
    ("mismatch", torch's error)."""
    import torch

    if not torch.backends.cudnn.is_available():
        return "absent", ""
    try:
        return "ok", str(torch.backends.cudnn.version())
    except RuntimeError as exc:
        return "mismatch", str(exc).strip().splitlines()[0]


def cudnn_pin(requires: list[str]) -> str | None:
    """The ``nvidia-cudnn-cu*==V`` pin among a distribution's requirement strings."""
    for req in requires:
        m = re.match(r"\s*(nvidia-cudnn-cu\d+)\s*==\s*([\w.]+)", req)
        if m:
            return f"{m.group(1)}=={m.group(2)}"
    return None


def torch_cudnn_pin() -> str | None:
    """The cuDNN torch's installed metadata pins (None for a CPU wheel, which pins none)."""
    try:
        return cudnn_pin(importlib.metadata.requires("torch") or [])
    except importlib.metadata.PackageNotFoundError:
        return None


def loaded_libraries(prefix: str, maps: str | None = None) -> list[str]:
    """The shared objects whose file name starts with ``prefix`` mapped into this process, in first-seen order
    (``maps``: the text of /proc/self/maps, read where not given; [] where there is none)."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            return []
    found: list[str] = []
    for line in maps.splitlines():
        fields = line.split(None, 5)
        path = fields[5].strip() if len(fields) == 6 else ""
        if os.path.basename(path).startswith(prefix) and path not in found:
            found.append(path)
    return found


def pinned_cudnn_dir(pin: str) -> str | None:
    """The library folder of the installed cuDNN wheel ``name==version`` where exactly that version is installed."""
    name, _, version = pin.partition("==")
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != version:
        return None
    for f in dist.files or []:
        if f.name.startswith("libcudnn.so"):
            return str(Path(str(dist.locate_file(f))).resolve().parent)
    return None


def cudnn_fix(maps: str | None = None, install_hint: str = "") -> str:
    """What to do about a mismatch. Where torch's pinned cuDNN is installed, a mismatch means another copy was loaded
    first (TransformerEngine opens one from CUDNN_HOME, CUDA_HOME or /usr/local/cuda, and from the interpreter's own
    site-packages when it finds no CUDA toolkit): name the files loaded from elsewhere rather than advise an install.
    ``install_hint`` follows the install advice only (where to get the wheel)."""
    pin = torch_cudnn_pin()
    lib_dir = pinned_cudnn_dir(pin) if pin else None
    if lib_dir is None:
        return (f"install the cuDNN torch was built with: pip install {pin or 'the nvidia-cudnn wheel torch pins'}"
                f"{install_hint}")
    others = [f for f in loaded_libraries("libcudnn", maps) if str(Path(f).resolve().parent) != lib_dir]
    where = f"this process also loaded {', '.join(others)}" if others else "another cuDNN was loaded"
    return (f"torch's pinned {pin} is installed ({lib_dir}), but {where}: a library opened that copy first; "
            f"put the pinned one first (export CUDNN_HOME={Path(lib_dir).parent}) or take the other off the search path")


def warn_if_cudnn_mismatch() -> None:
    """One error line in the trainer's worker, at start-up rather than at the first backward minutes later; not a
    refusal: an attention path without cuDNN (flash-attn) may train regardless."""
    state, text = cudnn_state()
    if state == "mismatch":
        logger.error("sglang_lora: %s -- the trainer's SDPA backward is expected to fail ('cuDNN Frontend error'); "
                     "%s (verl-sglang-lora doctor checks it)", text, cudnn_fix())
