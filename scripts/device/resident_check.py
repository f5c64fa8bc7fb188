#!/usr/bin/env python3
"""GPU check of the resident in-place LoRA slot write against a real SGLang server (written for 0.5.12).

    python3 scripts/device/resident_check.py --model /path/to/Qwen3-0.6B --rank 32 --out /tmp/resident.json

1. Builds three random PEFT adapters (all seven HF linear targets, shapes from the model's config.json, bf16)
   and saves them as PEFT directories: the two initial slot adapters and the "next version" V.
2. Launches ``python -m sglang.launch_server`` with ``--enable-lora --max-lora-rank R --lora-target-modules all
   --max-loras-per-batch 3 --custom-weight-loader verl_sglang_lora.runtime.resident.loader.apply
   --disable-cuda-graph`` (a port from ``sglang_contract.ports``; the repo root on PYTHONPATH so the
   scheduler can import the loader).
3. Loads ``verl_lora_slot0`` / ``verl_lora_slot1`` from disk with ``pinned=true``.
4. Puts V in a persistent CUDA flat buffer in this process and attaches it to slot 1 through
   ``/update_weights_from_tensor`` (``load_format`` = the loader path; CUDA IPC through SGLang's own
   ``MultiprocessingSerializer``); the status tensor is a CUDA int64 tensor shared the same way.
5. Times ``op=write`` (slot 1 from the attached buffer): 3 warm-ups + N iterations, with and without the
   device checksum, plus floors (D2D copy of the same bytes in this process) and SGLang's normal disk load.
6. Loads V the normal way as ``verl_ref`` (unpinned; a 1-token generate makes it resident) and asks the loader to
   byte-compare slot 1 with it (``op=compare``): every module, layer and embedding buffer.
7. Compares prompt logprobs served with ``lora_path=verl_lora_slot1`` and ``lora_path=verl_ref`` (after
   ``/flush_cache``: the radix cache keys on the adapter id, and slot 1's id served the old bytes before).
Prints a table and writes JSON to ``--out``. Exit code 0 only if every check passed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LOADER = "verl_sglang_lora.runtime.resident.loader.apply"
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SLOTS = ("verl_lora_slot0", "verl_lora_slot1")
REF = "verl_ref"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--model", required=True, help="HF model directory (config.json is read for adapter shapes)")
    p.add_argument("--rank", type=int, default=32, help="adapter rank r")
    p.add_argument("--max-lora-rank", type=int, default=None, help="pool rank (default: --rank; > r: strided slot)")
    p.add_argument("--alpha", type=int, default=None, help="lora_alpha (default 2r)")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--port", type=int, default=0, help="HTTP port (0: a free one)")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--mem-fraction", type=float, default=0.6)
    p.add_argument("--startup-timeout", type=float, default=900.0)
    p.add_argument("--prompt", default="The capital of France is Paris. The capital of Germany is")
    p.add_argument("--session", choices=("auto", "on", "off"), default="auto",
                   help="wrap updates in /begin_weight_update + /end_weight_update (required by 0.5.23)")
    p.add_argument("--out", required=True, help="JSON result path")
    p.add_argument("--keep-dir", action="store_true", help="keep the adapter directory and server log")
    p.add_argument("--server-arg", action="append", default=[], help="extra launch_server argument (repeatable)")
    p.add_argument("--transport", choices=("http", "engine"), default="http",
                   help="http: a launch_server subprocess; engine: an in-process sglang.Engine, requests straight to "
                        "its tokenizer manager (the plugin's server-actor path)")
    p.add_argument("--cuda-graph", action="store_true", help="keep CUDA graphs on (decode replays the slot)")
    p.add_argument("--decode-tokens", type=int, default=8, help="greedy tokens compared slot vs normal load")
    p.add_argument("--penalty-iters", type=int, default=10, help="writes followed by a timed 1-token request")
    return p.parse_args(argv)


# ---- adapters ------------------------------------------------------------------------------------------------------
def linear_dims(model_dir: str) -> tuple[int, dict[str, tuple[int, int]]]:
    """(num layers, {module path: (in, out)}) for the seven HF linear targets, from config.json."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv, hd = cfg.get("num_key_value_heads", nh), cfg.get("head_dim") or h // nh
    inter = cfg["intermediate_size"]
    return cfg["num_hidden_layers"], {
        "self_attn.q_proj": (h, nh * hd), "self_attn.k_proj": (h, nkv * hd), "self_attn.v_proj": (h, nkv * hd),
        "self_attn.o_proj": (nh * hd, h), "mlp.gate_proj": (h, inter), "mlp.up_proj": (h, inter),
        "mlp.down_proj": (inter, h)}


