"""Check the resident plan against the SGLang on ``sys.path``, on CPU, with SGLang's real LoRA objects.

    python -m tests.resident_selfcheck [--tp 1,2] [--ranks 8,16] [--max-rank 16]

prints one JSON line. Per TP size, TP rank and adapter rank it builds SGLang's real ``LoRAManager`` (real
``LoRAMemoryPool``, real LoRA layer wrappers around real ``QKVParallelLinear`` / ``MergedColumnParallelLinear``
/ ``RowParallelLinear``) over a tiny 2-layer Qwen3-shaped stand-in model, loads a pinned slot adapter and a
reference adapter through ``load_lora_adapter_from_tensors`` + ``fetch_new_loras`` (SGLang's full load path),
then checks that the traced plan writes the reference adapter's bytes into the slot, byte for byte, that
deliberately wrong plans are caught, and drives the loader entry point end to end.

Why a stand-in model and not SGLang's ``Qwen3ForCausalLM``: the model class needs initialized process groups
(``get_tensor_model_parallel_rank``, attention backends) to construct, while the linear layers take the TP
rank and size explicitly (<= 0.5.12 ``tp_rank=/tp_size=``; >= 0.5.18 from ``get_parallel().override``), so one
process can build every TP rank. The pool reads only the module tree (``model.layers.{i}.self_attn.qkv_proj``
...), the HF config and the linear layers' partition attributes, so nothing the plan depends on is missing.
Embedding/lm_head LoRA needs ``VocabParallelEmbedding``, which reads the TP group at construction: the CPU check
uses the seven HF linear targets (``--lora-target-modules`` as a list), not ``all``.

One CPU-only workaround, scoped to construction: SGLang's LoRA layer wrappers allocate a few int32 offset
tensors with ``pin_memory=True``, which raises without an accelerator; while the manager is built, pinning
is a no-op. No tensor the plan reads or writes is affected.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import sys
import time
from typing import Any, Callable, Iterator

import torch

HF_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
CONFIG = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=False)
DTYPE = torch.bfloat16


# ---- building SGLang's real objects on CPU -----------------------------------------------------------------------
@contextlib.contextmanager
def pinning_is_noop() -> Iterator[None]:
    """``pin_memory=True`` needs an accelerator; while SGLang builds its LoRA objects or batch info on CPU, treat it
    as a no-op (host tensors stay host tensors; nothing the LoRA math reads changes)."""
    if torch.cuda.is_available():
        yield
        return
    # torch caches the constructors a `with torch.device(...)` redirects on first use: fill that cache with the real
    # functions before they are swapped, or a later device context (transformers' meta init) misses them
    from torch.utils._device import _device_constructors

    _device_constructors()
    originals = {name: getattr(torch, name) for name in ("tensor", "zeros", "empty")}
    pin = torch.Tensor.pin_memory

    def unpinned(fn: Callable) -> Callable:
        def make(*args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
            return fn(*args, **kwargs)
        return make

    for name, fn in originals.items():
        setattr(torch, name, unpinned(fn))
    torch.Tensor.pin_memory = lambda self, *a, **k: self  # type: ignore[method-assign]
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch, name, fn)
        torch.Tensor.pin_memory = pin  # type: ignore[method-assign]


LORA_SERVER_ARGS = dict(enable_lora=True, lora_eviction_policy="lru", lora_backend="triton",
                        enable_lora_overlap_loading=False, lora_strict_loading=True, experts_shared_outer_loras=None,
                        lora_use_virtual_experts=False, lora_target_modules=list(HF_TARGETS))


@contextlib.contextmanager
def release_scope(tp_size: int, tp_rank: int, max_rank: int, max_loras: int,
                  backend: str = "triton") -> Iterator[Any]:
    """The process state SGLang's LoRA code reads, per release; yields the server args to hand the manager.

    <= 0.5.12: ranks are constructor arguments and server args a plain attribute bag. >= 0.5.18: ranks come
    from ``get_parallel()`` (the pool, the linear layers and the LoRA slicing all read it); 0.5.23 also reads
    the LoRA settings from the published config (``get_lora()``), so a dummy ``ServerArgs`` is published with
    SGLang's own test helper ``override_server_args``.
    """
    import types

    settings = dict(LORA_SERVER_ARGS, max_loras_per_batch=max_loras, max_lora_rank=max_rank, lora_backend=backend)
    try:
        from sglang.srt import runtime_context as rc
    except ImportError:
        yield types.SimpleNamespace(**settings)
        return
    with contextlib.ExitStack() as stack:
        server_args: Any = types.SimpleNamespace(**settings)
        context = rc.get_context() if hasattr(rc, "get_context") else None
        if context is not None and hasattr(context, "override_server_args"):
            from sglang.srt.server_args import ServerArgs

            known = set(getattr(ServerArgs, "__struct_fields__", ()))
            server_args = stack.enter_context(
                context.override_server_args(**{k: v for k, v in settings.items() if k in known}))
        allowed = getattr(rc, "_PARALLEL_FIELDS", None) or rc._parallel_fields()
        values = dict(tp_size=tp_size, tp_rank=tp_rank, attn_tp_size=tp_size, attn_tp_rank=tp_rank,
                      moe_tp_size=tp_size, moe_tp_rank=tp_rank)
        stack.enter_context(rc.get_parallel().override(**{k: v for k, v in values.items() if k in allowed}))
        yield server_args


def _kwargs(fn: Callable, **candidates: Any) -> dict:
    params = inspect.signature(fn).parameters
    return {k: v for k, v in candidates.items() if k in params}


def stand_in_model(tp_size: int, tp_rank: int) -> torch.nn.Module:
    """Qwen3's LoRA-relevant module tree built from SGLang's own parallel linear layers."""
    import transformers
    from torch import nn
    from sglang.srt.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear

    cfg = transformers.Qwen3Config(**CONFIG)
    cfg.architectures = ["Qwen3ForCausalLM"]
    h, hd, nh, nkv, inter = (cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads,
                             cfg.intermediate_size)

    def make(cls: type, *args: Any, attn: bool = False, **kw: Any) -> nn.Module:
        extra = _kwargs(cls.__init__, tp_rank=tp_rank, tp_size=tp_size, params_dtype=DTYPE,
                        parallel_group="attn_tp" if attn else None, reduce_results=False)
        if extra.get("parallel_group") is None:
            extra.pop("parallel_group", None)
        return cls(*args, bias=False, **extra, **kw)

    class Attn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv_proj = make(QKVParallelLinear, h, hd, nh, nkv, attn=True)
            self.o_proj = make(RowParallelLinear, nh * hd, h, attn=True)

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate_up_proj = make(MergedColumnParallelLinear, h, [inter, inter])
            self.down_proj = make(RowParallelLinear, inter, h)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.self_attn, self.mlp = Attn(), MLP()

    class Body(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(Layer() for _ in range(cfg.num_hidden_layers))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config, self.model = cfg, Body()

    return Model()


def build_manager(tp_size: int, tp_rank: int, max_rank: int, server_args: Any, max_loras: int = 3,
                  backend: str = "triton") -> Any:
    """SGLang's real LoRAManager (and pool) for one TP rank of the stand-in model; call in ``release_scope``.
    ``backend="torch_native"``: SGLang's own CPU-capable LoRA kernels, for a forward through the LoRA layers."""
    from sglang.srt.lora.lora_manager import LoRAManager

    model = stand_in_model(tp_size, tp_rank)
    kwargs = _kwargs(LoRAManager.__init__, base_model=model, base_hf_config=model.config,
                     max_loras_per_batch=max_loras, load_config=None, dtype=DTYPE, server_args=server_args,
                     lora_backend=backend, tp_size=tp_size, tp_rank=tp_rank, max_lora_rank=max_rank,
                     target_modules=list(HF_TARGETS), lora_paths=None)
    with pinning_is_noop():
        return LoRAManager(**kwargs)


