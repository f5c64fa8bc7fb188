"""What rollout decode throughput serving a LoRA adapter costs, per SGLang LoRA backend (needs a GPU).

    python -m verl_sglang_lora.tools.lora_throughput --shape qwen3-8b --rank 32 [--backend csgmv] [--json out.json]

For every ``--lora-backend`` choice the installed SGLang declares in its ServerArgs CLI (``--backend`` restricts
them), one in-process ``sglang.Engine`` is launched on a checkpoint of the shape written by
``benchmarks.write_checkpoint(live=True)``, with the plugin's LoRA launch arguments (all linear modules,
``max_lora_rank`` = ``--rank``), that backend, and CUDA graphs on (SGLang's default). One random non-zero PEFT
adapter of rank ``--rank`` is loaded from disk with ``load_lora_adapter``. Decode throughput at a fixed length:
``--batch`` prompts of ``--prompt-len`` random token ids, ``--gen-len`` new tokens each (``ignore_eos``,
temperature 1.0), timed over ``--iters`` batches after one warm-up, once without an adapter (base) and once with
it; tokens/s = batch * gen_len / seconds. ``--batch`` repeats: each size is timed on the same engine, one row per
backend and size (a launch costs more than the timing). A cheap correctness check: the adapter must change the served
log-probs of a prompt against the base model. Each backend that fails is a row with its error.

One more engine, LORA_OFF, runs without ``--enable-lora`` (base only): a LoRA-enabled engine pays for its LoRA
layers even on requests without an adapter, so its "base" is not the plain model's (``--no-lora-off`` skips it).

Goal: adapter throughput >= 85% of base. The backend named "fastest" is the one with the highest adapter/base
ratio (ties: higher adapter tokens/s) -- the candidate for the plugin's default.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from verl_sglang_lora.sglang_contract.lora_backends import declared_lora_backends

GOAL_RATIO = 0.85
LORA_OFF = "lora off"  # the row of the engine launched without LoRA: the plain base model's throughput


def select_backends(declared: list[str], wanted: list[str] | None) -> list[str]:
    """The declared backends, restricted to ``wanted`` (kept in declared order); unknown names are an error."""
    if not wanted:
        return list(declared)
    unknown = [b for b in wanted if b not in declared]
    if unknown:
        raise SystemExit(f"--backend {unknown} not among the installed SGLang's choices {declared}")
    return [b for b in declared if b in wanted]


def tokens_per_s(batch: int, gen_len: int, seconds: list[float]) -> float:
    """Decode tokens per second over all timed iterations (each iteration decodes batch * gen_len tokens)."""
    total = sum(seconds)
    if total <= 0:
        raise ValueError("no positive time measured")
    return batch * gen_len * len(seconds) / total


def make_row(backend: str, batch: int, gen_len: int, base_s: list[float] | None, adapter_s: list[float] | None,
             changes_logprobs: bool | None = None, error: str | None = None) -> dict[str, Any]:
    """One JSON row from raw timings; a row with ``error`` keeps whatever was measured before it."""
    base = round(tokens_per_s(batch, gen_len, base_s), 1) if base_s else None
    adapter = round(tokens_per_s(batch, gen_len, adapter_s), 1) if adapter_s else None
    ratio = round(adapter / base, 4) if base and adapter else None
    return {"backend": backend, "batch": batch, "base_tok_s": base, "adapter_tok_s": adapter,
            "adapter_over_base": ratio, "meets_goal": None if ratio is None else ratio >= GOAL_RATIO,
            "adapter_changes_logprobs": changes_logprobs, "base_s": base_s, "adapter_s": adapter_s, "error": error}


def adapter_ms_per_step(row: dict[str, Any], gen_len: int) -> float | None:
    """What the adapter adds to one decode step of the batch, in ms: (adapter - base seconds per batch) / gen_len
    (the prompt's prefill is inside both timings, its share included)."""
    base, adapter = row.get("base_s"), row.get("adapter_s")
    if not base or not adapter or not gen_len:
        return None
    return (sum(adapter) / len(adapter) - sum(base) / len(base)) * 1000.0 / gen_len


def adapter_bytes_per_step(shape: str, rank: int, modules: str | list[str] = "all-linear") -> int:
    """Bytes of the adapter's A and B matrices (bf16) on a dense shape: what each decode step has to read."""
    from verl_sglang_lora.tools.benchmarks import SHAPES, projection_dims

    dims = projection_dims(SHAPES[shape])
    names = list(dims) if modules == "all-linear" else modules
    return 2 * rank * SHAPES[shape]["num_hidden_layers"] * sum(sum(dims[m]) for m in names)


def fastest(rows: list[dict[str, Any]]) -> str | None:
    """The backend with the highest adapter/base ratio among error-free rows whose adapter changed the served
    log-probs (a backend that ignores the adapter is fast and wrong; ties: higher adapter tokens/s)."""
    ok = [r for r in rows if not r.get("error") and r.get("adapter_over_base") is not None
          and r.get("adapter_changes_logprobs") is True]
    if not ok:
        return None
    return max(ok, key=lambda r: (r["adapter_over_base"], r["adapter_tok_s"]))["backend"]


def fastest_by_batch(rows: list[dict[str, Any]]) -> dict[Any, str | None]:
    """``fastest`` among the rows of each batch size, in the rows' order of sizes."""
    return {b: fastest([r for r in rows if r.get("batch") == b]) for b in dict.fromkeys(r.get("batch") for r in rows)}


def format_table(rows: list[dict[str, Any]], gen_len: int | None = None) -> str:
    """Markdown table of the rows plus the "fastest" line; with ``gen_len``, what the adapter adds per decode step."""

    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, bool):
            return "yes" if v else "NO"
        return f"{v:.3f}" if isinstance(v, float) and v < 10 else str(v)

    plain = {r.get("batch"): r["base_tok_s"] for r in rows if r["backend"] == LORA_OFF}
    step = " adapter ms per decode step |" if gen_len else ""
    lines = ["| backend | batch | base tok/s | adapter tok/s | adapter/base | adapter/LoRA-off base | adapter changes "
             f"log-probs | error |{step}", "|---|---|---|---|---|---|---|---|" + ("---|" if gen_len else "")]
    for r in rows:
        off = plain.get(r.get("batch"))
        vs_plain = round(r["adapter_tok_s"] / off, 4) if off and r["adapter_tok_s"] else None
        ms = adapter_ms_per_step(r, gen_len) if gen_len else None
        lines.append(f"| {r['backend']} | {cell(r.get('batch'))} | {cell(r['base_tok_s'])} | "
                     f"{cell(r['adapter_tok_s'])} | {cell(r['adapter_over_base'])} | {cell(vs_plain)} | "
                     f"{cell(r['adapter_changes_logprobs'])} | {(r.get('error') or '').replace('|', '/')} |"
                     + (f" {cell(None if ms is None else round(ms, 3))} |" if gen_len else ""))
    lines.append("")
    for batch, best in fastest_by_batch(rows).items():
        at = "" if batch is None else f" at batch {batch}"
        lines.append(f"fastest{at}: {best if best else 'none (every backend failed)'} "
                     f"(goal: adapter/base >= {GOAL_RATIO})")
    return "\n".join(lines)


