"""The adapter-sync matrix: every way an adapter version can reach SGLang, side by side, on one GPU (docs/benchmarks.md).

    python -m verl_sglang_lora.benchmarks --shape qwen3-0.6b --shape qwen3-8b --rank 8 --rank 32 --rank 128 \\
        --iters 30 --json h200.json

One process; per shape and rank one in-process ``sglang.Engine`` (the plugin's server actor talks to the same
tokenizer manager, no HTTP; the scheduler runs in its own process, so CUDA IPC is exercised as in a run), launched with
the plugin's own LoRA arguments for that rank (``max_lora_rank`` = the adapter's rank, as the plugin launches it;
resident slots on: ``max_loras_per_batch=3``, the custom weight loader). One engine per shape at the largest rank
measured something no run does: a smaller adapter in a wider pool slot makes the slot's lora_B views strided (half
the copy pairs, checked on CPU against SGLang's real pool), which takes torch's fused copy off its fast path. Per rank, the paths run in
turn inside every iteration, so a drift of the machine hits all of them alike. Each path starts with the new version
already in the trainer's persistent flat device buffer and ends when SGLang serves it; then one 1-token request with
that adapter: its time minus the control's is the first-batch penalty (the lazy pool fill of a freshly loaded adapter
lands there). The control is the same request at the start of each iteration after an idle gap as long as an
in-place sync, with no sync. (Against back-to-back requests the H200 measured +13 ms after an in-place write, which
moves no data on the request path; whether a request in that loop position without a sync is as slow is what the
control decides.)

Paths: ``inplace`` (the resident write + the loader's byte-exact check against the trainer's buffer; requests then
carry the slot's new version in ``extra_key`` as the plugin's do, so no prefix-cache flush: runtime/sync/prefix_tags.py),
``versioned`` (the plugin's load of a new adapter name from the device buffer through
``load_lora_adapter_from_tensors``, unload of the previous one), ``disk`` (safetensors + ``load_lora_adapter``), verl
0.9.1's stock ``ServerAdapter.update_weights`` adapter path (its own code; its ``_engine`` calls forwarded to the same
tokenizer manager -- its exact error where it fails), and the copy floors (device-to-device and pinned host-to-device
copies of the same bytes).
Correctness: the written slot byte-compared with SGLang's own load of the
same adapter, and the log-probs served through it against that load's and the base model's; the last versioned and
disk loads verified in the pool against the tensors they came from (the loader's ``verify``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from verl_sglang_lora.runtime.sync.prefix_tags import PrefixTags
from verl_sglang_lora.sglang_contract.errors import request_outcome
from verl_sglang_lora.sglang_contract.installed import io_struct as sglang_struct
from verl_sglang_lora.tools.benchmarks import pct

PATHS = ("inplace", "versioned", "disk", "verl_stock")
PROMPT_IDS = [(17 * i + 3) % 1000 + 10 for i in range(24)]  # token ids: the checkpoints carry no tokenizer


@dataclass
class PathTimes:
    """One path's samples: sync ms, first request after the sync ms; or the error that stopped it."""

    sync: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    phases: dict[str, list[float]] = field(default_factory=dict)  # where a path's sync time goes, per sample
    error: str | None = None

    def phase(self, **ms: float) -> None:
        for name, value in ms.items():
            self.phases.setdefault(name, []).append(value)

    def row(self, control_ms: float, nbytes: int) -> dict[str, Any]:
        """``control_ms``: the median first request of the control (same loop position, no sync)."""
        if self.error or not self.sync:
            return {"error": self.error or "no samples"}
        p50 = pct(self.sync, 0.5)
        first = pct(self.first, 0.5) if self.first else None
        return {"n": len(self.sync), "p50_ms": round(p50, 3), "p95_ms": round(pct(self.sync, 0.95), 3),
                "max_ms": round(max(self.sync), 3), "GBps": round(nbytes / p50 / 1e6, 2),
                "first_request_ms": None if first is None else round(first, 3),
                "first_batch_penalty_ms": None if first is None else round(first - control_ms, 3),
                "phases_p50_ms": {k: round(pct(v, 0.5), 3) for k, v in self.phases.items()}}


