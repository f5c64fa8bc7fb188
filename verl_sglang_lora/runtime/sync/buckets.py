"""Bounded buckets for the adapter stream and the accumulator that turns them into one atomic load.

Producers hand LoRA tensors over lazily (often on CPU, layer by layer). They are grouped into buckets of at
most ``bucket_bytes`` -- never splitting the lora_A/lora_B pair of a module -- moved to the device (CUDA-IPC
serialization needs device tensors, seed layer 5; tensors cloned when they are views into a buffer the producer
reuses), and handed to SGLang in a single load after the last bucket.

One copy per tensor, not one staged copy per bucket: packing a bucket into one host buffer first was tried and
measured on the H200 (docs/benchmarks.md, session 5): no faster in isolation (12 ms either way for 392 tensors), and
1.2-1.6 s instead of 21 ms in the benchmark, next to a running SGLang server (cause not isolated).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import torch

from verl_sglang_lora.sglang_contract.weight_names import check_lora_pairs, lora_module_path


def iter_buckets(named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Group tensors into buckets of <= ``bucket_bytes`` (a single oversized pair gets its own bucket).

    Tensors of one LoRA module (A and B) are emitted in the same bucket even if they are not adjacent in the
    stream: a module waits in ``pending`` until both halves arrived.
    """
    if bucket_bytes <= 0:
        raise ValueError(f"bucket size must be > 0 bytes, got {bucket_bytes}")
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    pending: dict[str, list[tuple[str, torch.Tensor]]] = {}
    for name, tensor in named_tensors:
        module = lora_module_path(name)
        key = module if module is not None else name
        group = pending.setdefault(key, [])
        group.append((name, tensor))
        if module is not None and len(group) < 2:
            continue
        entries = pending.pop(key)
        nbytes = sum(t.numel() * t.element_size() for _, t in entries)
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.extend(entries)
        size += nbytes
    for entries in pending.values():  # unpaired leftovers travel too; the accumulator reports them
        bucket.extend(entries)
    if bucket:
        yield bucket


def to_device_owned(tensor: torch.Tensor, device: torch.device | str | None) -> torch.Tensor:
    """The tensor on ``device``, owning its storage (a view into a reused buffer is cloned)."""
    if device is not None and tensor.device != torch.device(device):
        return tensor.detach().to(device, non_blocking=False)  # the copy owns its storage
    shares_buffer = tensor._base is not None or tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size()
    tensor = tensor.detach()
    return tensor.clone() if shares_buffer or not tensor.is_contiguous() else tensor


@dataclass
class AccumulatedAdapter:
    tensors: dict[str, torch.Tensor]
    num_buckets: int
    nbytes: int
    fingerprint: str

    def module_leaves(self) -> list[str]:
        """The module kinds the adapter touches (``q_proj``, ...), from its tensor names."""
        paths = (lora_module_path(name) for name in self.tensors)
        return sorted({path.rsplit(".", 1)[-1] for path in paths if path is not None})


@dataclass
class LoRAAccumulator:
    """Collects buckets into one adapter state dict, resolving each name against the served model."""

    resolve: Callable[[str], tuple[str, str, str]]
    device: torch.device | str | None = None
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    _modules: list[tuple[str, str]] = field(default_factory=list)
    num_buckets: int = 0
    nbytes: int = 0

    def add_bucket(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        self.num_buckets += 1
        resolved = [self.resolve(name) for name, _ in bucket]  # unknown names fail before any copy
        moved = [to_device_owned(t, self.device) for _, t in bucket]
        for (sent_name, module_path, ab), owned in zip(resolved, moved):
            if sent_name in self.tensors:
                raise ValueError(f"LoRA tensor {sent_name!r} arrived twice in one sync")
            self.tensors[sent_name] = owned
            self._modules.append((module_path, ab))
            self.nbytes += owned.numel() * owned.element_size()

    def finish(self) -> AccumulatedAdapter:
        if not self.tensors:
            raise ValueError(
                "the LoRA sync carried no tensors; refusing to load an empty adapter (SGLang would serve the base "
                "policy). With FSDP1 and fsdp_config.use_orig_params=False, verl's collect_lora_params finds no "
                "lora_ parameters; fix: actor_rollout_ref.actor.strategy=fsdp2 (and fsdp_config.strategy=fsdp2), or "
                "actor_rollout_ref.actor.fsdp_config.use_orig_params=True"
            )
        check_lora_pairs(self._modules)
        return AccumulatedAdapter(self.tensors, self.num_buckets, self.nbytes, fingerprint(self.tensors))


FINGERPRINT_BATCH_ELEMENTS = 32 << 20  # 256 MiB of float64 per stacked batch


def fingerprint(tensors: dict[str, torch.Tensor]) -> str:
    """A cheap content fingerprint: names, shapes and two float64 moments per tensor, one device sync in all.

    Tensors of one shape/dtype/device are stacked and reduced together: a LoRA adapter has a handful of distinct
    shapes, so this is a few dozen kernels instead of several per tensor (392 tensors for a Qwen3-0.6B adapter).
    """
    names = sorted(tensors)
    if not names:
        return "empty"
    groups: dict[tuple, list[str]] = {}
    for name in names:
        t = tensors[name]
        groups.setdefault((tuple(t.shape), t.dtype, t.device), []).append(name)
    order, moments = [], []
    for (shape, _, device), members in groups.items():
        numel = math.prod(shape)
        idx = torch.arange(numel, device=device, dtype=torch.float64)
        step = max(1, FINGERPRINT_BATCH_ELEMENTS // max(1, numel))  # bounds the float64 copy
        for i in range(0, len(members), step):
            chunk = members[i : i + step]
            batch = torch.stack([tensors[n].detach().reshape(-1) for n in chunk]).to(torch.float64)
            pair = torch.stack([batch.sum(dim=1), batch @ idx], dim=1)
            moments.append(pair.to(moments[0].device) if moments else pair)
            order += chunk
    values = dict(zip(order, torch.cat(moments).cpu().tolist()))
    h = hashlib.sha256()
    for name in names:
        t = tensors[name]
        s1, s2 = values[name]
        h.update(f"{name}|{tuple(t.shape)}|{t.dtype}|{s1:.17g}|{s2:.17g}".encode())
    return h.hexdigest()[:16]