def report(rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """The JSON document: run settings, rows, and the fastest backend per batch size (``fastest``: at the first)."""
    by_batch = {str(b): best for b, best in fastest_by_batch(rows).items()}
    return {**meta, "goal_adapter_over_base": GOAL_RATIO, "rows": rows,
            "fastest": next(iter(by_batch.values()), None), "fastest_by_batch": by_batch}


def target_modules(arg: str) -> str | list[str]:
    """``all-linear`` or a comma-separated list of projection names (``q_proj,k_proj,v_proj,o_proj``)."""
    return arg if arg == "all-linear" else [m.strip() for m in arg.split(",") if m.strip()]


def write_adapter(model_dir: Path, rank: int, out: Path, modules: str | list[str] = "all-linear") -> Path:
    """A random non-zero PEFT adapter (safetensors + adapter_config.json) on ``modules`` of the shape."""
    from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config
    from verl_sglang_lora.tools.benchmarks import random_adapter, save_peft_adapter

    out.mkdir(parents=True, exist_ok=True)
    config = normalize_peft_config({"r": rank, "lora_alpha": 2 * rank, "target_modules": modules})
    tensors = [(name, t) for name, t in random_adapter(model_dir, rank, seed=1)
               if modules == "all-linear" or name.split(".")[-3] in modules]
    return save_peft_adapter(tensors, config, out)


def error_text(exc: BaseException) -> str:
    first = str(exc).splitlines()[0][:240] if str(exc) else ""
    return f"{type(exc).__name__}: {first}"


def measure_backend(backend: str, model_dir: Path, adapter_dir: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Launch one engine with ``backend``, time base and adapter decode at each batch size, shut it down; one row
    per batch size. An error becomes the row's of the size it hit and of every size after it."""
    import sglang

    from verl_sglang_lora.runtime.lora_plan import lora_plan
    from verl_sglang_lora.sglang_contract.errors import request_outcome
    from verl_sglang_lora.sglang_contract.launch_args import lora_launch_args
    from verl_sglang_lora.benchmarks import engine_args
    from verl_sglang_lora.tools.sync_matrix import logprobs

    rows: list[dict[str, Any]] = []
    lora = backend != LORA_OFF
    changes: bool | None = None
    engine = None
    batch, base_s, adapter_s = args.batch[0], [], []
    try:
        plan = lora_plan({"lora_rank": args.rank, "target_modules": target_modules(args.target_modules), "lora": {}})
        launch = {**lora_launch_args(plan, max_lora_rank=args.rank), "lora_backend": backend} if lora else {}
        engine = sglang.Engine(model_path=str(model_dir), mem_fraction_static=args.mem, skip_tokenizer_init=True,
                               skip_server_warmup=True, log_level="warning", **launch,
                               **engine_args(args.engine_arg, cuda_graph=True))
        if lora:
            ok, message = request_outcome(engine.load_lora_adapter("bench", str(adapter_dir)))
            if not ok:
                raise RuntimeError(f"load_lora_adapter: {message}")
        vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
        rng = random.Random(0)
        prompts = [[rng.randrange(vocab) for _ in range(args.prompt_len)] for _ in range(max(args.batch))]
        params = {"max_new_tokens": args.gen_len, "ignore_eos": True, "temperature": 1.0}

        def first_logprobs(name: str | None) -> list[float]:
            reply = engine.generate(input_ids=prompts[0], return_logprob=True, logprob_start_len=0, lora_path=name,
                                    sampling_params={"max_new_tokens": 1, "temperature": 0.0})
            return logprobs(reply)

        if lora:
            base_lp, adapter_lp = first_logprobs(None), first_logprobs("bench")
            changes = len(base_lp) == len(adapter_lp) and max(abs(a - b) for a, b in zip(base_lp, adapter_lp)) > 1e-3

        def timed(name: str | None, n: int) -> float:
            t0 = time.perf_counter()
            engine.generate(input_ids=prompts[:n], sampling_params=params,
                            lora_path=None if name is None else [name] * n)
            return time.perf_counter() - t0

        for batch in args.batch:
            base_s, adapter_s = [], []
            for name, samples in [(None, base_s), ("bench", adapter_s)] if lora else [(None, base_s)]:
                timed(name, batch)  # warm-up: CUDA graph replay paths and the adapter's pool slot
                samples.extend(timed(name, batch) for _ in range(args.iters))
            rows.append(make_row(backend, batch, args.gen_len, base_s, adapter_s or None, changes))
    except Exception as exc:  # noqa: BLE001 - a failing backend is a row with its error, the others go on
        rows += [make_row(backend, b, args.gen_len, (base_s or None) if b == batch else None,
                          (adapter_s or None) if b == batch else None, changes, error=error_text(exc))
                 for b in args.batch[args.batch.index(batch):]]
    finally:
        if engine is not None:
            try:
                engine.shutdown()
            except Exception as exc:  # noqa: BLE001 - the next backend launches its own engine regardless
                print(f"{backend}: engine shutdown failed ({error_text(exc)}); the next backend may find the GPU "
                      "memory still held", flush=True)
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from verl_sglang_lora.tools.benchmarks import DENSE_SHAPES

    p = argparse.ArgumentParser(prog="python -m verl_sglang_lora.tools.lora_throughput",
                                description="Decode throughput with and without a LoRA adapter, per SGLang LoRA "
                                            "backend (needs a GPU).")
    p.add_argument("--shape", choices=DENSE_SHAPES, default="qwen3-8b")
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--backend", action="append", help="restrict to these backends (repeatable)")
    p.add_argument("--target-modules", default="all-linear",
                   help="all-linear, or projections, e.g. q_proj,k_proj,v_proj,o_proj (attention only)")
    p.add_argument("--batch", type=int, action="append",
                   help="prompts per timed batch (repeatable: each size on the same engine; default 64)")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--gen-len", type=int, default=256)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--mem", type=float, default=0.8, help="mem_fraction_static")
    p.add_argument("--engine-arg", action="append", default=[],
                   help="key=value for sglang.Engine (repeatable), e.g. attention_backend=triton")
    p.add_argument("--no-lora-off", action="store_true",
                   help="skip the engine without LoRA (the plain base model's throughput)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    args.batch = args.batch or [64]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    declared, default = declared_lora_backends()
    backends = select_backends(declared, args.backend)
    print(f"SGLang --lora-backend choices: {declared} (default {default}); measuring {backends}", flush=True)

    from verl_sglang_lora.tools.benchmarks import write_checkpoint

    root = Path(tempfile.mkdtemp(prefix="lora_tput_"))
    try:
        model_dir = write_checkpoint(args.shape, root / "model", live=True)
        adapter_dir = write_adapter(model_dir, args.rank, root / "adapter", target_modules(args.target_modules))
        rows = []
        for backend in backends + ([] if args.no_lora_off else [LORA_OFF]):
            for row in measure_backend(backend, model_dir, adapter_dir, args):
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k not in ("base_s", "adapter_s")}), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(format_table(rows, args.gen_len))
    print(f"adapter weights read per decode step: "
          f"{adapter_bytes_per_step(args.shape, args.rank, target_modules(args.target_modules)) / 1e6:.1f} MB")
    if args.json:
        meta = {"shape": args.shape, "rank": args.rank, "target_modules": args.target_modules,
                "batch": args.batch if len(args.batch) > 1 else args.batch[0],
                "prompt_len": args.prompt_len, "gen_len": args.gen_len, "iters": args.iters,
                "declared_backends": declared, "default_backend": default}
        args.json.write_text(json.dumps(report(rows, meta), indent=2))
    return 0 if any(not r["error"] for r in rows if r["backend"] != LORA_OFF) else 1


if __name__ == "__main__":
    raise SystemExit(main())