def layers_reading_pool(manager: Any) -> tuple[int, list[str]]:
    """(LoRA weight tensors the model's LoRA layers hold that share storage with the pool's buffers, the others).

    The in-place write fills the pool; a backend whose layers kept their own copies would serve stale bytes."""
    pool = manager.memory_pool
    storages = {t.untyped_storage().data_ptr() for bufs in (*pool.A_buffer.values(), *pool.B_buffer.values())
                for t in bufs}
    shared, elsewhere = 0, []
    for name, module in manager.base_model.named_modules():
        for attr, value in vars(module).items():
            if isinstance(value, torch.Tensor) and (attr.startswith(("A_buffer", "B_buffer")) or attr in ("lora_a", "lora_b")):
                if value.untyped_storage().data_ptr() in storages:
                    shared += 1
                else:
                    elsewhere.append(f"{name}.{attr}")
    return shared, elsewhere


def peft_adapter(rank: int, seed: int, dtype: torch.dtype = DTYPE, layers: int | None = None,
                 scale: float = 1.0) -> dict:
    """Unsliced, unpacked PEFT tensors for all seven HF linear targets (FSDP export names), N(0, scale^2)."""
    gen = torch.Generator().manual_seed(seed)
    h, hd, nh, nkv, inter = (CONFIG["hidden_size"], CONFIG["head_dim"], CONFIG["num_attention_heads"],
                             CONFIG["num_key_value_heads"], CONFIG["intermediate_size"])
    dims = {"self_attn.q_proj": (h, nh * hd), "self_attn.k_proj": (h, nkv * hd), "self_attn.v_proj": (h, nkv * hd),
            "self_attn.o_proj": (nh * hd, h), "mlp.gate_proj": (h, inter), "mlp.up_proj": (h, inter),
            "mlp.down_proj": (inter, h)}
    out = {}
    for i in range(CONFIG["num_hidden_layers"] if layers is None else layers):
        for mod, (fan_in, fan_out) in dims.items():
            prefix = f"base_model.model.model.layers.{i}.{mod}"
            out[f"{prefix}.lora_A.weight"] = (scale * torch.randn(rank, fan_in, generator=gen)).to(dtype)
            out[f"{prefix}.lora_B.weight"] = (scale * torch.randn(fan_out, rank, generator=gen)).to(dtype)
    return out


