"""Byte-exact checks of a resident write against SGLang's own load of the same adapter.

``reference_write`` is SGLang's path for the tensors: a ``LoRAAdapter`` built like the slot's runs
``initialize_weights_from_tensors`` (CPU staging, q/k/v and gate/up stacking), then the pool's own
``load_lora_weight_to_buffer`` writes it into the given slot (bookkeeping such as ``uid_to_buffer_id`` is not
touched: only bytes). ``compare_slots`` then compares two slots over every pool buffer, layer and module
(embedding and lm_head buffers included), bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

import torch

from .access import new_adapter
from .execute import bits


@dataclass(frozen=True)
class Mismatch:
    """Where two slots differ: buffer family, module, layer, count of differing elements, first index."""

    buffer: str
    module: str
    layer: Optional[int]
    differing: int
    total: int
    first_index: tuple[int, ...]
    left: float
    right: float

    def __str__(self) -> str:
        where = f"{self.buffer}[{self.module}]" + (f"[layer {self.layer}]" if self.layer is not None else "")
        return (f"{where}: {self.differing}/{self.total} elements differ, first at {self.first_index} "
                f"({self.left!r} vs {self.right!r})")



def reference_write(manager: Any, uid: str, tensors: Mapping[str, torch.Tensor], slot: int) -> Any:
    """SGLang's own load of ``tensors`` (as adapter ``uid`` is configured) into pool slot ``slot``."""
    adapter = new_adapter(manager, uid)
    adapter.initialize_weights_from_tensors(dict(tensors))
    manager.memory_pool.load_lora_weight_to_buffer(
        uid, slot, adapter, manager.lora_modules,
        getattr(manager, "embed_tokens_module", None), getattr(manager, "lm_head_module", None))
    return adapter


def _compare(buffer: str, module: str, layer: Optional[int], a: torch.Tensor, b: torch.Tensor) -> Optional[Mismatch]:
    if a.shape != b.shape or a.dtype != b.dtype:
        return Mismatch(buffer, module, layer, -1, a.numel(), tuple(a.shape), float("nan"), float("nan"))
    diff = bits(a) != bits(b)
    count = int(diff.sum())
    if count == 0:
        return None
    first = tuple(int(i) for i in torch.nonzero(diff)[0].tolist())
    return Mismatch(buffer, module, layer, count, a.numel(), first, float(a[first]), float(b[first]))


def compare_slots(pool: Any, slot_a: int, slot_b: int) -> list[Mismatch]:
    """Every element of slot ``slot_a`` against slot ``slot_b``, all per-layer and embedding buffers (the whole slot:
    a write a plan misses shows too)."""
    out: list[Mismatch] = []
    for family, buffers in (("A", pool.A_buffer), ("B", pool.B_buffer)):
        for module in sorted(buffers):
            for layer, buf in enumerate(buffers[module]):
                m = _compare(family, module, layer, buf[slot_a], buf[slot_b])
                if m is not None:
                    out.append(m)
    for family in ("embedding_A_buffer", "embedding_B_buffer", "lm_head_A_buffer", "lm_head_B_buffer",
                   "new_embeddings_buffer"):
        for module, buf in sorted(getattr(pool, family, {}).items()):
            m = _compare(family, module, None, buf[slot_a], buf[slot_b])
            if m is not None:
                out.append(m)
    return out
