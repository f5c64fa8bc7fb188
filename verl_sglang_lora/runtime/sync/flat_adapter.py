"""The adapter gathered into one flat device buffer that is reused from sync to sync.

Why one buffer: SGLang receives an adapter in one load, so the whole adapter has to be on the device at once;
a bucketed stream could bound only the staging, never the load. Gathering straight into one byte buffer of
exactly the adapter's size makes the device memory a sync holds equal to the adapter (no second, flattened
copy: SGLang's ``FlattenedTensorBucket`` is described over this buffer), and keeping the buffer from sync to
sync makes every later sync one copy per tensor into memory that is already there.

The layout (names, shapes, dtypes, offsets) is fixed by the first sync; a later stream that differs (another
name, shape or dtype) gets a new layout and a new buffer, with a log line.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from verl_sglang_lora.runtime.sync.device import to_device_owned
from verl_sglang_lora.sglang_contract.weight_names import check_lora_pairs, lora_module_path

logger = logging.getLogger(__name__)

ALIGN = 256  # byte alignment of every tensor in the buffer (any dtype view of a slice is then aligned)


@dataclass(frozen=True)
class FlatEntry:
    name: str  # the name sent to SGLang (PEFT layout)
    shape: tuple[int, ...]
    dtype: torch.dtype
    offset: int  # byte offset in the flat buffer
    nbytes: int


@dataclass
class FlatAdapter:
    """One sync's adapter: the flat byte buffer, its layout, and per-tensor views into it."""

    flat: torch.Tensor  # uint8, 1-D
    entries: list[FlatEntry]
    tensors: dict[str, torch.Tensor]
    fingerprint: str  # the layout's identity: with the version, what makes a re-push an exact repeat

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries)

    def module_leaves(self) -> list[str]:
        """The module kinds the adapter touches (``q_proj``, ...), from its tensor names."""
        paths = (lora_module_path(name) for name in self.tensors)
        return sorted({path.rsplit(".", 1)[-1] for path in paths if path is not None})


def plan_layout(named: Iterable[tuple[str, tuple[int, ...], torch.dtype]]) -> list[FlatEntry]:
    entries, offset = [], 0
    for name, shape, dtype in named:
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        entries.append(FlatEntry(name, tuple(shape), dtype, offset, nbytes))
        offset += -(-nbytes // ALIGN) * ALIGN
    return entries


def view(flat: torch.Tensor, entry: FlatEntry) -> torch.Tensor:
    return flat[entry.offset : entry.offset + entry.nbytes].view(entry.dtype).view(entry.shape)


@dataclass
class AdapterCollector:
    """Gathers each sync's LoRA stream into a persistent flat buffer on ``device`` (one per sync client)."""

    device: torch.device | str | None = None
    entries: list[FlatEntry] = field(default_factory=list)
    flat: torch.Tensor | None = None
    layouts_built: int = 0

    def collect(self, weights: Iterable[tuple[str, torch.Tensor]], resolve: Callable[[str], tuple[str, str, str]]) -> FlatAdapter:
        """Names resolved against the served model, A/B pairs checked, tensors copied into the buffer."""
        by_slot = {e.name: e for e in self.entries}
        pending: list[tuple[str, torch.Tensor]] = []  # tensors that do not fit the current layout
        seen: dict[str, torch.Tensor | None] = {}
        modules: list[tuple[str, str]] = []
        for raw_name, tensor in weights:
            name, module_path, ab = resolve(raw_name)  # an unknown name fails before anything is sent
            if name in seen:
                raise ValueError(f"LoRA tensor {name!r} arrived twice in one sync")
            modules.append((module_path, ab))
            entry = by_slot.get(name)
            if not pending and entry is not None and entry.shape == tuple(tensor.shape) and entry.dtype == tensor.dtype:
                view(self.flat, entry).copy_(tensor.detach())
                seen[name] = None
            else:
                # a new layout: keep owned copies (the producer may reuse its buffer) until the stream ends
                pending.append((name, to_device_owned(tensor, self.device)))
                seen[name] = pending[-1][1]
        if not seen:
            raise ValueError(
                "the LoRA sync carried no tensors; refusing to load an empty adapter (SGLang would serve the base "
                "policy). With FSDP1 verl's collect_lora_params hands over no "
                "lora_ parameters (use_orig_params=True does not change that); fix: actor_rollout_ref.actor.strategy=fsdp2 "
                "and actor_rollout_ref.actor.fsdp_config.strategy=fsdp2 (`verl-sglang-lora doctor` checks it)"
            )
        check_lora_pairs(modules)
        if pending or set(seen) != set(by_slot):
            self._relayout(seen)
        tensors = {e.name: view(self.flat, e) for e in self.entries}
        return FlatAdapter(self.flat, list(self.entries), tensors, fingerprint(self.entries))

    def _relayout(self, seen: dict[str, torch.Tensor | None]) -> None:
        """A new buffer for this stream: tensors already copied into the old one are carried over."""
        old = {e.name: view(self.flat, e) for e in self.entries} if self.flat is not None else {}
        sources = {name: t if t is not None else old[name] for name, t in seen.items()}
        entries = plan_layout((n, tuple(t.shape), t.dtype) for n, t in sources.items())
        size = entries[-1].offset + entries[-1].nbytes
        device = self.device if self.device is not None else next(iter(sources.values())).device
        flat = torch.zeros(size, dtype=torch.uint8, device=device)  # padding stays zero: the loader compares it too
        for e in entries:
            view(flat, e).copy_(sources[e.name])
        if self.layouts_built:
            logger.warning("sglang_lora: the adapter's tensors changed (%d -> %d tensors); new flat buffer of %d bytes",
                           len(self.entries), len(entries), size)
        self.entries, self.flat = entries, flat
        self.layouts_built += 1


def fingerprint(entries: list[FlatEntry]) -> str:
    """The adapter layout's identity (names, shapes, dtypes, offsets). A version is one trainer step's adapter, so
    (version, layout) identifies a push; its bytes are checked where they land (the loader compares them exactly)."""
    h = hashlib.sha256()
    for e in entries:
        h.update(f"{e.name}|{e.shape}|{e.dtype}|{e.offset}\n".encode())
    return h.hexdigest()[:16]