def guard(times: PathTimes, fn: Callable[[], None]) -> None:
    """Run one path's iteration; its first error ends that path only (reported in its row)."""
    if times.error is not None:
        return
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - a failing path is a row with its error, the others go on
        times.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:240] if str(exc) else ''}"


class EngineBench:
    """One shape: the engine, the trainer side's buffers, and one timed call per path."""

    def __init__(self, model_dir: Path, max_rank: int, mem: float, extra: dict[str, Any]) -> None:
        import sglang

        from verl_sglang_lora.runtime.lora_plan import lora_plan
        from verl_sglang_lora.sglang_contract.launch_args import lora_launch_args
        from verl_sglang_lora.sglang_contract.lora_backends import plugin_lora_backend

        plan = lora_plan({"lora_rank": max_rank, "target_modules": "all-linear", "lora": {}})
        args = lora_launch_args(plan, resident=True, lora_backend=plugin_lora_backend())  # as the server actor
        # SGLANG_GRPC_PORT stays unset: the in-process engine keeps ServerArgs' port 30000 (0.5.12 derives gRPC port
        # 40000 from it, in range), and on 0.5.23 setting the variable starts SGLang's native gRPC server
        self.engine = sglang.Engine(model_path=str(model_dir), mem_fraction_static=mem, skip_tokenizer_init=True,
                                    skip_server_warmup=True, log_level="warning", **args, **extra)
        self.tm = self.engine.tokenizer_manager
        self.model_dir = model_dir
        self.tags = PrefixTags()

    def run(self, coro: Any) -> Any:
        return self.engine.loop.run_until_complete(coro)

    def request(self, lora: str | None, new_tokens: int = 1) -> dict:
        """One request as the plugin's server actor sends it: through the tokenizer manager, keyed by version."""
        obj = sglang_struct("GenerateReqInput")(input_ids=list(PROMPT_IDS), lora_path=lora, return_logprob=True,
                                                logprob_start_len=0,
                                                sampling_params={"max_new_tokens": new_tokens, "temperature": 0.0})
        self.tags.tag(obj)

        async def last() -> dict:
            out = None
            async for out in self.tm.generate_request(obj, None):
                pass
            return out

        return self.run(last())

    def timed_request(self, lora: str | None) -> float:
        t0 = time.perf_counter()
        self.request(lora)
        return (time.perf_counter() - t0) * 1e3

    def call(self, method: str, obj: Any) -> Any:
        """A tokenizer-manager request; SGLang's refusal raised with its message."""
        return self.run(self.acall(method, obj))

    async def acall(self, method: str, obj: Any) -> Any:
        out = await getattr(self.tm, method)(obj, None)
        ok, message = request_outcome(out)
        if not ok:
            raise RuntimeError(f"{method}: {message}")
        return out

    def stop(self) -> None:
        self.engine.shutdown()


def logprobs(reply: dict) -> list[float]:
    meta = reply["meta_info"]
    return [float(x[0]) for x in meta["input_token_logprobs"] if x[0] is not None] + \
        [float(x[0]) for x in meta["output_token_logprobs"]]