def flat_copy(tensors: dict) -> tuple[torch.Tensor, dict]:
    """``tensors`` copied into one zero-padded byte buffer (as the trainer's sync client keeps them), and views."""
    offsets, size = {}, 0
    for name, t in sorted(tensors.items()):
        offsets[name] = size
        size += -(-t.numel() * t.element_size() // 256) * 256
    flat = torch.zeros(size, dtype=torch.uint8)
    views = {}
    for name, t in sorted(tensors.items()):
        n = t.numel() * t.element_size()
        views[name] = flat[offsets[name]: offsets[name] + n].view(t.dtype).view(t.shape)
        views[name].copy_(t)
    return flat, views


def peft_config(rank: int) -> dict:
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank,
            "target_modules": list(HF_TARGETS), "bias": "none", "lora_dropout": 0.0}


def load(manager: Any, name: str, tensors: dict, rank: int, pinned: bool, config: dict | None = None) -> str:
    """SGLang's own ``load_lora_adapter_from_tensors``; returns the adapter's uid."""
    from sglang.srt.lora.lora_registry import LoRARef

    ref = LoRARef(lora_name=name, lora_path=f"/tmp/{name}", pinned=pinned)
    result = manager.load_lora_adapter_from_tensors(ref, dict(tensors), config or peft_config(rank))
    if not result.success:
        raise RuntimeError(f"SGLang refused {name}: {result.error_message}")
    return ref.lora_id