def make_adapter(model_dir: str, rank: int, seed: int) -> dict:
    import torch

    layers, dims = linear_dims(model_dir)
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for i in range(layers):
        for mod, (fan_in, fan_out) in dims.items():
            prefix = f"base_model.model.model.layers.{i}.{mod}"
            # B is not zero (unlike a fresh PEFT init) so the adapter visibly changes the logprobs
            out[f"{prefix}.lora_A.weight"] = (torch.randn(rank, fan_in, generator=gen) / fan_in ** 0.5).bfloat16()
            out[f"{prefix}.lora_B.weight"] = (torch.randn(fan_out, rank, generator=gen) / rank ** 0.5).bfloat16()
    return out


def save_peft(path: Path, tensors: dict, rank: int, alpha: int) -> str:
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": alpha, "lora_dropout": 0.0,
        "bias": "none", "target_modules": list(TARGETS), "base_model_name_or_path": None}))
    return str(path)


class FlatAdapter:
    """One persistent CUDA byte buffer holding every adapter tensor as a view (the sync client's layout)."""

    def __init__(self, tensors: dict, device: str = "cuda:0") -> None:
        import torch

        names = sorted(tensors)
        sizes = [tensors[n].numel() * tensors[n].element_size() for n in names]
        self.flat = torch.zeros(sum(sizes), dtype=torch.uint8, device=device)
        self.views, offset = {}, 0
        for name, size in zip(names, sizes):
            t = tensors[name]
            self.views[name] = self.flat[offset:offset + size].view(t.dtype).view(t.shape)
            offset += size
        self.load(tensors)

    def load(self, tensors: dict) -> None:
        for name, view in self.views.items():
            view.copy_(tensors[name])


# ---- server --------------------------------------------------------------------------------------------------------
def http(url: str, body: Any = None, timeout: float = 600.0) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"},
                                 method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read().decode()
            code = resp.status
    except urllib.error.HTTPError as exc:
        text, code = exc.read().decode(errors="replace"), exc.code
    try:
        return code, json.loads(text)
    except ValueError:
        return code, text


class Server:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        from verl_sglang_lora.sglang_contract.ports import server_port

        self.port = args.port or server_port()  # its derived gRPC port valid too: no SGLANG_GRPC_PORT
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "server.log"
        max_rank = args.max_lora_rank or args.rank
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", args.model, "--host", "127.0.0.1",
               "--port", str(self.port), "--tp", str(args.tp), "--enable-lora", "--max-lora-rank", str(max_rank),
               "--lora-target-modules", "all", "--max-loras-per-batch", "3", "--custom-weight-loader", LOADER,
               *([] if args.cuda_graph else ["--disable-cuda-graph"]), "--mem-fraction-static", str(args.mem_fraction), "--log-level", "warning",
               # checkpoints written by tools.benchmarks carry no tokenizer: prompts go as token ids
               "--skip-tokenizer-init", "--skip-server-warmup", *args.server_arg]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        self.cmd = cmd
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=str(ROOT))
        deadline = time.time() + args.startup_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}; log tail:\n{self.tail()}")
            try:
                if http(self.base + "/health", timeout=5)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(2)
        raise RuntimeError(f"server not healthy after {args.startup_timeout}s; log tail:\n{self.tail()}")

    def tail(self, n: int = 40) -> str:
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        return http(self.base + path, body)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