def run_rank(bench: EngineBench, rank: int, iters: int, warmup: int, workdir: Path,
             settle_ms: float = 0.0) -> dict[str, Any]:
    """Every path for one adapter rank (slots created for it, dropped after). ``settle_ms``: an idle gap before each
    path's sync (in a run the sync follows a training step, not a request)."""
    from sglang.srt.managers import io_struct

    from verl_sglang_lora.runtime.resident import LOADER_PATH
    from verl_sglang_lora.runtime.resident.requests import (SLOTS, ResidentRequests, attach_summary, check_results,
                                                             send_loader_request, write_targets)
    from verl_sglang_lora.sglang_contract.update_session import HeldSession
    from verl_sglang_lora.runtime.sync.adapter_push import adapter_request_fields
    from verl_sglang_lora.runtime.sync.flat_adapter import AdapterCollector
    from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config
    from verl_sglang_lora.tools.benchmarks import model_names, random_adapter, save_peft_adapter

    try:
        from verl.workers.rollout.sglang_rollout.utils import SGLANG_LORA_NAME
    except ImportError:  # reported by the stock row itself
        SGLANG_LORA_NAME = "verl_actor_lora_name"

    names = model_names(bench.model_dir)
    versions = [random_adapter(bench.model_dir, rank, seed) for seed in (1, 2)]
    config = normalize_peft_config({"r": rank, "lora_alpha": 2 * rank, "target_modules": "all-linear"})
    scaling = config["lora_alpha"] / config["r"]
    collector = AdapterCollector(torch.device("cuda"))
    flat = collector.collect(iter(versions[0]), names.resolve_lora)
    nbytes = flat.nbytes
    load_cls = io_struct.LoadLoRAAdapterFromTensorsReqInput

    def load_tensors(name: str, pinned: bool = False) -> None:
        fields = adapter_request_fields(config, flat, tp_size=1)
        bench.call("load_lora_adapter_from_tensors", load_cls(lora_name=name, pinned=pinned, **fields))

    def unload(name: str) -> None:
        bench.call("unload_lora_adapter", io_struct.UnloadLoRAAdapterReqInput(lora_name=name))

    session = HeldSession()  # SGLang >= 0.5.23: one weight-update session held across the writes, as the server

    session_calls_ms: dict[str, float] = {}  # the last send's requests, each round trip

    async def timed_acall(method: str, obj: Any) -> Any:
        t = time.perf_counter()
        try:
            return await bench.acall(method, obj)
        finally:
            session_calls_ms[method] = (time.perf_counter() - t) * 1e3

    def send(calls: list) -> None:
        session_calls_ms.clear()
        for c in calls:  # as the server actor sends it
            bench.run(send_loader_request(timed_acall, c.blobs, LOADER_PATH, session))

    def check(calls: list) -> None:
        failed = check_results(calls, scaling)
        if failed:
            raise RuntimeError(failed)

    def loader(calls: list) -> None:
        send(calls)
        check(calls)

    # slots: SGLang's own load of version 0 into both, the plan attached and checked against it (as at a launch)
    requests = ResidentRequests(torch.device("cuda"))
    for slot in SLOTS:
        load_tensors(slot, pinned=True)
    attach = requests.attach(flat.tensors, 0, flat.flat)
    loader(attach)
    served = {"slot": SLOTS[0]}
    summary = attach_summary(attach)
    paths = PATHS
    times = {p: PathTimes() for p in paths}
    prev = {"versioned": None, "disk": None}
    try:
        stock = stock_adapter(bench, config)
    except Exception as exc:  # noqa: BLE001 - e.g. verl not importable: the stock row says so
        times["verl_stock"].error = f"{type(exc).__name__}: {exc}"
        stock = None

    def refill(i: int) -> None:
        nonlocal flat
        flat = collector.collect(iter(versions[i % 2]), names.resolve_lora)
        torch.cuda.synchronize()

    def timed_call(build: Callable[[], Any], into: PathTimes | None) -> float:
        """Build one loader call, send it, check its answer; its phases into ``into`` (None: warm-up): the client's
        build, the round trip split at the loader's entry stamp (same host clock) into the way in, the loader (its
        work, before it reports) and the way back (the report's two small copies and sync, SGLang's answer), and the
        client's check (reading the answer)."""
        t0 = time.perf_counter()
        call = build()
        t1, sent_ns = time.perf_counter(), time.time_ns()
        send([call])
        t_back = time.perf_counter()
        check([call])
        t_checked = time.perf_counter()
        if into is not None:
            result = call.result()
            round_trip, inbound = (t_back - t1) * 1e3, (result["start_wall_ns"] - sent_ns) / 1e6
            loader_ms = result["total_ns"] / 1e6
            into.phase(build_ms=(t1 - t0) * 1e3, build_sync_ms=call.build_ms["sync"],
                       build_serialize_ms=call.build_ms["serialize"], round_trip_ms=round_trip, inbound_ms=inbound,
                       loader_ms=loader_ms, loader_copy_ms=result["copy_ns"] / 1e6,
                       loader_verify_ms=result["verify_ns"] / 1e6,
                       outbound_ms=round_trip - inbound - loader_ms, check_ms=(t_checked - t_back) * 1e3)
            if "begin_weight_update" in session_calls_ms:  # the held session had to be opened again (should not)
                into.phase(session_begin_ms=session_calls_ms["begin_weight_update"])
        return (t_checked - t0) * 1e3

    written: dict[str, str] = {}  # the slot each in-place path wrote last (the two alternate)

    def inplace(i: int, path: str = "inplace") -> float:
        (slot,) = write_targets(served["slot"])  # the slot not served, as the client picks it
        t0 = time.perf_counter()
        # the idle slot's call only, as the client
        timed_call(lambda: requests.writes(1000 + i, (slot,))[slot], times[path] if i >= warmup else None)
        written[path] = slot
        bench.tags.set(slot, 1000 + i)  # as the server actor does: no flush, the slot's requests get a new key
        served["slot"] = slot
        return (time.perf_counter() - t0) * 1e3

    def versioned(i: int) -> float:
        name = f"bench_v{rank}_{i}"
        t0 = time.perf_counter()
        load_tensors(name)
        if prev["versioned"]:
            unload(prev["versioned"])
        prev["versioned"] = name
        return (time.perf_counter() - t0) * 1e3

    def disk(i: int) -> float:
        name = f"bench_disk{rank}_{i}"
        d = workdir / name
        d.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        save_peft_adapter(flat.tensors.items(), config, d)
        bench.call("load_lora_adapter", io_struct.LoadLoRAAdapterReqInput(lora_name=name, lora_path=str(d)))
        if prev["disk"]:
            unload(prev["disk"])
            shutil.rmtree(workdir / prev["disk"], ignore_errors=True)  # /dev/shm is host memory: ~0.7 GB an 8B r128
        prev["disk"] = name
        return (time.perf_counter() - t0) * 1e3

    def verl_stock(i: int) -> float:
        t0 = time.perf_counter()
        stock(list(flat.tensors.items()))
        return (time.perf_counter() - t0) * 1e3

    served_name = {"inplace": lambda: served["slot"], "versioned": lambda: prev["versioned"],
                   "disk": lambda: prev["disk"], "verl_stock": lambda: SGLANG_LORA_NAME}
    fns = {"inplace": inplace, "versioned": versioned, "disk": disk, "verl_stock": verl_stock}
    control: list[float] = []
    for i in range(warmup + iters):
        refill(i)
        # the control: the same place in the loop and an idle gap as long as an in-place sync, no sync; its
        # request (fresh key: cold prefix, warm pool) is the baseline of the first-batch penalty, so machine
        # effects of the interleaving (idle GPU clocks, a scheduler woken from idle) are not charged to a path
        time.sleep((times["inplace"].sync[-1] if times["inplace"].sync else 4.0) / 1e3)
        bench.tags.set(served["slot"], -1 - i)
        first = bench.timed_request(served["slot"])
        if i >= warmup:
            control.append(first)
        for path in paths:
            def one(path: str = path) -> None:
                if settle_ms:
                    time.sleep(settle_ms / 1e3)
                ms = fns[path](i)
                first = bench.timed_request(served_name[path]())
                if i >= warmup:
                    times[path].sync.append(ms)
                    times[path].first.append(first)
            guard(times[path], one)

    steady = []  # back-to-back requests, for reference: the floor of a request on this engine
    for i in range(warmup + iters):
        bench.tags.set(served["slot"], -10_000 - i)
        t0 = time.perf_counter()
        bench.request(served["slot"])
        if i >= warmup:
            steady.append((time.perf_counter() - t0) * 1e3)
    control_ms = pct(control, 0.5)
    floors = copy_floors(flat.flat, iters)
    # each in-place path's last slot (both hold the last version) against SGLang's own load of it
    correct = {path: check_slot(bench, requests, slot, load_tensors, send) for path, slot in written.items()}
    loads_proven: dict[str, PathTimes] = {}  # the last versioned and disk loads, byte for byte against their tensors
    for path in ("versioned", "disk"):
        if prev[path]:
            loads_proven[path] = PathTimes()
            guard(loads_proven[path], lambda path=path: loader(
                [requests.call("verify", prev[path], flat.tensors, allow_unpinned=1)]))
    closed = PathTimes()  # the held session closed as the server closes it (before a base sync, after a fallback)
    guard(closed, lambda: bench.run(session.close(bench.acall)))
    for name in [*SLOTS, prev["versioned"], prev["disk"]]:
        if name:
            guard(PathTimes(), lambda name=name: unload(name))
    rows = []
    for path in paths:
        row = {"rank": rank, "path": path, "bytes": nbytes, "tensors": len(flat.entries), **times[path].row(control_ms, nbytes)}
        row["correct"] = correct[path]["ok"] if path in correct else None
        if path == "verl_stock":
            row["stock_client"] = stock_client_state()
        if path in loads_proven:  # SGLang's own load of the last version, verified in the pool (loader op=verify)
            row["correct"] = loads_proven[path].error is None
            row["correct_detail"] = loads_proven[path].error or "pool bytes == the tensors sent (op=verify)"
        rows.append(row)
    for path, samples in floors.items():
        p50 = pct(samples, 0.5)
        rows.append({"rank": rank, "path": path, "bytes": nbytes, "n": len(samples), "p50_ms": round(p50, 4),
                     "p95_ms": round(pct(samples, 0.95), 4), "max_ms": round(max(samples), 4),
                     "GBps": round(nbytes / p50 / 1e6, 1), "first_batch_penalty_ms": None, "correct": None})
    for row in rows:
        for base in ("versioned", "disk"):
            ref = next((r for r in rows if r["path"] == base and "p50_ms" in r), None)
            if ref is not None and "p50_ms" in row and row["path"] in paths:
                row[f"speedup_vs_{base}"] = round(ref["p50_ms"] / row["p50_ms"], 2)
    return {"rank": rank, "rows": rows, "steady_request_ms": round(pct(steady, 0.5), 3),
            "control_request_ms": round(control_ms, 3), "correctness": correct, "attach": summary,
            "held_session_close": (closed.error or "closed") if session.required else None}


