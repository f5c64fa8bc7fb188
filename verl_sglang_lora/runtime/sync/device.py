"""The one place tensors are moved to the rollout's device (CUDA-IPC serialization needs device tensors)."""

from __future__ import annotations

import torch


def current_device() -> torch.device | None:
    """This process's CUDA device, or None on a host without one (CPU tests, preflight)."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None


def to_device(tensor: torch.Tensor, device: torch.device | str | None) -> torch.Tensor:
    """``tensor`` on ``device`` (a host tensor is copied; one already there is returned as is)."""
    if device is None or tensor.device == torch.device(device):
        return tensor
    return tensor.detach().to(device, non_blocking=False)


def to_device_owned(tensor: torch.Tensor, device: torch.device | str | None) -> torch.Tensor:
    """The tensor on ``device``, owning its storage: a view into a buffer the producer reuses is cloned."""
    if device is not None and tensor.device != torch.device(device):
        return to_device(tensor, device)  # the copy owns its storage
    shares_buffer = tensor._base is not None or tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size()
    tensor = tensor.detach()
    return tensor.clone() if shares_buffer or not tensor.is_contiguous() else tensor