class Resident:
    """Client side of the loader protocol: one status/message tensor pair per TP rank, all on this GPU."""

    def __init__(self, server: Server, tp: int, session: str) -> None:
        import torch
        from sglang.srt.utils import MultiprocessingSerializer
        from sglang.srt.utils.patch_torch import monkey_patch_torch_reductions

        from verl_sglang_lora.runtime.resident import protocol as P

        monkey_patch_torch_reductions()  # CUDA tensors travel by device UUID, as SGLang expects
        self.P, self.ser, self.server, self.tp = P, MultiprocessingSerializer, server, tp
        # rank r's tensors must live on rank r's GPU: SGLang's _unwrap_tensor moves anything else with .to(),
        # and a moved status tensor (or a moved source) is a private copy the other side never sees
        self.status = [P.new_status(f"cuda:{r}") for r in range(tp)]
        self.message = [P.new_message(8192, f"cuda:{r}") for r in range(tp)]
        self.seq = 0
        self.as_text = isinstance(server, Server)  # JSON carries text; the in-process call takes bytes, as the plugin's
        self.session = session == "on" or (session == "auto" and server.post("/end_weight_update", {})[0] != 404)
        torch.cuda.synchronize()

    def call(self, op: str, adapters: list[dict] | None = None, flats: list | None = None,
             **fields: Any) -> tuple[float, list[dict], list[str], Any]:
        """One request (``adapters[r]``: rank r's tensors, or None); returns (end-to-end ms, per-rank status
        dicts, per-rank messages, HTTP reply)."""
        import torch

        self.seq += 1
        for s in self.status:
            s.zero_()
        torch.cuda.synchronize()
        blobs = [self.ser.serialize(self.P.request_tensors(op, self.status[r], adapters[r] if adapters else None,
                                                           self.message[r], flats[r] if flats else None,
                                                           seq=self.seq, **fields), output_str=self.as_text)
                 for r in range(self.tp)]
        body = {"serialized_named_tensors": blobs, "load_format": LOADER, "flush_cache": False,
                "disable_draft_model": True}
        t0 = time.perf_counter()
        if self.session:
            self.server.post("/begin_weight_update", {})
        code, reply = self.server.post("/update_weights_from_tensor", body)
        if self.session:
            self.server.post("/end_weight_update", {})
        ms = (time.perf_counter() - t0) * 1e3
        if code != 200:
            raise RuntimeError(f"/update_weights_from_tensor -> {code}: {reply}")
        return (ms, [self.P.read_status(s) for s in self.status], [self.P.read_message(m) for m in self.message],
                reply)


# ---- measurements --------------------------------------------------------------------------------------------------
def stats(values: list[float]) -> dict:
    v = sorted(values)
    return {"n": len(v), "p50": statistics.median(v), "p95": v[min(len(v) - 1, int(round(0.95 * (len(v) - 1))))],
            "max": v[-1], "mean": statistics.fmean(v)}


def generate(server: Any, prompt: str, lora: str | None, new_tokens: int = 1) -> dict:
    """Greedy; with ``new_tokens`` > 1 the decode steps (CUDA-graph replays when graphs are on) are compared too."""
    ids = [(17 * i + 3) % 1000 + 10 for i in range(len(prompt))]  # fixed token ids (no tokenizer needed)
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0.0},
            "return_logprob": True,
            "logprob_start_len": 0}
    if lora is not None:
        body["lora_path"] = lora
    code, reply = server.post("/generate", body)
    if code != 200:
        raise RuntimeError(f"/generate ({lora}) -> {code}: {reply}")
    return reply


def prompt_logprobs(reply: dict) -> list[float]:
    meta = reply["meta_info"]
    return [float(x[0]) for x in meta["input_token_logprobs"] if x[0] is not None] + \
        [float(x[0]) for x in meta["output_token_logprobs"]]