def stock_client_state() -> str:
    """Whether stock verl can build its own HTTP client on the installed SGLang (the timed row forwards its engine
    calls in-process, so it runs either way; a user's stock run does not)."""
    from verl_sglang_lora.verl_glue.http_engine import missing_methods

    try:
        from verl.workers.rollout.sglang_rollout.http_server_engine import AsyncHttpServerAdapter
    except Exception as exc:  # noqa: BLE001
        return f"not importable: {type(exc).__name__}: {exc}"
    missing = missing_methods(AsyncHttpServerAdapter)
    if not missing:
        return "instantiable"
    return (f"abstract under this SGLang's EngineBase (lacks {', '.join(missing)}): stock verl raises TypeError at "
            "its first sync; these figures are its adapter code with the engine calls forwarded")


def stock_adapter(bench: EngineBench, config: dict) -> Callable[[list], None]:
    """verl 0.9.1's ``ServerAdapter.update_weights`` adapter path, its own code, with its ``_engine`` calls forwarded
    to the engine's tokenizer manager (the handlers its HTTP requests reach)."""
    from verl.workers.rollout.sglang_rollout.sglang_rollout import ServerAdapter

    class _Forward:  # the four _engine calls of verl's adapter path
        async def available_models(self) -> Any:  # what /v1/models lists: the adapters SGLang holds
            registry = getattr(getattr(bench.tm, "lora_registry", None), "_registry", {}) or {}
            return {"data": [{"id": name} for name in registry]}

        async def unload_lora_adapter(self, name: str) -> Any:
            from sglang.srt.managers import io_struct

            return await bench.tm.unload_lora_adapter(io_struct.UnloadLoRAAdapterReqInput(lora_name=name), None)

        async def load_lora_adapter_from_tensor(self, req: Any) -> Any:
            out = await bench.tm.load_lora_adapter_from_tensors(req, None)
            ok, message = request_outcome(out)
            if not ok:
                raise RuntimeError(message)
            return out

        async def flush_cache(self) -> Any:  # after the load (a full prefix-cache flush on every sync)
            return await bench.tm.flush_cache()

    class _Mesh:  # device_mesh["infer_tp"]: TP-local rank 0 of a TP-1 mesh
        mesh = torch.arange(1)

        def __getitem__(self, _: Any) -> "_Mesh":
            return self

        def get_local_rank(self) -> int:
            return 0

    stock = object.__new__(ServerAdapter)
    stock._engine, stock.device_mesh, stock._pd_role, stock.config, stock._has_server = _Forward(), _Mesh(), None, None, True

    def sync(tensors: list) -> None:
        bench.run(ServerAdapter.update_weights(stock, iter(tensors), peft_config=dict(config), base_sync_done=True))

    return sync