# ---- serving through SGLang's LoRA layers -------------------------------------------------------------------------
class ServedModel:
    """The stand-in model served through SGLang's real LoRA path on CPU: SGLang's ``LoRAManager`` with its
    ``torch_native`` backend, adapters resolved by name through its ``lora_refs`` and pool, the LoRA deltas computed by
    SGLang's own layer wrappers. Tokens are scored independently (no attention: a bag-of-tokens model), which is all
    a check of *which adapter bytes at which scale* a request is served with needs.

    ``served(name, ids)`` is what an SGLang server returns for ``lora_path=name``; ``reference(tensors, scaling, ids)``
    is the trainer's side, the same base weights with the PEFT tensors applied in plain torch (x A^T B^T scaling)."""

    VOCAB = CONFIG["vocab_size"]

    def __init__(self, rank: int = 8, max_loras: int = 4, seed: int = 0) -> None:
        self.rank, self._scope = rank, contextlib.ExitStack()
        args = self._scope.enter_context(release_scope(1, 0, rank, max_loras))
        self.manager = build_manager(1, 0, rank, args, max_loras=max_loras, backend="torch_native")
        gen = torch.Generator().manual_seed(seed)
        h = CONFIG["hidden_size"]
        for _, param in self.manager.base_model.named_parameters():  # SGLang allocates them uninitialized
            param.data.copy_(torch.randn(param.shape, generator=gen) * 0.1)
        self.embed = (torch.randn(self.VOCAB, h, generator=gen)).to(DTYPE)
        self.head = (torch.randn(self.VOCAB, h, generator=gen) * 0.3).to(DTYPE)

    def close(self) -> None:
        self._scope.close()

    def load(self, name: str, tensors: dict, pinned: bool = False, config: dict | None = None) -> str:
        uid = load(self.manager, name, {k: v.clone() for k, v in tensors.items()}, self.rank, pinned, config)
        self.manager.fetch_new_loras({uid})
        return uid

    def uid(self, name: str | None) -> str | None:
        if name is None:
            return None
        for ref in self.manager.lora_refs.values():
            if ref.lora_name == name:
                return ref.lora_id
        raise ValueError(f"LoRA adapter {name!r} is not loaded")  # as SGLang refuses an unknown lora_path

    def _logprobs(self, x_fn: Callable[[torch.Tensor, int], torch.Tensor], ids: list[int],
                  dtype: torch.dtype = DTYPE) -> list[float]:
        x = self.embed[torch.tensor(ids[:-1])].to(dtype)
        for i, _ in enumerate(self.manager.base_model.model.layers):
            x = x_fn(x, i)
        logits = x.float() @ self.head.float().T
        return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None]).flatten().tolist()

    def served(self, name: str | None, ids: list[int]) -> list[float]:
        """Per-position log-probs of ``ids[1:]`` as SGLang serves them for ``lora_path=name``."""
        import types

        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        n, uid = len(ids) - 1, self.uid(name)
        with pinning_is_noop():
            self.manager.prepare_lora_batch(types.SimpleNamespace(batch_size=n, forward_mode=ForwardMode.DECODE,
                                                                  lora_ids=[uid] * n))
        layers = self.manager.base_model.model.layers
        q = CONFIG["num_attention_heads"] * CONFIG["head_dim"]
        inter = CONFIG["intermediate_size"]

        def layer(x: torch.Tensor, i: int) -> torch.Tensor:
            attn, mlp = layers[i].self_attn, layers[i].mlp
            o, _ = attn.o_proj(attn.qkv_proj(x)[0][:, :q].contiguous())
            gu, _ = mlp.gate_up_proj(x)
            d, _ = mlp.down_proj((torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]).contiguous())
            return x + o + d

        return self._logprobs(layer, ids)

    def reference(self, tensors: dict | None, scaling: float, ids: list[int]) -> list[float]:
        """The same log-probs computed the trainer's way from PEFT tensors (None: the base model), in float32 from
        the bf16 weights (the engines' numerics then differ by bf16 rounding, as a trainer's and a server's do)."""
        layers = self.manager.base_model.model.layers
        q, inter = CONFIG["num_attention_heads"] * CONFIG["head_dim"], CONFIG["intermediate_size"]

        def weight(module: Any) -> torch.Tensor:
            return getattr(module, "base_layer", module).weight.float()

        def delta(x: torch.Tensor, i: int, leaf: str) -> torch.Tensor:
            if tensors is None:
                return 0
            block = "self_attn" if leaf in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            prefix = f"base_model.model.model.layers.{i}.{block}.{leaf}"
            a, b = tensors[f"{prefix}.lora_A.weight"].float(), tensors[f"{prefix}.lora_B.weight"].float()
            return ((x @ a.T) @ b.T) * scaling

        def layer(x: torch.Tensor, i: int) -> torch.Tensor:
            attn, mlp = layers[i].self_attn, layers[i].mlp
            qq = x @ weight(attn.qkv_proj)[:q].T + delta(x, i, "q_proj")
            o = qq @ weight(attn.o_proj).T + delta(qq, i, "o_proj")
            gu = x @ weight(mlp.gate_up_proj).T
            g, u = gu[:, :inter] + delta(x, i, "gate_proj"), gu[:, inter:] + delta(x, i, "up_proj")
            h = torch.nn.functional.silu(g) * u
            return x + o + h @ weight(mlp.down_proj).T + delta(h, i, "down_proj")

        return self._logprobs(layer, ids, torch.float32)