def run(args: argparse.Namespace) -> dict:
    import torch

    rank, alpha = args.rank, args.alpha or 2 * args.rank
    workdir = Path(tempfile.mkdtemp(prefix="resident_check_"))
    result: dict[str, Any] = {"args": vars(args), "checks": {}, "timings": {}, "workdir": str(workdir)}
    adapters = {name: make_adapter(args.model, rank, seed) for name, seed in
                (("slot0", 1), ("slot1", 2), ("next", 3), ("after", 4))}
    paths = {name: save_peft(workdir / name, adapters[name], rank, alpha) for name in ("slot0", "slot1", "next")}
    result["adapter"] = {"tensors": len(adapters["next"]), "MiB": sum(t.numel() * 2 for t in adapters["next"].values())
                         / 2**20, "rank": rank, "pool_rank": args.max_lora_rank or rank}
    server = EngineServer(args, workdir) if args.transport == "engine" else Server(args, workdir)
    try:
        import sglang

        result["sglang_version"] = sglang.__version__
        for slot, name in zip(SLOTS, ("slot0", "slot1")):
            code, reply = server.post("/load_lora_adapter", {"lora_name": slot, "lora_path": paths[name],
                                                             "pinned": True})
            if code != 200:
                raise RuntimeError(f"load {slot}: {code} {reply}")
            generate(server, "warm up", slot)  # makes the slot resident while the server is idle
        client = Resident(server, args.tp, args.session)
        result["session"] = client.session
        flats = [FlatAdapter(adapters["next"], f"cuda:{r}") for r in range(args.tp)]  # one per rank's GPU
        torch.cuda.synchronize()

        from verl_sglang_lora.runtime.resident.mirror import flat_checksum

        def sums(r: int = 0) -> dict:
            s0, s1 = flat_checksum(flats[r].flat)
            return {"sum0": s0, "sum1": s1}

        ms, status, msgs, _ = client.call("attach", [f.views for f in flats], [f.flat for f in flats], slot=SLOTS[1],
                                          version=1, write=1, **(sums() if args.tp == 1 else {}))
        result["checks"]["attach"] = {"ok": all(s["ok"] for s in status), "status": status, "message": msgs}
        if not result["checks"]["attach"]["ok"]:
            raise RuntimeError(f"attach failed: {msgs}")

        versions = [adapters["after"], adapters["next"]]
        for label, checksum in (("write+verify", 1), ("write", 0)):
            e2e, copy, total, verify, client_sum, by = [], [], [], [], [], set()
            for i in range(args.warmup + args.iters):
                for flat in flats:  # the trainer writes the next version into its buffer
                    flat.load(versions[i % 2])
                for r in range(args.tp):
                    torch.cuda.synchronize(r)
                t0 = time.perf_counter()
                fields = sums() if checksum and args.tp == 1 else {}  # the sync client's cost, counted in e2e
                t_sum = (time.perf_counter() - t0) * 1e3
                ms, status, msgs, _ = client.call("write", slot=SLOTS[1], version=100 + i, checksum=checksum, **fields)
                if not all(s["ok"] for s in status):
                    raise RuntimeError(f"{label} {i}: {msgs}")
                if i >= args.warmup:
                    e2e.append(ms + t_sum)
                    client_sum.append(t_sum)
                    copy.append(max(s["copy_ns"] for s in status) / 1e6)
                    total.append(max(s["total_ns"] for s in status) / 1e6)
                    verify.append(max(s["verify_ns"] for s in status) / 1e6)
                    by.update(s["verified_by"] for s in status)
            result["timings"][label] = {"end_to_end_ms": stats(e2e), "server_copy_ms": stats(copy),
                                        "server_verify_ms": stats(verify), "client_checksum_ms": stats(client_sum),
                                        "loader_total_ms": stats(total), "verified_by": sorted(by)}

        # first-batch penalty: a 1-token request right after a write vs the same request in steady state
        steady, after = [], []
        for i in range(args.warmup + args.penalty_iters):
            t0 = time.perf_counter()
            server.post("/flush_cache", {})  # same work as after a write, minus the write: the penalty is the write's
            generate(server, "steady state", SLOTS[1])
            if i >= args.warmup:
                steady.append((time.perf_counter() - t0) * 1e3)
        for i in range(args.penalty_iters):
            for flat in flats:
                flat.load(versions[i % 2])
            for r in range(args.tp):
                torch.cuda.synchronize(r)
            client.call("write", slot=SLOTS[1], version=200 + i, checksum=1, **(sums() if args.tp == 1 else {}))
            t0 = time.perf_counter()
            # the plugin flushes the prefix cache when it switches the served adapter: the slot's lora id is reused
            # across versions, so cached KV of the old bytes would otherwise be served; counted in the penalty
            server.post("/flush_cache", {})
            generate(server, "steady state", SLOTS[1])
            after.append((time.perf_counter() - t0) * 1e3)
        result["timings"]["first_request_after_write"] = {"end_to_end_ms": stats(after)}
        result["timings"]["request_steady_state"] = {"end_to_end_ms": stats(steady)}
        result["first_batch_penalty_ms"] = statistics.median(after) - statistics.median(steady)

        # floor: the same bytes copied D2D in this process
        dst = torch.empty_like(flats[0].flat)
        floor = []
        for i in range(args.warmup + args.iters):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            dst.copy_(flats[0].flat)
            torch.cuda.synchronize()
            if i >= args.warmup:
                floor.append((time.perf_counter() - t0) * 1e3)
        result["timings"]["d2d_floor"] = {"end_to_end_ms": stats(floor)}
        host = torch.empty(flats[0].flat.numel(), dtype=torch.uint8, pin_memory=True)
        h2d = []
        for i in range(args.warmup + args.iters):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            dst.copy_(host, non_blocking=True)
            torch.cuda.synchronize()
            if i >= args.warmup:
                h2d.append((time.perf_counter() - t0) * 1e3)
        result["timings"]["pinned_h2d_floor"] = {"end_to_end_ms": stats(h2d)}

        # SGLang's normal path, for scale: load from disk + first use + unload (fewer iterations)
        normal = []
        for i in range(min(args.iters, 5)):
            t0 = time.perf_counter()
            code, reply = server.post("/load_lora_adapter", {"lora_name": f"tmp{i}", "lora_path": paths["next"]})
            generate(server, "x", f"tmp{i}")
            normal.append((time.perf_counter() - t0) * 1e3)
            server.post("/unload_lora_adapter", {"lora_name": f"tmp{i}"})
        result["timings"]["sglang_disk_load+first_use"] = {"end_to_end_ms": stats(normal)}

        # byte-exactness: slot 1 (final write: "next") against SGLang's own load of the same adapter
        for flat in flats:
            flat.load(adapters["next"])
        for r in range(args.tp):
            torch.cuda.synchronize(r)
        _, status, msgs, _ = client.call("write", slot=SLOTS[1], version=999)
        result["checks"]["final_write"] = {"ok": all(s["ok"] for s in status), "message": msgs}
        code, reply = server.post("/load_lora_adapter", {"lora_name": REF, "lora_path": paths["next"]})
        if code != 200:
            raise RuntimeError(f"load {REF}: {code} {reply}")
        generate(server, "warm up", REF)
        _, status, msgs, _ = client.call("compare", slot=SLOTS[1], ref=REF)
        result["checks"]["byte_exact"] = {"ok": all(s["ok"] and s["mismatches"] == 0 for s in status),
                                          "mismatches": [s["mismatches"] for s in status], "message": msgs}

        # served logprobs: slot 1 vs the normally loaded adapter vs the base model
        server.post("/flush_cache", {})
        slot_lp = prompt_logprobs(generate(server, args.prompt, SLOTS[1], args.decode_tokens))
        ref_lp = prompt_logprobs(generate(server, args.prompt, REF, args.decode_tokens))
        base_lp = prompt_logprobs(generate(server, args.prompt, None, args.decode_tokens))
        diff = max((abs(a - b) for a, b in zip(slot_lp, ref_lp)), default=float("nan"))
        base_diff = max((abs(a - b) for a, b in zip(slot_lp, base_lp)), default=float("nan"))
        result["checks"]["logprobs"] = {"ok": len(slot_lp) == len(ref_lp) and diff == 0.0 and base_diff > 0,
                                        "max_abs_diff_vs_normal_load": diff, "max_abs_diff_vs_base": base_diff,
                                        "tokens": len(slot_lp)}
    except Exception as exc:  # noqa: BLE001 - report, then fail the exit code
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["server_log_tail"] = server.tail()
    finally:
        server.stop()
        if not args.keep_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    result["ok"] = "error" not in result and all(c.get("ok") for c in result["checks"].values())
    return result