def copy_floors(flat: torch.Tensor, iters: int) -> dict[str, list[float]]:
    """Device-to-device and pinned host-to-device copies of the adapter's bytes."""
    dst = torch.empty_like(flat)
    host = torch.empty(flat.numel(), dtype=torch.uint8, pin_memory=True)
    out: dict[str, list[float]] = {"d2d_copy_floor": [], "pinned_h2d_copy_floor": []}
    for _ in range(3 + iters):
        for key, src in (("d2d_copy_floor", flat), ("pinned_h2d_copy_floor", host)):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
            out[key].append((time.perf_counter() - t0) * 1e3)
    return {k: v[3:] for k, v in out.items()}


def check_slot(bench: EngineBench, requests: Any, slot: str, load_tensors: Callable, send: Callable) -> dict:
    """The served slot against SGLang's own load of the same bytes: byte-exact, and the served log-probs (greedy,
    8 tokens: decode steps replay CUDA graphs when they are on) equal to that load's and different from the base."""
    from sglang.srt.managers import io_struct

    ref = "bench_reference"
    out: dict[str, Any] = {}
    try:
        load_tensors(ref)
        bench.request(ref)  # resident in the pool
        call = requests.call("compare", slot, ref=ref)
        send([call])  # unchecked: a mismatch is this row's finding, not an exception
        result = call.result()
        out["mismatches"] = 0 if result["ok"] else (result["message"].count("\n") + 1)
        bench.engine.flush_cache()
        slot_lp, ref_lp, base_lp = (logprobs(bench.request(n, 8)) for n in (slot, ref, None))
        out["max_abs_diff_vs_own_load"] = max(abs(a - b) for a, b in zip(slot_lp, ref_lp))
        out["max_abs_diff_vs_base"] = max(abs(a - b) for a, b in zip(slot_lp, base_lp))
        out["ok"] = out["mismatches"] == 0 and out["max_abs_diff_vs_own_load"] == 0.0 and \
            out["max_abs_diff_vs_base"] > 0.0
        bench.call("unload_lora_adapter", io_struct.UnloadLoRAAdapterReqInput(lora_name=ref))
    except Exception as exc:  # noqa: BLE001 - reported in the row
        out.update(ok=False, error=f"{type(exc).__name__}: {exc}")
    return out


