"""Trace SGLang's own adapter load element by element, through unique int64 ids (docs/resident_sync.md, section 2)."""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections import defaultdict
from typing import Any, Iterator, Mapping

import torch

from .access import EMBEDDING_BUFFERS, ResidentError, new_adapter
from .protocol import ErrorCode as E
from .plan import UNTOUCHED, Block, SlotLayout, blocks_from_trace, source_specs
from verl_sglang_lora.sglang_contract.expert_lora import EXPERTS_SEGMENT

_ADAPTER_EMPTY_ATTRS = ("embedding_layers", "added_tokens_embeddings", "pinned_embedding_layers",
                        "pinned_added_tokens_embeddings")


class AttributeView:
    """``base`` with some attributes replaced; class methods looked up through the view run against it."""

    def __init__(self, base: Any, **replaced: Any) -> None:
        object.__setattr__(self, "_base", base)
        object.__setattr__(self, "_replaced", dict(replaced))

    def __getattr__(self, name: str) -> Any:
        replaced = object.__getattribute__(self, "_replaced")
        if name in replaced:
            return replaced[name]
        base = object.__getattribute__(self, "_base")
        try:
            raw = inspect.getattr_static(type(base), name)
        except AttributeError:
            return getattr(base, name)
        if isinstance(raw, staticmethod):
            return raw.__func__
        if isinstance(raw, classmethod):
            return raw.__func__.__get__(type(base))
        if inspect.isfunction(raw):
            return raw.__get__(self)
        if isinstance(raw, property):
            return raw.fget(self)
        return getattr(base, name)

    def __setattr__(self, name: str, value: Any) -> None:  # writes stay in the view
        object.__getattribute__(self, "_replaced")[name] = value


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def expert_keys(pool: Any) -> set[str]:
    """Pool keys of fused-expert LoRA (``gate_up_proj_moe``, ``down_proj_moe``): a 4-D buffer per layer
    [slots, experts, rows, cols] where dense keys have [slots, rows, cols]."""
    return {k for k in pool.A_buffer if pool.A_buffer[k][0].dim() == 4}


def trace_layer(manager: Any, uid: str, layer: int, probes: Mapping[str, torch.Tensor],
                keys: list[str]) -> dict[tuple[str, str], torch.Tensor]:
    """SGLang's write of ``probes`` (this layer's id tensors) into a one-slot probe: {(A|B, key): 2-D trace} (an
    expert buffer's [experts, rows, cols] as [experts * rows, cols]). SGLang multiplies expert B by the adapter's
    scaling while loading it; the trace runs with an integer scaling of 1, so the ids come through unchanged."""
    pool = manager.memory_pool
    adapter = new_adapter(manager, uid)
    adapter.initialize_weights_from_tensors(dict(probes))
    adapter_view = AttributeView(adapter, layers=[adapter.layers[layer]], scaling=1,
                                 **{a: {} for a in _ADAPTER_EMPTY_ATTRS if hasattr(adapter, a)})

    def probe(buf: torch.Tensor) -> list[torch.Tensor]:
        return [torch.full((1, *buf.shape[1:]), UNTOUCHED, dtype=torch.int64)]

    shadow_a = {k: probe(pool.A_buffer[k][layer]) for k in keys}
    shadow_b = {k: probe(pool.B_buffer[k][layer]) for k in keys}
    pool_view = AttributeView(pool, A_buffer=shadow_a, B_buffer=shadow_b, num_layer=1,
                              pin_memory_available=False, enable_lora_overlap_loading=False,
                              **{a: {} for a in EMBEDDING_BUFFERS})
    with _quiet(type(pool).__module__):
        type(pool).load_lora_weight_to_buffer(
            pool_view, uid, 0, adapter_view, [manager.lora_modules[layer]],
            getattr(manager, "embed_tokens_module", None), getattr(manager, "lm_head_module", None))
    return {(family, k): shadow[k][0][0].flatten(0, -2) for k in keys
            for family, shadow in (("A", shadow_a), ("B", shadow_b))}


def trace_layout(manager: Any, uid: str, tensors: Mapping[str, torch.Tensor]) -> SlotLayout:
    """The layout SGLang's own load path gives ``tensors`` (PEFT names, unsliced; only names and shapes are read) in
    ``uid``'s slot. Blocks of expert B are marked ``scaled``: SGLang stores them multiplied by the scaling."""
    from sglang.srt.layers.utils import get_layer_id  # what SGLang's ``_process_weight`` files a weight under

    pool = manager.memory_pool
    keys = sorted(set(pool.A_buffer) | set(pool.B_buffer))
    experts = expert_keys(pool)
    specs = source_specs(tensors)
    by_layer: dict[int, list] = defaultdict(list)
    for spec in specs:
        layer = get_layer_id(spec.name)
        if layer is None:
            raise ResidentError(E.UNSUPPORTED_LAYOUT,
                                f"{spec.name}: not a per-layer LoRA weight (embedding LoRA is not supported)")
        if len(spec.shape) != (3 if EXPERTS_SEGMENT in spec.name else 2):
            raise ResidentError(E.UNSUPPORTED_LAYOUT, f"{spec.name}: {len(spec.shape)}-D LoRA weight (dense weights "
                                                      "are 2-D, fused-expert weights 3-D)")
        by_layer[layer].append(spec)
    blocks: list[Block] = []
    for layer in range(pool.num_layer):  # layers without weights still get SGLang's zero writes
        probes = {s.name: torch.arange(s.id_offset + 1, s.id_offset + 1 + s.numel, dtype=torch.int64).view(s.shape)
                  for s in by_layer.get(layer, [])}
        for (buffer, key), trace in trace_layer(manager, uid, layer, probes, keys).items():
            blocks.extend(blocks_from_trace(trace.numpy(), specs, buffer, key, layer,
                                            scaled=buffer == "B" and key in experts))
    fed = {(b.buffer, b.module, b.layer) for b in blocks if b.src is not None}
    starved = [f"{f}[{k}][layer {layer}]" for k in sorted(experts) for layer in range(pool.num_layer) for f in "AB"
               if (f, k, layer) not in fed]
    if starved:  # the pool has expert LoRA buffers that this adapter leaves as they were
        raise ResidentError(E.UNSUPPORTED_LAYOUT, f"the adapter leaves {starved[0]} (and {len(starved) - 1} more) "
                                                  "without a tensor: some SGLang releases then keep an earlier "
                                                  "adapter's bytes there, which no check of this adapter would see")
    used = {b.src for b in blocks if b.src is not None}
    numel = {s.name: s.numel for s in specs}
    for b in blocks:
        last = b.offset + (b.rows - 1) * b.stride + b.cols  # one past the last source element the block reads
        if b.src is not None and (b.offset < 0 or last > numel[b.src]):
            raise ResidentError(E.TRACE_INCONSISTENT, f"traced block reads outside {b.src}: {b}")
    return SlotLayout(sources=specs, blocks=tuple(blocks),
                      unused_sources=tuple(sorted(s.name for s in specs if s.name not in used)))