def print_table(result: dict) -> None:
    print(f"\nSGLang {result.get('sglang_version', '?')}  adapter {result.get('adapter')}  "
          f"session={result.get('session')} transport={result.get('args', {}).get('transport')}")
    cols = ("server_copy_ms", "server_verify_ms", "client_checksum_ms", "loader_total_ms")
    print(f"{'row':<28}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}" + "".join(f"{c[:-3] + ' p50':>22}" for c in cols))
    for label, t in result.get("timings", {}).items():
        e = t["end_to_end_ms"]
        extra = "".join(f"{(format(t[c]['p50'], '.3f') if c in t else '-'):>22}" for c in cols)
        print(f"{label:<28}{e['p50']:>9.3f}{e['p95']:>9.3f}{e['max']:>9.3f}{extra}")
    if "first_batch_penalty_ms" in result:
        print(f"first-batch penalty (1-token request after a write minus steady state, p50): "
              f"{result['first_batch_penalty_ms']:.3f} ms")
    for name, check in result.get("checks", {}).items():
        detail = {k: v for k, v in check.items() if k not in ("ok", "status", "message")}
        print(f"check {name:<12} {'PASS' if check.get('ok') else 'FAIL'}  {detail}")
    if "error" in result:
        print("ERROR:", result["error"])
    print("RESULT:", "PASS" if result.get("ok") else "FAIL")