def run_shape(shape: str, ranks: list[int], iters: int, warmup: int, mem: float, extra: dict[str, Any],
              settle_ms: float = 0.0) -> dict:
    from verl_sglang_lora.tools.benchmarks import write_checkpoint

    root = Path(tempfile.mkdtemp(prefix=f"matrix_{shape}_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    model_dir = write_checkpoint(shape, root / "model", live=True)
    try:
        import sglang

        results = []
        for r in ranks:  # the pool's max rank is the adapter's, as in a run (module docstring)
            try:
                bench = EngineBench(model_dir, r, mem, extra)
            except Exception as exc:  # noqa: BLE001 - this rank's rows carry the launch error, the others go on
                error = f"engine launch (max_lora_rank={r}) failed: {type(exc).__name__}: {exc}"
                results.append({"rank": r, "max_lora_rank": r, "rows": [{"rank": r, "path": p, "error": error,
                                                                        "correct": None} for p in PATHS]})
                continue
            try:
                results.append({**run_rank(bench, r, iters, warmup, root, settle_ms), "max_lora_rank": r})
            finally:
                bench.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)  # the checkpoint (16 GB for 8B) and the adapters live in /dev/shm
    return {"shape": shape, "sglang": sglang.__version__, "settle_ms": settle_ms, "ranks": results}


def flat_rows(results: list[dict]) -> list[dict]:
    """The JSON rows (the sync_matrix record's figures, docs/results/sync_matrix.json): shape, rank, path, p50_ms, p95_ms, first_batch_penalty_ms, correct."""
    rows = []
    for shape in results:
        for rank in shape["ranks"]:
            for row in rank["rows"]:
                rows.append({"shape": shape["shape"], "sglang": shape["sglang"], "transport": "engine",
                             "settle_ms": shape.get("settle_ms", 0.0), "max_lora_rank": rank.get("max_lora_rank"),
                             **row})
    return rows


def print_table(rows: list[dict]) -> None:
    print("| shape | r | path | p50 ms | p95 ms | max ms | first-batch penalty ms | GB/s | x versioned | x disk | correct |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['shape']} | {r['rank']} | {r['path']} | fails: {r['error']} | | | | | | | |")
            continue
        cells = [r.get(k) for k in ("p50_ms", "p95_ms", "max_ms", "first_batch_penalty_ms", "GBps",
                                    "speedup_vs_versioned", "speedup_vs_disk", "correct")]
        print(f"| {r['shape']} | {r['rank']} | {r['path']} | " + " | ".join("-" if c is None else str(c) for c in cells) + " |")
    for r in rows:
        if r.get("phases_p50_ms"):
            print(f"phases p50 ms {r['shape']} r{r['rank']} {r['path']} (settle {r.get('settle_ms', 0.0)} ms): "
                  + ", ".join(f"{k} {v}" for k, v in r["phases_p50_ms"].items()))
    for note in dict.fromkeys(r["stock_client"] for r in rows if r.get("stock_client", "instantiable") != "instantiable"):
        print(f"verl_stock: verl's own HTTP client is {note}")


def main(shapes: list[str], ranks: list[int], iters: int, warmup: int, mem: float, json_path: Path | None,
         extra: dict[str, Any], settle_ms: float = 0.0) -> int:
    results = []
    for shape in shapes:
        results.append(run_shape(shape, ranks, iters, warmup, mem, extra, settle_ms))
        print("result", json.dumps(results[-1], default=str), flush=True)  # survives a later shape's failure
    rows = flat_rows(results)
    print_table(rows)
    if json_path:
        json_path.write_text(json.dumps(rows, indent=1, default=str))
    return 0 if all(r.get("correct") is not False for r in rows) else 1


__all__ = ["PathTimes", "flat_rows", "print_table", "main", "run_shape"]
