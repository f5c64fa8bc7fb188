"""Results as records, and the docs tables generated from them.

A record is one run: ``{"kind", "date", "commit", "gpu", "versions": {verl, sglang, torch, transformers}, "command",
"figures": {...}}``. Records of one kind live in ``docs/results/<kind>.json`` (a JSON list, newest last).

    python scripts/records.py e2e LOG --command "..." [--out DIR]          # a verl run's console log -> a record
    python scripts/records.py json KIND FILE --command "..." [--out DIR]   # a benchmark's JSON output -> a record
    python scripts/records.py learning LOG --arm A --trainer T --seed S --command "..."  # a learning-curve run
    python scripts/records.py scale LOG --shape S --arm A --responses N [--mem-samples CSV] --command "..."  # a scale run
    python scripts/records.py stock_vs_plugin LOG --path stock|plugin --trainer T [--mem-samples CSV] \
        [--lora-samples CSV] --command "..."                          # one run of stock_vs_plugin.sh
    python scripts/records.py faults LOG --steps N --command "..."         # a fault run (scripts/device/faults.sh)
    python scripts/records.py render                          # docs/validation.md, docs/benchmarks.md, docs/learning.md
    python scripts/records.py check                                         # exit 1 when the docs are not current

``VSL_COMMIT`` names the commit where the checkout has no git (a copied tree on a GPU host).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the package beside this script, installed or not (tables it formats itself)
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "docs" / "results"
STEP_RE = re.compile(r"step:(\d+) - (.*)")
# pytest's closing line ("7 passed, 1 skipped in 95.20s"): a run stopped by a timeout has none and makes no record
PYTEST_SUMMARY_RE = re.compile(r"\b\d+ (passed|failed|skipped|xfailed|xpassed|deselected|errors?|warnings?)\b"
                               r".* in [0-9.]+s")
E2E_KEYS = ("critic/score/mean", "timing_s/step", "sglang_lora/sync_total_ms", "sglang_lora/sync_inplace",
            "sglang_lora/resident_fallbacks", "sglang_lora/staleness_max", "sglang_lora/base_policy_samples",
            "sglang_lora/served_effect_verdict", "sglang_lora/served_effect_error", "sglang_lora/served_effect_snr",
            "training/rollout_probs_diff_mean")


# ---- making records -----------------------------------------------------------------------------------------------
def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpu() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def _commit() -> str:
    if os.environ.get("VSL_COMMIT"):
        return os.environ["VSL_COMMIT"]
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def make_record(kind: str, command: str, figures: dict[str, Any]) -> dict[str, Any]:
    return {"kind": kind, "date": datetime.date.today().isoformat(), "commit": _commit(), "gpu": _gpu(),
            "versions": {d: _version(d) for d in ("verl", "sglang", "torch", "transformers")},
            "command": command, "figures": figures}


def step_series(log: str, keys: tuple[str, ...]) -> tuple[int, dict[str, list[float | None]]]:
    """The number of steps and, per key, its value at each step of a verl console log (``step:N - key:value``)."""
    steps: dict[int, dict[str, str]] = {}
    for line in log.splitlines():
        m = STEP_RE.search(line)
        if m:
            fields = dict(p.split(":", 1) for p in m.group(2).split(" - ") if ":" in p)
            steps.setdefault(int(m.group(1)), {}).update({k.strip(): v.strip() for k, v in fields.items()})
    order = sorted(steps)

    def series(key: str) -> list[float | None]:
        out = []
        for s in order:
            try:
                out.append(float(steps[s][key]))
            except (KeyError, ValueError):
                out.append(None)
        return out

    return len(order), {k: series(k) for k in keys}


def tracebacks(log: str) -> int:
    return log.count("Traceback (most recent call last)")


ANSI = re.compile(r"\x1b\[[0-9;]*m")
RAY_PREFIX = re.compile(r"^(?:\(\S+ pid=\d+(?:, ip=[^)]*)?\)\s*)?(?:\[rank\d+\]:\s*)?")
ERROR_LINE = re.compile(r"^((?:[\w.]+)(?:Error|Exception)(?::.*)?)$")


def first_error(log: str) -> str | None:
    """The first ``SomethingError: message`` line of a log (Ray's actor prefix removed): the cause, where later
    errors are its consequences (an actor that died of it)."""
    for line in ANSI.sub("", log).splitlines():
        m = ERROR_LINE.match(RAY_PREFIX.sub("", line.strip()))
        if m:
            return m.group(1).strip()[:300]
    return None


def e2e_figures(log: str) -> dict[str, Any]:
    """Per-step series of the plugin's and verl's figures from a verl console log."""
    n, series = step_series(log, E2E_KEYS)
    return {"steps": n, "series": series, "tracebacks": tracebacks(log)}


LEARNING_KEYS = {"rewards": "critic/score/mean", "step_s": "timing_s/step", "sync_ms": "sglang_lora/sync_total_ms",
                 "served_effect_verdict": "sglang_lora/served_effect_verdict",
                 "resident_fallbacks": "sglang_lora/resident_fallbacks",
                 # verl's mean |p_rollout - p_trainer| over the batch's tokens: how closely the served policy
                 # follows the trained one (near 0 where the engine holds the trainer's weights: kernels differ)
                 "served_vs_trained_dp": "training/rollout_probs_diff_mean"}


def learning_figures(log: str, arm: str, trainer: str, seed: int) -> dict[str, Any]:
    """One learning-curve run: its arm, trainer, seed and per-step mean reward (from step 1), step time and the
    plugin's sync figures (all None where the arm has none)."""
    n, series = step_series(log, tuple(LEARNING_KEYS.values()))
    return {"arm": arm, "trainer": trainer, "seed": seed, "steps": n,
            **{name: series[key] for name, key in LEARNING_KEYS.items()},
            "tracebacks": tracebacks(log), "first_error": first_error(log)}


SCALE_PARTS = ("gen", "old_log_prob", "ref", "update_actor", "update_weights")
SCALE_KEYS = ("timing_s/step", *(f"timing_s/{p}" for p in SCALE_PARTS), "sglang_lora/sync_total_ms",
              "sglang_lora/sync_bytes",
              "actor/perf/max_memory_allocated_gb", "actor/perf/cpu_memory_used_gb", "response_length/mean",
              "response_length/clip_ratio", "perf/throughput")
ROLLOUT_TOKENS_FROM = "response_length/mean x responses / timing_s/gen, per step"


def _numbers(xs: list[float | None]) -> list[float]:
    return [x for x in xs if x is not None and not math.isnan(x)]  # verl logs nan for an all-masked batch


def _median(xs: list[float | None]) -> float | None:
    xs = _numbers(xs)
    return statistics.median(xs) if xs else None


def _peak(xs: list[float | None]) -> float | None:
    xs = _numbers(xs)
    return max(xs) if xs else None


def _total(xs: list[float | None] | None) -> float | None:
    """The sum of a per-step count over the steps that logged it; None where none did (not 0)."""
    xs = _numbers(xs or [])
    return sum(xs) if xs else None


GPU_PEAK_MEASURED = (
    "nvidia-smi --query-compute-apps used_memory of each process, sampled every second through the run "
    "(scripts/device/mem_sampler.py): the driver's per-process figure -- CUDA context, the allocator's cache and "
    "memory outside PyTorch's allocator included, not PyTorch's allocator peak -- summed per role within a sample, "
    "the largest sample; trainer = verl's Ray workers (ray::WorkerDict), sglang = SGLang's scheduler processes "
    "(sglang::scheduler: model and KV cache) + its detokenizer + the server actor (ray::SGLangLoRARollout, or verl's "
    "ray::SGLangHttpServer without the plugin: SGLang's HTTP server and tokenizer manager); null where nvidia-smi "
    "listed none of the run's pids")


def device_script(name: str) -> Any:
    """A script of scripts/device/ as a module (the device scripts are not a package)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "device" / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up there
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def mem_sampler() -> Any:
    """scripts/device/mem_sampler.py as a module."""
    return device_script("mem_sampler")


def gpu_peak_figures(samples: Path | None) -> dict[str, Any]:
    """The run's GPU peaks per role, per process class and of the whole GPU (GiB) from mem_sampler.py's samples."""
    if samples is None or not samples.exists():
        return {"peak_gpu_gib": {"trainer": None, "sglang": None}, "gpu_process_peak_gib": {},
                "gpu_used_peak_gib": None, "gpu_samples": 0}
    sampler = mem_sampler()
    peaks = sampler.gpu_peaks(sampler.read_samples(samples))

    def gib(mib: float | None) -> float | None:
        return None if mib is None else round(mib / 1024, 3)

    return {"peak_gpu_gib": {role: gib(peaks["roles"].get(role)) for role in ("trainer", "sglang")},
            "gpu_process_peak_gib": {name: gib(v) for name, v in peaks["series"].items()},
            "gpu_used_peak_gib": gib(peaks["gpu_total"]), "gpu_samples": peaks["samples"]}


def scale_figures(log: str, shape: str, arm: str, trainer: str, responses: int,
                  lora_backend: str | None = None, mem_samples: Path | None = None,
                  lora_targets: str | None = None) -> dict[str, Any]:
    """One scale run: medians over its steps after the first (which compiles kernels and makes the first sync) of
    verl's step time and its parts (``timing_s/*``) and of the plugin's sync time; the GPU peak of the trainer's
    and of SGLang's processes from the driver (``mem_samples``: mem_sampler.py's CSV; GPU_PEAK_MEASURED says what
    it is), the whole GPU's used memory, and verl's own trainer figure, the torch allocator's peak
    (``actor/perf/max_memory_allocated_gb``), beside them; the host's used memory (``actor/perf/cpu_memory_used_gb``,
    all processes), each the largest over all steps; rollout tokens per second from the response lengths."""
    n, s = step_series(log, SCALE_KEYS)
    skip = 1 if n > 1 else 0

    def med(key: str) -> float | None:
        return _median(s[key][skip:])

    rates = [None if None in (length, gen) or not gen else length * responses / gen
             for length, gen in zip(s["response_length/mean"], s["timing_s/gen"])]
    gpu = gpu_peak_figures(mem_samples)
    return {"shape": shape, "trainer": trainer, "arm": arm, "lora_backend": lora_backend or None,
            "lora_targets": lora_targets or None, "steps": n,
            "measured_steps": n - skip, "step_s_p50": med("timing_s/step"),
            "parts_s": {p: med(f"timing_s/{p}") for p in SCALE_PARTS},
            "sync_ms_p50": med("sglang_lora/sync_total_ms"), "adapter_bytes_per_sync": med("sglang_lora/sync_bytes"),
            "peak_gpu_gib": gpu["peak_gpu_gib"], "peak_gpu_gib_measured": GPU_PEAK_MEASURED,
            "gpu_process_peak_gib": gpu["gpu_process_peak_gib"], "gpu_used_peak_gib": gpu["gpu_used_peak_gib"],
            "gpu_samples": gpu["gpu_samples"],
            "trainer_allocated_peak_gib": _peak(s["actor/perf/max_memory_allocated_gb"]),
            "host_rss_gib": _peak(s["actor/perf/cpu_memory_used_gb"]),
            "rollout_tokens_per_s": _median(rates[skip:]), "rollout_tokens_per_s_from": ROLLOUT_TOKENS_FROM,
            "responses": responses, "response_length_mean": med("response_length/mean"),
            "response_clip_ratio_min": min((x for x in s["response_length/clip_ratio"] if x is not None), default=None),
            "base_tokens_per_s": None, "tracebacks": tracebacks(log)}


STOCK_VS_PLUGIN_KEYS = {"rewards": "critic/score/mean", "step_s": "timing_s/step",
                        "update_weights_s": "timing_s/update_weights", "plugin_sync_ms": "sglang_lora/sync_total_ms",
                        "served_effect_verdict": "sglang_lora/served_effect_verdict",
                        # after the sync in verl's update_weights timer: the KV cache resume, then the flush + canary
                        "plugin_resume_kv_ms": "sglang_lora/resume_kv_ms", "plugin_canary_ms": "sglang_lora/canary_ms",
                        "plugin_sync_inplace": "sglang_lora/sync_inplace",  # 1: written in place
                        "plugin_resident_fallbacks": "sglang_lora/resident_fallbacks"}
# the plugin's version figures per step (runtime/sync/metrics.py); verl's stock path keeps none
VERSION_TAG_KEYS = {"sync_version": "sglang_lora/sync_version", "served_version_min": "sglang_lora/served_version_min",
                    "served_version_max": "sglang_lora/served_version_max",
                    "staleness_max": "sglang_lora/staleness_max",
                    "base_policy_samples": "sglang_lora/base_policy_samples"}
STOCK_NO_TAGS = (
    "verl's rollout.name=sglang tags no sample with the adapter version that served it and keeps no served-effect "
    "check: it unloads its adapter and loads the new tensors under one fixed name each step, so neither its log nor "
    "/v1/models can tell which version served a sample or whether the load changed what SGLang serves; what it can "
    "show is the step's reward, its sync time (timing_s/update_weights) and that one adapter stays registered")
SYNC_MS_FROM = ("verl's timing_s/update_weights x 1000: the trainer's whole weight sync phase "
                "(checkpoint_manager.update_weights), timed by verl alike on both paths; plugin_sync_ms is the "
                "plugin's own client-to-activation figure (sglang_lora/sync_total_ms)")
LORA_SLOTS_FROM = (
    "adapters in SGLang's LoRA registry per step: the most /v1/models cards with a parent model at any sample in "
    "the step (scripts/device/lora_sampler.py, every 2 s), i.e. adapters loaded and not unloaded; SGLang's pool "
    "slots (LoRAMemoryPool.uid_to_buffer_id) have no route: on SGLang 0.5.18 they hold at most these adapters plus "
    "the base model's slot, on 0.5.12 unloaded uids stay in the pool unseen; null at a step no sample answered")


def _gib_by_step(by_step: dict[int, float], n: int) -> list[float | None]:
    """verl steps 1..n of a per-step MiB series as GiB (None where no sample fell in the step)."""
    return [None if by_step.get(i) is None else round(by_step[i] / 1024, 3) for i in range(1, n + 1)]


def stock_vs_plugin_figures(log: str, path: str, trainer: str, mem_samples: Path | None = None,
                            lora_samples: Path | None = None) -> dict[str, Any]:
    """One run of the stock-vs-plugin comparison, every figure a per-step list (steps 1..n): verl's step time,
    reward and sync phase, the plugin's own sync time, served-effect verdict and version tags (None on the stock
    path, ``version_tags_absent`` says why), SGLang's GPU memory and the processes' host RSS from mem_sampler.py's
    samples (each step's peak), and the adapters SGLang holds from lora_sampler.py's."""
    n, s = step_series(log, (*STOCK_VS_PLUGIN_KEYS.values(), *VERSION_TAG_KEYS.values()))
    series = {name: s[key] for name, key in STOCK_VS_PLUGIN_KEYS.items()}
    sampler = mem_sampler()
    rows = sampler.read_samples(mem_samples) if mem_samples is not None and mem_samples.exists() else []
    gpu = sampler.role_by_step(rows, "gpu_mib")
    every_series = tuple(dict.fromkeys(name for _, name in sampler.SERIES))  # two titles share server_actor
    rss = sampler.role_by_step(rows, "rss_mib", {"all": every_series})["all"]
    lora = device_script("lora_sampler")
    held = lora.per_step(lora.read_samples(lora_samples)) if lora_samples is not None and lora_samples.exists() else {}
    stock = path == "stock"
    return {"path": path, "trainer": trainer, "steps": n, "step_s": series["step_s"],
            "sync_ms": [None if x is None else round(x * 1000, 3) for x in series["update_weights_s"]],
            "sync_ms_from": SYNC_MS_FROM,
            # the plugin's own per-step figures (STOCK_VS_PLUGIN_KEYS' plugin_* keys); stock logs none
            **{key: None if stock else series[key] for key in STOCK_VS_PLUGIN_KEYS if key.startswith("plugin_")},
            "sglang_gpu_gib": _gib_by_step(gpu["sglang"], n), "trainer_gpu_gib": _gib_by_step(gpu["trainer"], n),
            "gpu_measured": GPU_PEAK_MEASURED + "; per step: the largest sample within the step",
            # each process title's largest sample over the run (which of SGLang's processes holds what)
            "gpu_peak_mib_by_process": sampler.gpu_peaks(rows)["series"] if rows else None,
            "lora_slots_used": [held[i]["adapters"] if i in held else None for i in range(1, n + 1)],
            "lora_adapter_names": [held[i]["names"] if i in held else None for i in range(1, n + 1)],
            "lora_slots_from": LORA_SLOTS_FROM,
            "host_rss_gib": _gib_by_step(rss, n),
            "host_rss_from": "the summed RSS of the run's Ray and SGLang processes (mem_sampler.py's series), the "
                             "largest sample within the step",
            "rewards": series["rewards"],
            "served_effect_verdict": None if stock else series["served_effect_verdict"],
            "version_tags": None if stock else {name: s[key] for name, key in VERSION_TAG_KEYS.items()},
            "version_tags_absent": STOCK_NO_TAGS if stock else None,
            "gpu_samples": len({r["t_s"] for r in rows}), "tracebacks": tracebacks(log),
            "first_error": first_error(log)}


def faults_figures(log: str, steps: int) -> dict[str, Any]:
    """One fault run: per injected fault what scripts/device/fault_report.py reads from the run's log, and the run's
    verdict (PASS only when all four faults were injected and each recovered with no base-policy or stale sample)."""
    report = device_script("fault_report")
    raw = log.splitlines()
    results = report.analyse(raw, steps)
    verdicts = report.verdict_lines(results, raw, steps)
    return {"steps": steps, "faults": [dataclasses.asdict(r) for r in results],
            "not_run": [f for f in report.FAULTS if f not in {r.fault for r in results}],
            "verdict": verdicts[-1].removeprefix("faults verdict=")}


def append(record: dict[str, Any], out_dir: Path = RESULTS) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{record['kind']}.json"
    records = json.loads(path.read_text()) if path.exists() else []
    records.append(record)
    path.write_text(json.dumps(records, indent=1) + "\n")
    return path


# ---- rendering ----------------------------------------------------------------------------------------------------
def load(results: Path = RESULTS) -> dict[str, list[dict[str, Any]]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}


def newest_runs(records: dict[str, list[dict[str, Any]]], kind: str, key: tuple[str, ...]) -> list[dict[str, Any]]:
    """The newest record of ``kind`` per value of its ``key`` figures, of those that ran at least one step, in
    first-seen order (what a plot shows of repeated runs)."""
    runs: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in records.get(kind, []):
        if r["figures"]["steps"]:
            runs[tuple(r["figures"][k] for k in key)] = r
    return list(runs.values())


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _where(r: dict[str, Any]) -> str:
    v = r.get("versions") or {}
    return f"{r['date']}, `{r['commit']}`, {r.get('gpu') or 'CPU'}, SGLang {v.get('sglang') or '-'}, verl {v.get('verl') or '-'}"


def render_validation(records: dict[str, list[dict[str, Any]]]) -> str:
    out = ["# Validation", "", "Generated by `python scripts/records.py render` from `docs/results/*.json`; do not edit.",
           "Each entry is one run: where it ran, the command, and its figures.", ""]
    for r in records.get("e2e", []):
        f = r["figures"]
        s = f["series"]
        inplace = [x for x in s.get("sglang_lora/sync_inplace", []) if x is not None]
        out += [f"## {r['figures'].get('title', 'GRPO run')} -- {_where(r)}", "", f"`{r['command']}`", "",
                f"{f['steps']} steps; syncs in place {sum(1 for x in inplace if x == 1)}/{len(inplace)}; "
                f"tracebacks in the log: {f.get('tracebacks', 0)}.", "",
                "| step | " + " | ".join(k.split("/")[-1] for k in E2E_KEYS) + " |", "|---" * (len(E2E_KEYS) + 1) + "|"]
        for i in range(f["steps"]):
            out.append(f"| {i + 1} | " + " | ".join(_fmt(s[k][i]) for k in E2E_KEYS) + " |")
        out.append("")
    for r in records.get("mutation", []):
        f = r["figures"]
        out += [f"## Mutation score -- {_where(r)}", "", f"`{r['command']}`: {f['killed']} of {f['total']} small wrong "
                "changes to the core modules killed by the tests that cover them.", "",
                "| module | change | verdict |", "|---|---|---|"]
        out += [f"| {m['module']} | {m['name']} | {m['verdict']} |" for m in f["mutants"]]
        out.append("")
    for r in records.get("faults", []):
        f = r["figures"]
        report = device_script("fault_report")
        results = [report.FaultResult(**x) for x in f["faults"]]
        out += [f"## Fault run -- {_where(r)}", "", f"`{r['command']}`", "", f"Verdict: {f['verdict']}; not injected: "
                f"{', '.join(f['not_run']) or 'none'}.", "", report.table(results), ""]
    for r in records.get("gpu_tests", []):
        out += [f"## tests/gpu -- {_where(r)}", "", f"`{r['command']}`", "", f"{r['figures'].get('summary')}", ""]
    return "\n".join(out).rstrip() + "\n"


def _mb(n: float | None) -> float | None:
    return None if n is None else round(n / 1e6, 1)


def _modules_text(modules: str) -> str:
    return "every linear module" if modules == "all-linear" else modules.replace(",", ", ")


def render_benchmarks(records: dict[str, list[dict[str, Any]]]) -> str:
    # the tool's own table of its rows
    from verl_sglang_lora.tools.lora_throughput import adapter_bytes_per_step, format_table, target_modules

    out = ["# Benchmarks", "", "Generated by `python scripts/records.py render` from `docs/results/*.json`; do not edit.",
           ""]
    for r in records.get("sync_matrix", []):
        out += [f"## Adapter sync matrix -- {_where(r)}", "", f"`{r['command']}`", "",
                "Settle: the idle gap before each sync (0: the sync is sent right behind a request and can wait for the "
                "scheduler's step in flight). Inbound: from the client's send to the loader's entry in SGLang's "
                "scheduler (in-place rows).", "",
                "| shape | rank | path | settle ms | p50 ms | p95 ms | inbound ms | first request ms | x disk | correct |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for row in r["figures"].get("rows", []):
            if "p50_ms" not in row:
                continue
            inbound = (row.get("phases_p50_ms") or {}).get("inbound_ms")
            out.append(f"| {row.get('shape')} | {row.get('rank')} | {row.get('path')} | {_fmt(row.get('settle_ms'))} | "
                       f"{_fmt(row.get('p50_ms'))} | {_fmt(row.get('p95_ms'))} | {_fmt(inbound)} | "
                       f"{_fmt(row.get('first_request_ms'))} | "
                       f"{_fmt(row.get('speedup_vs_disk'))} | {_fmt(row.get('correct'))} |")
        out.append("")
    for r in records.get("served_effect_sim", []):
        out += [f"## Served-effect check, simulated -- {_where(r)}", "", f"`{r['command']}`", "",
                "Rate of the wrong verdict per arm (the trained adapter: fail; every other: pass) / rate of "
                "inconclusive, per rms effect-to-noise of the batch:", ""]
        for block in r["figures"]["results"]:
            levels = sorted({row["level"] for row in block["rows"]})
            out += [f"Batch {block['batch']} x {block['length']} tokens, {block['rows'][0]['steps']} steps per cell:", "",
                    "| arm | " + " | ".join(f"{lv:g}" for lv in levels) + " |", "|---" * (len(levels) + 1) + "|"]
            for arm in dict.fromkeys(row["arm"] for row in block["rows"]):
                cells = {row["level"]: row for row in block["rows"] if row["arm"] == arm}
                key = "fails" if arm == "trained" else "passes"
                out.append(f"| {arm} | " + " | ".join(
                    f"{cells[lv][key] / cells[lv]['steps']:.4f} / {cells[lv]['inconclusive'] / cells[lv]['steps']:.2f}"
                    for lv in levels) + " |")
            out.append("")
    for r in records.get("lora_throughput", []):
        f = r["figures"]
        batches = f.get("batch") if isinstance(f.get("batch"), list) else [f.get("batch")]
        rows = [{"batch": batches[0], **row} for row in f.get("rows", [])]  # a one-size run's rows name no batch
        out += [f"## LoRA serving throughput -- {_where(r)}", "", f"`{r['command']}`", "",
                f"{f.get('shape')} (random weights). Decode tokens/s at a fixed length "
                f"({' or '.join(map(str, batches))} prompts x {f.get('gen_len')} new tokens, "
                "ignore_eos, CUDA graphs on), one engine per LoRA backend the installed SGLang declares: the base "
                f"model with no adapter, then a random rank-{f.get('rank')} adapter on "
                f"{_modules_text(f.get('target_modules', 'all-linear'))}. "
                "'base' is that engine's throughput on requests without an adapter; the 'lora off' row, where run, is "
                "an engine launched without LoRA (the plain model), the last ratio the adapter's throughput against it. "
                f"Goal: adapter/base >= {f.get('goal_adapter_over_base')}. The fastest backend is named among those "
                "without an error whose adapter changed the served log-probs. 'adapter ms per decode step': "
                "(adapter - base seconds per batch) / new tokens. The adapter's A and B matrices are "
                f"{adapter_bytes_per_step(f['shape'], f['rank'], target_modules(f.get('target_modules', 'all-linear'))) / 1e6:.1f} "
                "MB (bf16), read once per decode step.", "",
                format_table(rows, f.get("gen_len")), ""]
    scale = [r for r in records.get("scale", []) if r["figures"]["steps"]]
    if scale:
        out += ["## One-GPU scale runs", "",
                "`bash scripts/device/scale.sh`: a GRPO example (trainer fsdp or megatron) on a random-weights "
                "checkpoint of the shape with a fixed response length, per arm (adapter: `rollout.name=sglang_lora`; "
                "merge: `lora.merge=True`; no_lora: full fine-tuning with `rollout.name=sglang`, actor offloaded); a "
                "mixture-of-experts shape trains an attention-only adapter, with `EXPERT_LORA=1` the experts' too (LoRA targets). "
                "Seconds are medians over the steps after "
                "the first. GPU GiB: the largest per-process GPU memory the driver reported (nvidia-smi, sampled "
                "every second; CUDA context and allocator cache included) of the trainer's processes and of SGLang's, "
                "'-' where nvidia-smi listed none of the run's pids; allocated GiB is verl's figure for the trainer, "
                "the torch allocator's peak. Host GiB is the host's used memory; rollout tok/s is "
                "response_length/mean x responses / timing_s/gen. Plot: `python scripts/plot_scale.py` writes "
                "docs/scale_parts.png.", "", "![step time by part per scale run](scale_parts.png)", "",
                "| where | shape | trainer | arm | LoRA backend | LoRA targets | steps | step s | gen s | old_log_prob s | ref s "
                "| update_actor s | update_weights s | sync ms | adapter MB per sync | trainer GPU GiB | SGLang GPU GiB "
                "| trainer allocated GiB | host GiB | rollout tok/s | length clip ratio |",
                "|---" * 21 + "|"]
        for r in scale:
            f = r["figures"]
            p = f["parts_s"]
            peak = f["peak_gpu_gib"]
            out.append(f"| {_where(r)} | {f['shape']} | {f['trainer']} | {f['arm']} | {_fmt(f['lora_backend'])} | "
                       f"{_fmt(f.get('lora_targets'))} | "
                       f"{f['steps']} | {_fmt(f['step_s_p50'])} | " + " | ".join(_fmt(p[k]) for k in SCALE_PARTS) +
                       f" | {_fmt(f['sync_ms_p50'])} | {_fmt(_mb(f.get('adapter_bytes_per_sync')))} | "
                       f"{_fmt(peak['trainer'])} | {_fmt(peak['sglang'])} | "
                       f"{_fmt(f.get('trainer_allocated_peak_gib'))} | {_fmt(f['host_rss_gib'])} | "
                       f"{_fmt(f['rollout_tokens_per_s'])} | {_fmt(f.get('response_clip_ratio_min'))} |")
        out.append("")
    out += render_stock_vs_plugin(records.get("stock_vs_plugin", []))
    return "\n".join(out).rstrip() + "\n"


def _fails(verdicts: list[float | None] | None) -> int:
    """Steps whose served-effect verdict was fail (-1)."""
    return sum(1 for v in verdicts or [] if v is not None and v < 0)


def _stopped_line(runs: list[dict[str, Any]], label: Callable[[dict[str, Any]], str]) -> list[str]:
    """The runs among ``runs`` that stopped before their first step, each with its first error (``label``: what
    names a run besides its commit)."""
    stopped = [r for r in runs if not r["figures"]["steps"]]
    if not stopped:
        return []
    return ["", "Runs that stopped before their first step: " + "; ".join(
        f"`{r['commit']}` {label(r['figures'])} ({r['figures']['tracebacks']} tracebacks; first error: "
        f"`{r['figures'].get('first_error') or 'none found'}`)" for r in stopped) + "."]


def _ends(xs: list[Any] | None) -> tuple[Any, Any]:
    """The first and last values of a per-step list that are not None."""
    vals = [x for x in xs or [] if x is not None]
    return (vals[0], vals[-1]) if vals else (None, None)


def render_stock_vs_plugin(runs: list[dict[str, Any]]) -> list[str]:
    """The stock-vs-plugin section of docs/benchmarks.md: what each column counts, one row per run that stepped,
    and the runs that stopped before their first step with their first error."""
    if not runs:
        return []
    out = ["## verl's stock LoRA path vs the plugin", "",
           "`bash scripts/device/stock_vs_plugin.sh` (TRAINER=fsdp or megatron): the same GRPO example on the offline "
           "task, same seed and LoRA rank 32, once with verl's `rollout.name=sglang` (**stock**: each step it unloads "
           "the adapter and loads the new tensors into SGLang under one name) and once with "
           "`rollout.name=sglang_lora` (**plugin**), one after the other, each alone on the GPU. Plot: `python "
           "scripts/plot_stock_vs_plugin.py` writes docs/stock_vs_plugin.png. Per step in "
           "docs/results/stock_vs_plugin.json; here medians over the steps and first/last values.", "",
           "- step 1 s: the first step, kernel compilation and warm-up included. The script runs stock first and the "
           "plugin second on the same host, so the plugin's run can reuse kernels the stock run compiled (Triton's "
           "on-disk cache): step 1 does not compare the two paths.",
           f"- sync ms: {SYNC_MS_FROM}. verl 0.9.1's timer (workers/engine_workers.py `update_weights`) holds more "
           "than the sync: before it, a `resume(tags=['weights'])` call on any rollout name but `sglang` (on the "
           "plugin a Ray round trip to the server actor, which drops the tag: adapter mode never releases the "
           "weights) and the trainer's parameter gather; after it, a device synchronize, `empty_cache`, a barrier "
           "and the KV cache resume, which on the plugin also flushes the prefix cache and runs the canary (one "
           "scoring request with the new adapter, one on the base). The plugin reports the last two per step as "
           "`sglang_lora/resume_kv_ms` and `canary_ms` (plugin_resume_kv_ms, plugin_canary_ms in the record; null "
           "where the run's plugin did not report them).",
           "- in place / fallbacks: the plugin's syncs written in place into a resident slot, of all syncs, and the "
           "in-place writes that failed a check and were loaded the ordinary way.",
           "- The adapter sync alone, both ways on one server, at the 0.6B and 8B shapes (not this example's tiny "
           "model): the sync matrix's inplace and verl_stock rows above, verl_stock being verl's own adapter-sync "
           "code (`ServerAdapter.update_weights`: unload, then load from tensors) with its engine calls forwarded "
           "in-process (no HTTP hop) and no byte check.",
           f"- SGLang GPU GiB: {GPU_PEAK_MEASURED}; per step, the largest sample within the step.",
           f"- LoRA adapters held: {LORA_SLOTS_FROM}.",
           "- host RSS GiB: the summed RSS of the run's Ray and SGLang processes, the largest sample within the step.",
           f"- version tags: the plugin's `sglang_lora/sync_version` and served version range per step; stock: "
           f"{STOCK_NO_TAGS}.", ""]
    ran = [r for r in runs if r["figures"]["steps"]]
    if ran:
        out += ["| where | path | trainer | steps | step 1 s | step s p50 | sync ms p50 | plugin sync ms p50 | in place "
                "/ fallbacks | SGLang GPU GiB first / last / peak | LoRA adapters held first / last / max | host RSS "
                "GiB first / last | mean reward | first step >= 0.8 | served-effect fails | version tags first -> last "
                "| tracebacks |",
                "|---" * 17 + "|"]
        for r in ran:
            f = r["figures"]
            gpu, held, rss = f["sglang_gpu_gib"], f["lora_slots_used"], f["host_rss_gib"]
            tags = f.get("version_tags")
            if tags:
                lo, hi = _ends(tags.get("sync_version"))
                stale = _peak(tags.get("staleness_max") or [])
                tag_cell = (f"sync version {_fmt(lo)} -> {_fmt(hi)}, staleness max {_fmt(stale)}, base-policy "
                            f"samples {_fmt(_total(tags.get('base_policy_samples')))}")
            else:
                tag_cell = "none (stock)"
            out.append(
                f"| {_where(r)} | {f['path']} | {f['trainer']} | {f['steps']} | {_fmt(f['step_s'][0])} | "
                f"{_fmt(_median(f['step_s']))} | "
                f"{_fmt(_median(f['sync_ms']))} | {_fmt(_median(f.get('plugin_sync_ms') or []))} | "
                f"{_inplace_cell(f)} | "
                + " / ".join(_fmt(x) for x in (*_ends(gpu), _peak(gpu))) + " | "
                + " / ".join(_fmt(x) for x in (*_ends(held), _peak(held))) + " | "
                + " / ".join(_fmt(x) for x in _ends(rss))
                + f" | {_fmt(_mean(f['rewards']))} | {_fmt(_first_at_least(f['rewards']))} | "
                f"{'-' if f.get('served_effect_verdict') is None else _fails(f['served_effect_verdict'])} | "
                f"{tag_cell} | {f['tracebacks']} |")
        by_process = [r for r in ran if r["figures"].get("gpu_peak_mib_by_process")]
        if by_process:
            out += ["", "GPU memory per process, the largest sample over the run (MiB, nvidia-smi):", ""]
            out += [f"- {r['figures']['path']}, {r['figures']['trainer']} (`{r['commit']}`): " + ", ".join(
                f"{name} {mib:.0f}" for name, mib in r["figures"]["gpu_peak_mib_by_process"].items() if mib)
                for r in by_process]
        out += ["", "Commands:", ""] + [f"- {r['figures']['path']}, {r['figures']['trainer']} (`{r['commit']}`): "
                                         f"`{r['command']}`" for r in ran]
        out += ["", "![SGLang GPU memory and sync ms per step, both paths](stock_vs_plugin.png)"]
    out += _stopped_line(runs, lambda f: f"{f['trainer']} {f['path']}")
    return out + [""]


def _inplace_cell(f: dict[str, Any]) -> str:
    """``in place/syncs / fallbacks`` of a plugin run; '-' for stock or a record without the series."""
    inplace, fallbacks = f.get("plugin_sync_inplace"), f.get("plugin_resident_fallbacks")
    if not inplace:
        return "-"
    done = _numbers(inplace)
    return f"{sum(1 for x in done if x >= 1)}/{len(done)} / {_fmt(_total(fallbacks))}"


def band(curves: list[list[float]]) -> tuple[list[float], list[float]]:
    """The seed-to-seed band of one arm, per step: [min - 2s, max + 2s] over its seeds, where s is the seed-to-seed
    standard deviation pooled over all steps (with two seeds the per-step range alone is one draw of a spread)."""
    n = min(len(c) for c in curves)
    means = [sum(c[t] for c in curves) / len(curves) for t in range(n)]
    pooled = (sum((c[t] - means[t]) ** 2 for c in curves for t in range(n)) / max(1, n * (len(curves) - 1))) ** 0.5
    return ([min(c[t] for c in curves) - 2 * pooled for t in range(n)],
            [max(c[t] for c in curves) + 2 * pooled for t in range(n)])


def learning_runs(records: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """The learning records grouped by (commit, trainer, arm): one comparison is one commit's runs."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records.get("learning", []):
        if r["figures"]["steps"]:
            groups.setdefault((r["commit"], r["figures"]["trainer"], r["figures"]["arm"]), []).append(r)
    return groups


def _mean(xs: list[float | None]) -> float | None:
    vals = _numbers(xs)
    return round(sum(vals) / len(vals), 4) if vals else None


def _first_at_least(curve: list[float | None], level: float = 0.8) -> int | None:
    return next((i + 1 for i, x in enumerate(curve) if x is not None and x >= level), None)


def render_learning(records: dict[str, list[dict[str, Any]]]) -> str:
    out = ["# Learning", "", "Generated by `python scripts/records.py render` from `docs/results/learning.json` and "
           "`docs/results/offline_task.json`; do not edit.", "",
           "The offline task (`verl_sglang_lora/tools/offline_reward.py`): answer in digits. The tiny random Qwen3 "
           "starts near 0.02; a LoRA adapter can raise all ten digit logits at once.", ""]
    for r in records.get("offline_task", []):
        f = r["figures"]
        serve = f.get("serve", "adapter")
        out += [f"## The task without the plugin, samples from the {serve} policy -- {_where(r)}", "",
                f"`{r['command']}`: GRPO with peft and transformers on CPU, the examples' tiny-default batch, n, "
                "response length, LoRA rank and optimizer. "
                + ("Samples from the trained model (base + LoRA product)." if serve == "adapter" else
                   "Samples from base + LoRA product merged and rounded to bfloat16, as verl's `lora.merge=True` "
                   "sends them; gradients from the trained model.")
                + " Seeds pair with the other serving modes' runs (same prompts and sampling generator).", "",
                "| seed | reward step 1 | first step >= 0.8 | mean reward over the steps | last reward |",
                "|---|---|---|---|---|"]
        out += [f"| {seed} | {_fmt(c[0])} | {_fmt(_first_at_least(c))} | {_fmt(_mean(c))} | "
                f"{_fmt(c[-1])} |" for seed, c in f["rewards"].items()]
        out.append("")
    out += ["## Through the plugin", "",
            "Arms: **adapter** serves the LoRA adapter (`rollout.name=sglang_lora`), **merge** pushes merged weights "
            "(`lora.merge=True`), **reference** is full fine-tuning with verl's own `rollout.name=sglang` (no plugin "
            "code on the rollout path). Runs: `bash scripts/device/learning.sh` on a GPU host with the offline bundle; "
            "plot: `python scripts/plot_learning.py` writes `docs/learning.png`.", ""]
    groups = learning_runs(records)
    if not groups:
        return "\n".join(out + ["No run through the plugin is recorded yet."]) + "\n"
    out += ["| commit | trainer | arm | seed | GPU | steps | reward step 1 | first step >= 0.8 | mean reward over the "
            "steps | last reward | served-effect fails | served vs trained mean abs dp | tracebacks |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (commit, trainer, arm), runs in groups.items():
        for r in runs:
            f = r["figures"]
            rw = f["rewards"]
            out.append(f"| `{commit}` | {trainer} | {arm} | {f['seed']} | {r.get('gpu') or '-'} | {f['steps']} | "
                       f"{_fmt(rw[0])} | {_fmt(_first_at_least(rw))} | {_fmt(_mean(rw))} | {_fmt(rw[-1])} | "
                       f"{_fails(f.get('served_effect_verdict'))} | "
                       f"{_fmt(_median(f.get('served_vs_trained_dp') or []))} | {f['tracebacks']} |")
    out += _stopped_line(records.get("learning", []), lambda f: f"{f['trainer']} {f['arm']} seed {f['seed']}")
    out += ["", "Served vs trained: verl's `training/rollout_probs_diff_mean` (mean |p_rollout - p_trainer| over the "
            "batch's tokens), median over the run's steps: how closely the served policy follows the trained one.",
            "", "Band: per step, [min - 2s, max + 2s] of the merge arm's seeds, s the seed-to-seed standard deviation "
            "pooled over steps. An adapter curve inside it at every step learns as the merged-weight path does. "
            "The band is as wide as the seeds' spread: it catches an adapter arm that does not learn or learns much "
            "slower, not one a step or two behind (its widest step is given below); the per-step checks are the "
            "served-effect verdict and the served-vs-trained gap. The merge arm serves bf16(W + LoRA delta) (verl "
            "casts merged weights to bfloat16), which drops a delta under half a bfloat16 step of its weight; the "
            "CPU runs above measure that effect alone.", ""]
    for (commit, trainer, arm), runs in groups.items():
        merge = groups.get((commit, trainer, "merge"))
        if arm != "adapter" or not merge:
            continue
        lo, hi = band([m["figures"]["rewards"] for m in merge])
        widest = max(range(len(lo)), key=lambda t: hi[t] - lo[t])
        means = {a: [_mean(x["figures"]["rewards"]) for x in group]
                 for a, group in (("adapter", runs), ("merge", merge))}
        out.append(f"- `{commit}` {trainer}: mean reward over the steps, adapter "
                   + ", ".join(_fmt(m) for m in means["adapter"]) + " (seeds' mean "
                   + _fmt(_mean(means["adapter"])) + "); merge " + ", ".join(_fmt(m) for m in means["merge"])
                   + " (" + _fmt(_mean(means["merge"])) + f"). Merge band widest at step {widest + 1}: "
                   f"[{_fmt(round(lo[widest], 3))}, {_fmt(round(hi[widest], 3))}].")
        for r in runs:
            rw = r["figures"]["rewards"][:len(lo)]
            above = [i + 1 for i, x in enumerate(rw) if x > hi[i]]
            below = [i + 1 for i, x in enumerate(rw) if x < lo[i]]
            where = "".join(f"; {side} it at steps {steps}" for side, steps in (("above", above), ("below", below))
                            if steps)
            out.append(f"- `{commit}` {trainer}, adapter seed {r['figures']['seed']}: "
                       f"{len(rw) - len(above) - len(below)} of {len(rw)} steps inside the merge band{where}.")
    return "\n".join(out).rstrip() + "\n"


DOCS = {"validation.md": render_validation, "benchmarks.md": render_benchmarks, "learning.md": render_learning}


def rendered(results: Path = RESULTS) -> dict[str, str]:
    records = load(results)
    return {name: fn(records) for name, fn in DOCS.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e2e = sub.add_parser("e2e")
    e2e.add_argument("log", type=Path)
    e2e.add_argument("--title", default="GRPO run")
    js = sub.add_parser("json")
    js.add_argument("kind")
    js.add_argument("file", type=Path)
    learn = sub.add_parser("learning")
    learn.add_argument("log", type=Path)
    learn.add_argument("--arm", required=True, choices=("adapter", "merge", "reference"))
    learn.add_argument("--trainer", required=True, choices=("fsdp", "megatron"))
    learn.add_argument("--seed", required=True, type=int)
    scale = sub.add_parser("scale")
    scale.add_argument("log", type=Path)
    scale.add_argument("--shape", required=True)
    scale.add_argument("--arm", required=True, choices=("adapter", "merge", "no_lora"))
    scale.add_argument("--trainer", default="fsdp", choices=("fsdp", "megatron"))
    scale.add_argument("--responses", required=True, type=int, help="responses per step: train_batch_size x n")
    scale.add_argument("--lora-backend", default="")
    scale.add_argument("--lora-targets", default="", help="what the adapter targets, e.g. attention+experts")
    scale.add_argument("--mem-samples", type=Path, default=None,
                       help="scripts/device/mem_sampler.py's CSV of the run: the GPU peaks per role")
    svp = sub.add_parser("stock_vs_plugin")
    svp.add_argument("log", type=Path)
    svp.add_argument("--path", required=True, choices=("stock", "plugin"))
    svp.add_argument("--trainer", required=True, choices=("fsdp", "megatron"))
    svp.add_argument("--mem-samples", type=Path, default=None, help="mem_sampler.py's CSV of the run")
    svp.add_argument("--lora-samples", type=Path, default=None, help="lora_sampler.py's CSV of the run")
    flt = sub.add_parser("faults")
    flt.add_argument("log", type=Path)
    flt.add_argument("--steps", required=True, type=int, help="the run's STEPS")
    text = sub.add_parser("text")
    text.add_argument("kind")
    text.add_argument("summary")
    for p in (e2e, js, learn, scale, svp, flt, text):
        p.add_argument("--command", required=True)
        p.add_argument("--out", type=Path, default=RESULTS)
    merge = sub.add_parser("merge", help="append the records of DIR/*.json (a GPU host's $OUT/results) here")
    merge.add_argument("dir", type=Path)
    sub.add_parser("render")
    sub.add_parser("check")
    args = ap.parse_args(argv)
    if args.cmd == "e2e":
        figures = {"title": args.title, **e2e_figures(args.log.read_text(errors="replace"))}
        print(append(make_record("e2e", args.command, figures), args.out))
    elif args.cmd == "json":
        data = json.loads(args.file.read_text())
        print(append(make_record(args.kind, args.command, data if isinstance(data, dict) else {"rows": data}), args.out))
    elif args.cmd == "learning":
        figures = learning_figures(args.log.read_text(errors="replace"), args.arm, args.trainer, args.seed)
        print(append(make_record("learning", args.command, figures), args.out))
    elif args.cmd == "scale":
        figures = scale_figures(args.log.read_text(errors="replace"), args.shape, args.arm, args.trainer,
                                args.responses, args.lora_backend, args.mem_samples, args.lora_targets)
        print(append(make_record("scale", args.command, figures), args.out))
    elif args.cmd == "stock_vs_plugin":
        figures = stock_vs_plugin_figures(args.log.read_text(errors="replace"), args.path, args.trainer,
                                          args.mem_samples, args.lora_samples)
        print(append(make_record("stock_vs_plugin", args.command, figures), args.out))
    elif args.cmd == "faults":
        figures = faults_figures(args.log.read_text(errors="replace"), args.steps)
        print(append(make_record("faults", args.command, figures), args.out))
    elif args.cmd == "text":
        if args.kind == "gpu_tests" and not PYTEST_SUMMARY_RE.search(args.summary):
            print(f"records.py text gpu_tests: {args.summary!r} is not pytest's closing line (stopped early?); "
                  "no record", file=sys.stderr)
            return 1
        print(append(make_record(args.kind, args.command, {"summary": args.summary}), args.out))
    elif args.cmd == "merge":
        for path in sorted(args.dir.glob("*.json")):
            for record in json.loads(path.read_text()):
                print(append(record))
    elif args.cmd == "render":
        for name, text in rendered().items():
            (ROOT / "docs" / name).write_text(text)
    else:
        stale = [name for name, text in rendered().items()
                 if not (ROOT / "docs" / name).exists() or (ROOT / "docs" / name).read_text() != text]
        if stale:
            print(f"not current: {stale}; run python scripts/records.py render", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