class EngineServer:
    """The same requests through an in-process ``sglang.Engine``: the tokenizer manager is called directly, as the
    plugin's server actor does (no HTTP); the scheduler is a subprocess, so CUDA IPC is exercised the same way."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        import sglang

        kwargs: dict[str, Any] = dict(
            model_path=args.model, tp_size=args.tp, enable_lora=True, max_lora_rank=args.max_lora_rank or args.rank,
            lora_target_modules=["all"], max_loras_per_batch=3, custom_weight_loader=[LOADER],
            disable_cuda_graph=not args.cuda_graph, mem_fraction_static=args.mem_fraction, log_level="warning",
            skip_tokenizer_init=True, skip_server_warmup=True)
        extra = list(args.server_arg)
        for flag, value in zip(extra[::2], extra[1::2]):
            kwargs[flag.lstrip("-").replace("-", "_")] = int(value) if value.isdigit() else value
        # no SGLANG_GRPC_PORT: ServerArgs' port 30000 gives 0.5.12 gRPC port 40000 (in range); 0.5.23 would start
        # its native gRPC server for it
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        self.engine = sglang.Engine(**kwargs)
        self.log_path = workdir / "server.log"

    def tail(self, n: int = 40) -> str:
        return "(in-process engine: see this process's output)"

    def _run(self, coro: Any) -> Any:
        return self.engine.loop.run_until_complete(coro)

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        from sglang.srt.managers import io_struct

        e, tm = self.engine, self.engine.tokenizer_manager
        if path == "/load_lora_adapter":
            out = e.load_lora_adapter(body["lora_name"], body["lora_path"], bool(body.get("pinned", False)))
            return (200 if out.success else 400), {"success": out.success, "error_message": out.error_message}
        if path == "/unload_lora_adapter":
            out = e.unload_lora_adapter(body["lora_name"])
            return (200 if out.success else 400), {"success": out.success, "error_message": out.error_message}
        if path == "/generate":
            kw = {k: body[k] for k in ("input_ids", "sampling_params", "return_logprob", "logprob_start_len")
                  if k in body}
            return 200, e.generate(lora_path=body.get("lora_path"), **kw)
        if path == "/flush_cache":
            e.flush_cache()
            return 200, {}
        if path in ("/begin_weight_update", "/end_weight_update") and hasattr(io_struct, "BeginWeightUpdateReqInput"):
            # SGLang >= 0.5.23's weight-update session (older releases: 404, as over HTTP)
            cls = io_struct.BeginWeightUpdateReqInput if path.startswith("/begin") else io_struct.EndWeightUpdateReqInput
            ok, message = self._run(getattr(tm, path[1:])(cls(), None))[:2]
            return (200 if ok else 400), {"success": ok, "message": message}
        if path == "/update_weights_from_tensor":
            from verl_sglang_lora.sglang_contract.installed import struct_fields

            cls = io_struct.UpdateWeightsFromTensorReqInput
            fields = struct_fields(cls)  # dataclass (<= 0.5.18) or msgspec struct (0.5.23) fields
            obj = cls(**{k: v for k, v in body.items() if k in fields})
            ok, message = self._run(tm.update_weights_from_tensor(obj, None))[:2]
            return (200 if ok else 400), {"success": ok, "message": message}
        return 404, {"error": f"{path} is not mapped for the in-process engine"}

    def stop(self) -> None:
        self.engine.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    result = run(args)
    Path(args.out).write_text(json.dumps(result, indent=2, default=repr))
    print_table(result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
