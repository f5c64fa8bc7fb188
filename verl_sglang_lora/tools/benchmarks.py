"""Side-by-side benchmarks on one GPU, in one process, printing a table (docs/benchmarks.md).

    python -m verl_sglang_lora.tools.benchmarks --shape qwen3-0.6b --iters 20 [--shape qwen3-8b] [--json out.json]

Against a real SGLang server on a checkpoint written here (real model shapes, all-zero weights, no download; not
``--load-format dummy``: SGLang refuses disk adapter loads under it). Each path that fails is
reported in the table with its error instead of ending the run:
- adapter sync latency p50/p95 for an r32 all-linear adapter handed over on CPU, as verl's FSDP engine does:
  the plugin's path (names resolved, copied into a persistent flat device buffer, one request for the installed SGLang,
  unload of the previous version) vs save-to-disk + ``/load_lora_adapter`` vs verl's own ServerAdapter code
  (run unbound against the same server; reported as failing where it fails);
- base-weight sync throughput (``update_weights_from_tensor``) vs the measured device-to-device copy bandwidth;
- the per-request cost of version pinning (acquire + name + release) on the rollout hot path.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

import torch

from verl_sglang_lora.runtime.lora_plan import lora_plan
from verl_sglang_lora.sglang_contract.http_client import SGLangHTTPClient
from verl_sglang_lora.sglang_contract.launch_args import lora_launch_args
from verl_sglang_lora.sglang_contract.lora_request import request_shape
from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config
from verl_sglang_lora.sglang_contract.weight_names import ModelWeightNames
from verl_sglang_lora.tools.sglang_launcher import SGLangProcess
from verl_sglang_lora.runtime.sync.adapter_push import adapter_request_fields
from verl_sglang_lora.runtime.sync.flat_adapter import AdapterCollector
from verl_sglang_lora.sglang_contract.installed import io_struct
from verl_sglang_lora.sglang_contract.lora_request import REQUEST_CLASS, request_to_json
from verl_sglang_lora.runtime.sync.versions import AdapterVersions, adapter_name
from verl_sglang_lora.sglang_contract.update_session import update_session

SHAPES: dict[str, dict[str, Any]] = {
    # Public Qwen3 configs (hidden, layers, heads, kv heads, head_dim, intermediate, vocab).
    "qwen3-0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, intermediate_size=3072, vocab_size=151936, tie_word_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                     head_dim=128, intermediate_size=12288, vocab_size=151936, tie_word_embeddings=False),
    # Qwen3-30B-A3B's layers (hidden 2048, 32 heads / 4 KV heads of 128, 128 experts of 768 with 8 routed per
    # token and their weights renormalised, every layer sparse, vocab 151936, untied), 8 of its 48: 5,607,297,024
    # parameters -- per layer 623,120,640 (attention 18,874,368 + norms, experts 603,979,776, router 262,144),
    # embeddings + lm_head 622,329,856 -- 11.21 GB in bf16 (the whole model: 30.53e9). On one 80 GB GPU: SGLang at
    # gpu_memory_utilization 0.5 (40 GB: these weights and the KV cache) beside the FSDP actor's weights (fp32 by
    # verl's default, 22.4 GB) and an attention-only r32 adapter (4.46e6 parameters).
    "qwen3-30b-a3b-8l": dict(model_type="qwen3_moe", hidden_size=2048, num_hidden_layers=8, num_attention_heads=32,
                             num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
                             moe_intermediate_size=768, norm_topk_prob=True, decoder_sparse_step=1,
                             mlp_only_layers=[], vocab_size=151936, tie_word_embeddings=False),
}
# the shapes an all-linear adapter fits (random_adapter: dense MLP projections); a mixture-of-experts shape is
# served attention-only adapters (verl_glue/config_guards.py)
DENSE_SHAPES = sorted(name for name, params in SHAPES.items() if "num_experts" not in params)
ARCHITECTURES = {"qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}
PROJ = {"self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"), "mlp": ("gate_proj", "up_proj", "down_proj")}


def checkpoint_names(state: dict[str, torch.Tensor]) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of each tensor of the architecture's checkpoint, from a model's state dict.

    transformers 5 holds a layer's experts fused (``mlp.experts.gate_up_proj`` [E, 2I, H], gate rows first, and
    ``mlp.experts.down_proj`` [E, H, I]); a Qwen3 MoE checkpoint names each expert's projections
    (``mlp.experts.<e>.gate_proj.weight`` ...), the names SGLang's loader maps and transformers converts on load."""
    out = []
    for name, t in state.items():
        prefix, _, last = name.rpartition(".")
        if prefix.endswith("mlp.experts") and t.dim() == 3 and last in ("gate_up_proj", "down_proj"):
            experts, rows, cols = t.shape
            for e in range(experts):
                if last == "gate_up_proj":
                    out += [(f"{prefix}.{e}.gate_proj.weight", (rows // 2, cols)),
                            (f"{prefix}.{e}.up_proj.weight", (rows // 2, cols))]
                else:
                    out.append((f"{prefix}.{e}.down_proj.weight", (rows, cols)))
        else:
            out.append((name, tuple(t.shape)))
    return out


def shape_config(shape: str, overrides: dict[str, Any] | None = None) -> Any:
    """The transformers config of a shape (``overrides`` replace its fields), as its checkpoint's config.json."""
    import transformers

    params = {**SHAPES[shape], **(overrides or {})}
    model_type = params.pop("model_type", "qwen3")
    # SGLang picks the model class from `architectures`; a bare config leaves it None and the launch fails.
    return transformers.AutoConfig.for_model(model_type, max_position_embeddings=4096, torch_dtype="bfloat16",
                                             architectures=[ARCHITECTURES[model_type]], **params)


def write_checkpoint(shape: str, out: Path, shard_bytes: int = 2 << 30, live: bool = False,
                     overrides: dict[str, Any] | None = None) -> Path:
    """config.json + bf16 safetensors shards with the architecture's own parameter names, all zero.

    ``live``: random embeddings / lm_head and unit norms, the rest zero, so that the logits depend on the input
    and an adapter's effect shows in the served log-probs (with all-zero weights every log-prob is the uniform
    one, adapter or not, and a served-output comparison proves nothing). On a mixture-of-experts shape the router
    is random too: each token then picks its own experts, spread over all of them as a trained router's choices
    are (an all-zero router sends every token to the same few experts, a fraction of the expert weights' cost).
    ``overrides``: config fields that replace the shape's (e.g. fewer layers)."""
    import transformers
    from safetensors.torch import save_file

    cfg = shape_config(shape, overrides)
    out.mkdir(parents=True, exist_ok=True)
    cfg.save_pretrained(out)
    with torch.device("meta"):
        meta = transformers.AutoModelForCausalLM.from_config(cfg).state_dict()
    if cfg.tie_word_embeddings:
        meta.pop("lm_head.weight", None)  # as save_pretrained writes a tied checkpoint
    shard: dict[str, torch.Tensor] = {}
    weight_map: dict[str, str] = {}
    size, total = 0, 0
    gen = torch.Generator().manual_seed(0)
    for name, dims in [*checkpoint_names(meta), (None, None)]:
        if name is not None:
            if live and name.endswith("norm.weight"):
                shard[name] = torch.ones(dims, dtype=torch.bfloat16)
            elif live and name.endswith(("embed_tokens.weight", "lm_head.weight", "mlp.gate.weight")):
                shard[name] = (torch.randn(dims, generator=gen) * 0.05).to(torch.bfloat16)
            else:
                shard[name] = torch.zeros(dims, dtype=torch.bfloat16)
            size += shard[name].numel() * 2
        if shard and (name is None or size >= shard_bytes):
            file = f"model-{len(set(weight_map.values())):05d}.safetensors"
            save_file(shard, str(out / file), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, file))
            total += size
            shard, size = {}, 0
    # the sharded-checkpoint index transformers reads (SGLang globs the shards)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index))
    return out


def model_names(model_dir: Path) -> ModelWeightNames:
    """Parameter names of the real architecture (built on the meta device, nothing allocated)."""
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return ModelWeightNames(frozenset(model.state_dict()), cfg.num_hidden_layers, bool(cfg.tie_word_embeddings))


def projection_dims(config: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(in, out) features of each linear projection of a dense Qwen3 layer, from its config's fields."""
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    h, i = config["hidden_size"], config["intermediate_size"]
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def random_adapter(model_dir: Path, rank: int, seed: int) -> list[tuple[str, torch.Tensor]]:
    """An r-rank all-linear adapter in PEFT names, on CPU (verl's FSDP engine hands adapters over on CPU)."""
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(model_dir)
    dims = projection_dims(cfg.to_dict())
    gen = torch.Generator().manual_seed(seed)
    out = []
    for layer in range(cfg.num_hidden_layers):
        for block, projs in PROJ.items():
            for p in projs:
                d_in, d_out = dims[p]
                prefix = f"base_model.model.model.layers.{layer}.{block}.{p}"
                out.append((f"{prefix}.lora_A.weight", (torch.randn(rank, d_in, generator=gen) * 0.01).bfloat16()))
                out.append((f"{prefix}.lora_B.weight", (torch.randn(d_out, rank, generator=gen) * 0.01).bfloat16()))
    return out


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def summary(samples: list[float], error: str | None) -> dict[str, Any]:
    """p50/p95 of one path, or the error that stopped it (the other paths still run)."""
    if error or not samples:
        return {"error": error or "no samples"}
    return {"p50": pct(samples, 0.5), "p95": pct(samples, 0.95), "n": len(samples)}


async def guarded(coro: Any) -> tuple[Any, str | None]:
    try:
        return await coro, None
    except Exception as exc:  # noqa: BLE001 - reported in the table, with SGLang's response body where it has one
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


async def bench_plugin(client, names, adapter, config, iters, flatten: bool | None = None,
                       phases: dict[str, list[float]] | None = None, first_version: int = 0) -> list[float]:
    """The plugin's sync, end to end; ``phases`` (if given) gets collect / build request / load / unload ms."""
    collector = AdapterCollector(torch.device("cuda"))  # persistent flat buffer, as in the sync client
    request_cls = io_struct(REQUEST_CLASS)
    times, prev = [], None
    for v in range(first_version, first_version + iters + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        flat = collector.collect(iter(adapter), names.resolve_lora)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        name = adapter_name(v)
        fields = adapter_request_fields(config, flat, tp_size=1, flatten=flatten)
        body = request_to_json(request_cls(lora_name=name, **fields))
        t2 = time.perf_counter()
        await client.load_lora_adapter_from_tensors(body)
        t3 = time.perf_counter()
        if prev:
            await client.unload_lora_adapter(prev)
        t4 = time.perf_counter()
        times.append((t4 - t0) * 1e3)
        if phases is not None and v > first_version:
            for key, dt in zip(("collect", "build_request", "load", "unload"), (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                phases.setdefault(key, []).append(dt * 1e3)
        prev = name
    await client.unload_lora_adapter(prev)
    return times[1:]  # first iteration warms the allocator and the LoRA pool


def save_peft_adapter(tensors: Iterable[tuple[str, torch.Tensor]], config: dict[str, Any], out: Path) -> Path:
    """Write ``out/adapter_model.safetensors`` and ``out/adapter_config.json``, the folder SGLang's disk load reads
    (``out`` must exist: callers that time the write create it outside the timed part)."""
    from safetensors.torch import save_file

    save_file({n: t.contiguous() for n, t in tensors}, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text(json.dumps(config))
    return out


async def bench_disk(client, adapter, config, iters, root: Path) -> list[float]:
    times, prev = [], None
    for v in range(iters + 1):
        t0 = time.perf_counter()
        d = root / f"disk_v{v}"
        d.mkdir(parents=True, exist_ok=True)
        save_peft_adapter(adapter, config, d)
        name = f"disk_v{v}"
        await client.post("load_lora_adapter", {"lora_name": name, "lora_path": str(d)})
        if prev:
            await client.unload_lora_adapter(prev)
        times.append((time.perf_counter() - t0) * 1e3)
        prev = name
    await client.unload_lora_adapter(prev)
    return times[1:]


async def bench_verl_stock(addr: str, model_dir: Path, adapter, config, iters) -> tuple[list[float], str | None]:
    """verl's own ServerAdapter.update_weights (its adapter path), run unbound against the same server."""
    try:
        from verl.workers.rollout.sglang_rollout.http_server_engine import AsyncHttpServerAdapter
        from verl.workers.rollout.sglang_rollout.sglang_rollout import ServerAdapter
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return [], f"verl import failed: {type(exc).__name__}: {exc}"

    class _Mesh:  # what verl's adapter path reads of device_mesh["infer_tp"]: TP-local rank 0 of a TP-1 mesh
        mesh = torch.arange(1)

        def __getitem__(self, _):
            return self

        def get_local_rank(self):
            return 0

    host, port = addr.split(":")
    stock = object.__new__(ServerAdapter)
    stock._engine = AsyncHttpServerAdapter(model_path=str(model_dir), host=host, port=int(port), launch_server=False)
    stock.device_mesh, stock._pd_role, stock.config = _Mesh(), None, None
    stock._has_server = True
    times = []
    try:
        for _ in range(iters):
            t0 = time.perf_counter()
            await ServerAdapter.update_weights(stock, iter(adapter), peft_config=dict(config), base_sync_done=True)
            times.append((time.perf_counter() - t0) * 1e3)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return times, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return times, None


async def bench_base_sync(client, names: ModelWeightNames, model_dir: Path, bucket_mb: int = 512) -> dict[str, float]:
    import transformers

    from sglang.srt.utils import MultiprocessingSerializer


    cfg = transformers.AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        meta = transformers.AutoModelForCausalLM.from_config(cfg).state_dict()
    tensors = [(n, torch.empty(t.shape, dtype=torch.bfloat16, device="cuda").normal_(0, 0.02)) for n, t in meta.items()]
    total = sum(t.numel() * t.element_size() for _, t in tensors)
    cls = io_struct("UpdateWeightsFromTensorReqInput")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    bucket, size = [], 0
    # one weight-update session around all buckets, as the plugin's base sync holds it (SGLang >= 0.5.23)
    async with update_session(lambda endpoint, r: client.post(endpoint, request_to_json(r))):
        for name, t in tensors + [(None, None)]:
            if name is not None:
                bucket.append((names.resolve_base(name), t))
                size += t.numel() * t.element_size()
            if bucket and (name is None or size >= bucket_mb << 20):
                req = cls(serialized_named_tensors=[MultiprocessingSerializer.serialize(bucket, output_str=True)],
                          flush_cache=False)
                await client.post("update_weights_from_tensor", request_to_json(req))
                bucket, size = [], 0
    sync_s = time.perf_counter() - t0
    src = torch.empty(total // 2, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    for _ in range(5):
        dst.copy_(src)
    torch.cuda.synchronize()
    copy_s = (time.perf_counter() - t1) / 5
    return {"bytes": total, "sync_GBps": total / sync_s / 1e9, "d2d_copy_GBps": total / copy_s / 1e9}


def bench_version_pinning(n: int = 200_000) -> float:
    """ns per request for acquire + name + release on the rollout hot path (no unloads pending)."""
    versions = AdapterVersions()
    versions.activate(adapter_name(1), 1, "fp")

    class Req:
        lora_path = None

    req = Req()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        lease = versions.acquire()
        req.lora_path = lease.name
        versions.release(lease)
    return (time.perf_counter_ns() - t0) / n


def run_shape(shape: str, iters: int, rank: int, mem: float) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"bench_{shape}_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    model_dir = write_checkpoint(shape, root / "model")
    names = model_names(model_dir)
    adapter = random_adapter(model_dir, rank, seed=0)
    config = normalize_peft_config({"r": rank, "lora_alpha": rank, "target_modules": "all-linear"})
    mib = sum(t.numel() * t.element_size() for _, t in adapter) / 2**20
    lora_args = lora_launch_args(lora_plan({"lora_rank": rank, "target_modules": "all-linear", "lora": {}}))
    server = SGLangProcess(model_dir, lora_args, mem_fraction=mem, extra=["--skip-tokenizer-init"])
    try:
        server.wait()
        client = SGLangHTTPClient(server.addr, max_attempts=1)

        phases: dict[str, list[float]] = {}
        flattened = request_shape().flattened

        async def main():
            plugin = await guarded(bench_plugin(client, names, adapter, config, iters, phases=phases))
            per_tensor = (await guarded(bench_plugin(client, names, adapter, config, iters, flatten=False,
                                                     first_version=iters + 1))) if flattened else (None, "n/a")
            disk = await guarded(bench_disk(client, adapter, config, iters, root))
            stock, stock_err = await bench_verl_stock(server.addr, model_dir, adapter, config, iters)
            base = await guarded(bench_base_sync(client, names, model_dir, 512))
            return plugin, per_tensor, disk, (stock, stock_err), base

        plugin, per_tensor, disk, stock, base = asyncio.run(main())
    finally:
        server.stop()
    return {
        "shape": shape, "rank": rank, "adapter_MiB": round(mib, 1), "tensors": len(adapter), "iters": iters,
        "plugin_wire": "flattened_bucket" if flattened else "per-tensor dict",
        "plugin_ms": summary(*plugin), "plugin_phases_p50_ms": {k: round(pct(v, 0.5), 2) for k, v in phases.items()},
        "plugin_per_tensor_ms": summary(*per_tensor) if flattened else {"error": "n/a (the release has no flattened form)"},
        "disk_ms": summary(*disk), "verl_stock_ms": summary(*stock),
        "base_sync": base[0] if base[0] is not None else {"error": base[1]},
    }


def print_table(results: list[dict[str, Any]], pin_ns: float) -> None:
    print("| shape | adapter | path | p50 ms | p95 ms |")
    print("|---|---|---|---|---|")
    for r in results:
        size = f"{r['adapter_MiB']} MiB / {r['tensors']} tensors"
        paths = (("plugin_ms", f"plugin ({r['plugin_wire']}, versioned)"),
                 ("plugin_per_tensor_ms", "plugin (per-tensor dict, versioned)"),
                 ("disk_ms", "save to disk + /load_lora_adapter"), ("verl_stock_ms", "verl stock ServerAdapter"))
        for key, label in paths:
            m = r[key]
            cells = f"fails: {m['error']} | " if "error" in m else f"{m['p50']:.1f} | {m['p95']:.1f}"
            print(f"| {r['shape']} | {size} | {label} | {cells} |")
    print()
    for r in results:
        print(f"{r['shape']} plugin phases, p50 ms: {r['plugin_phases_p50_ms']}")
    print()
    print("| shape | base bytes | update_weights_from_tensor GB/s | device copy GB/s |")
    print("|---|---|---|---|")
    for r in results:
        b = r["base_sync"]
        if "error" in b:
            print(f"| {r['shape']} | | fails: {b['error']} | |")
        else:
            print(f"| {r['shape']} | {b['bytes'] / 1e9:.2f} GB | {b['sync_GBps']:.1f} | {b['d2d_copy_GBps']:.0f} |")
    print()
    print(f"version pinning on the rollout hot path: {pin_ns:.0f} ns per request (acquire + lora_path + release)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append", choices=DENSE_SHAPES, help="repeatable; default qwen3-0.6b")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--mem-fraction", type=float, default=0.5)
    p.add_argument("--json", type=Path)
    p.add_argument("--pinning-only", action="store_true", help="only the CPU hot-path measurement (no GPU needed)")
    args = p.parse_args(argv)
    pin_ns = statistics.median(bench_version_pinning() for _ in range(5))
    if args.pinning_only:
        print(f"version pinning on the rollout hot path: {pin_ns:.0f} ns per request (acquire + lora_path + release), median of 5")
        return 0
    from verl_sglang_lora.install_advice import require_sglang

    # before a checkpoint is written and a server launched: without SGLang the server subprocess exits at once
    require_sglang("the HTTP benchmark (python -m verl_sglang_lora.benchmarks --http)")
    results = []
    for shape in args.shape or ["qwen3-0.6b"]:
        results.append(run_shape(shape, args.iters, args.rank, args.mem_fraction))
        print("result", json.dumps(results[-1]), flush=True)  # survives a later shape's failure or timeout
    print_table(results, pin_ns)
    if args.json:
        args.json.write_text(json.dumps({"results": results, "version_pinning_ns": pin_ns, "torch": torch.__version__}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
