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
import re

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


def cudnn_fix() -> str:
    """What to do about a mismatch, with the pin torch declares."""
    pin = torch_cudnn_pin() or "the nvidia-cudnn wheel torch pins"
    return f"install the cuDNN torch was built with: pip install {pin}"


def warn_if_cudnn_mismatch() -> None:
    """One error line in the trainer's worker, at start-up rather than at the first backward minutes later; not a
    refusal: an attention path without cuDNN (flash-attn) may train regardless."""
    state, text = cudnn_state()
    if state == "mismatch":
        logger.error("sglang_lora: %s -- the trainer's SDPA backward is expected to fail ('cuDNN Frontend error'); "
                     "%s (verl-sglang-lora doctor checks it)", text, cudnn_fix())