# ---- the checks ---------------------------------------------------------------------------------------------------
def _wrong(layout: Any, kind: str) -> Any:
    """A deliberately broken layout: k and v sources swapped, or layer 1 left out."""
    import dataclasses

    def swap(src: str | None) -> str | None:
        if src and ".k_proj." in src:
            return src.replace(".k_proj.", ".v_proj.")
        if src and ".v_proj." in src:
            return src.replace(".v_proj.", ".k_proj.")
        return src

    if kind == "swapped_kv":
        blocks = tuple(dataclasses.replace(b, src=swap(b.src)) for b in layout.blocks)
    else:
        blocks = tuple(b for b in layout.blocks if b.layer != 1)
    return dataclasses.replace(layout, blocks=blocks)


def reference_write(manager: Any, uid: str, tensors: dict, slot: int) -> None:
    """SGLang's own load of ``tensors`` (as adapter ``uid`` is configured) into pool slot ``slot``: a ``LoRAAdapter``
    built like the slot's, then the pool's ``load_lora_weight_to_buffer`` (only bytes; ``uid_to_buffer_id`` is not
    touched)."""
    from verl_sglang_lora.runtime.resident.access import new_adapter

    adapter = new_adapter(manager, uid)
    adapter.initialize_weights_from_tensors(dict(tensors))
    manager.memory_pool.load_lora_weight_to_buffer(
        uid, slot, adapter, manager.lora_modules,
        getattr(manager, "embed_tokens_module", None), getattr(manager, "lm_head_module", None))


def check_case(tp_size: int, tp_rank: int, rank: int, max_rank: int) -> dict:
    """Plan vs SGLang's load for one (TP size, TP rank, adapter rank); wrong plans; the loader end to end."""
    from verl_sglang_lora.runtime.resident import protocol as P
    from verl_sglang_lora.runtime.resident.execute import compare_slots, differing_pairs, run_copies
    from verl_sglang_lora.runtime.resident.loader import apply
    from verl_sglang_lora.runtime.resident.plan import bind
    from verl_sglang_lora.runtime.resident.trace import trace_layout

    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    from verl_sglang_lora.sglang_contract.lora_backends import declared_lora_backends, plugin_lora_backend

    # what the server actor launches this release with (None: SGLang's own default)
    backend = plugin_lora_backend() or declared_lora_backends()[1]
    with release_scope(tp_size, tp_rank, max_rank, 3, backend) as server_args:
        manager = build_manager(tp_size, tp_rank, max_rank, server_args, backend=backend)
        pool = manager.memory_pool
        out["backend"] = backend
        out["layers_reading_pool"], out["layers_reading_elsewhere"] = layers_reading_pool(manager)
        for buffers in (*pool.A_buffer.values(), *pool.B_buffer.values()):
            for buf in buffers:  # 0.5.8 allocates the pool with torch.empty: give both slots the same past
                buf.zero_()
        old, new = peft_adapter(rank, seed=1), peft_adapter(rank, seed=2)
        slot_uid = load(manager, "verl_lora_slot0", old, rank, pinned=True)
        ref_uid = load(manager, "reference", new, rank, pinned=False)
        manager.fetch_new_loras({slot_uid, ref_uid})
        slot, ref = pool.uid_to_buffer_id[slot_uid], pool.uid_to_buffer_id[ref_uid]
        out["slots"] = {"slot": slot, "reference": ref, "pool_slots": pool.max_loras_per_batch}
        out["buffer_shapes"] = {f"{f}.{k}": list(v[0].shape) for f, b in (("A", pool.A_buffer), ("B", pool.B_buffer))
                                for k, v in sorted(b.items())}
        out["before_write_mismatches"] = len(compare_slots(pool, slot, ref))

        layout = trace_layout(manager, slot_uid, new)  # shuffled insertion order must not matter
        out["blocks"] = len(layout.blocks)
        out["zero_blocks"] = sum(b.src is None for b in layout.blocks)
        out["unused_sources"] = list(layout.unused_sources)
        out["copied_elements"] = layout.copied_elements
        out["modules"] = sorted({b.module for b in layout.blocks})
        out["layers"] = sorted({b.layer for b in layout.blocks})
        out["qkv_B_rows"] = sorted({(b.src.split(".")[-3], b.rows) for b in layout.blocks
                                    if b.src and b.buffer == "B" and b.module == "qkv_proj" and b.layer == 0})
        pairs = bind(layout, pool, slot, dict(reversed(list(new.items()))))
        run_copies(pairs)
        mismatches = compare_slots(pool, slot, ref)
        out["plan_mismatches"] = mismatches
        out["pairs_differing"] = differing_pairs(pairs)

        for kind in ("swapped_kv", "missing_layer"):
            reference_write(manager, slot_uid, old, slot)  # slot back to the old adapter
            run_copies(bind(_wrong(layout, kind), pool, slot, new))
            found = compare_slots(pool, slot, ref)
            out[f"{kind}_mismatches"] = sorted({m.split(":", 1)[0] for m in found})  # the buffers named

        # the loader entry point, end to end, on the model SGLang would hand it
        reference_write(manager, slot_uid, old, slot)
        status, message = P.new_status(), P.new_message()
        reply = (P.new_status(), P.new_message())
        flat, persistent = flat_copy(new)  # stands in for the trainer's flat buffer and its views
        apply(manager.base_model, P.request_tensors("attach", status, persistent, message, flat, reply,
                                                    slot="verl_lora_slot0", version=1, write=1, seq=7))
        out["attach_status"] = P.read_status(status)
        out["attach_message"] = P.read_message(message)
        newer = peft_adapter(rank, seed=3)
        for k, v in newer.items():  # the trainer writes the next version in place
            persistent[k].copy_(v)
        reference_write(manager, ref_uid, newer, ref)
        empty = torch.empty(0, dtype=torch.int64)  # a write's header: answered on the slot's reply channel
        apply(manager.base_model, P.request_tensors("write", empty, slot="verl_lora_slot0", version=2, seq=8))
        out["write_status"] = P.read_status(reply[0])
        apply(manager.base_model, P.request_tensors("compare", status, None, message, slot="verl_lora_slot0",
                                                    ref="reference"))
        out["compare_status"] = P.read_status(status)
        out["compare_message"] = P.read_message(message)
        # a normal (unpinned) load proven against the tensors it came from, on this rank's slice; and against others
        apply(manager.base_model, P.request_tensors("verify", status, newer, message, slot="reference",
                                                    allow_unpinned=1))
        out["verify_status"] = P.read_status(status)
        apply(manager.base_model, P.request_tensors("verify", status, new, message, slot="reference",
                                                    allow_unpinned=1))
        out["verify_wrong_status"] = P.read_status(status)
        out["verify_wrong_message"] = P.read_message(message)
        apply(manager.base_model, P.request_tensors("write", status, None, message, slot="no_such_slot", version=3))
        out["unknown_slot_status"] = P.read_status(status)
        apply(manager.base_model, P.request_tensors("write", status, None, message, slot="reference", version=3))
        out["unpinned_status"] = P.read_status(status)
        out["unpinned_message"] = P.read_message(message)
        apply(manager.base_model, [("not_a_header", status)])  # must only log
        # detach frees the binding and its reply channel: a later write is not run (nobody would hear it)
        apply(manager.base_model, P.request_tensors("detach", status, None, message, slot="verl_lora_slot0", seq=13))
        out["detach_status"] = P.read_status(status)
        apply(manager.base_model, P.request_tensors("write", empty, slot="verl_lora_slot0", version=7, seq=14))
        out["reply_after_detach_status"] = P.read_status(reply[0])
    out["secs"] = round(time.perf_counter() - t0, 2)
    return out


def run(tp_sizes: list[int], ranks: list[int], max_rank: int) -> dict:
    import sglang

    result: dict[str, Any] = {"sglang_version": sglang.__version__, "sglang_file": sglang.__file__, "cases": {}}
    for tp in tp_sizes:
        for tp_rank in range(tp):
            for r in ranks:
                key = f"tp{tp}.rank{tp_rank}.r{r}"
                try:
                    result["cases"][key] = check_case(tp, tp_rank, r, max_rank)
                except Exception as exc:  # noqa: BLE001 - one broken case must not hide the others
                    import traceback

                    result["cases"][key] = {"error": f"{type(exc).__name__}: {exc}",
                                            "traceback": traceback.format_exc(limit=-8)}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", default="1,2")
    parser.add_argument("--ranks", default="8,16")
    parser.add_argument("--max-rank", type=int, default=16)
    args = parser.parse_args(argv)
    real_stdout = os.dup(1)
    os.dup2(2, 1)  # libraries print to stdout; the JSON line must be the only thing there
    try:
        result = run([int(x) for x in args.tp.split(",")], [int(x) for x in args.ranks.split(",")], args.max_rank)
    finally:
        sys.stdout.flush()
        os.dup2(real_stdout, 1)
    print(json.dumps(result, default=repr, sort_keys=True), flush=True)
    return 0 if all("error" not in c for c in result["cases"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
