#!/usr/bin/env python3
"""Build the verl x SGLang compatibility matrix from probes of the real releases, on CPU.

    .venv/bin/python scripts/compat_matrix.py            # writes docs/compatibility.md + verl_sglang_lora/tools/compat_matrix.json
    .venv/bin/python scripts/compat_matrix.py --no-write # print the tables only

For every SGLang release S and verl release V it runs ``verl_sglang_lora/tools/compat_probe.py sglang --stock`` with
``PYTHONPATH=.cache/sglang/S[:.cache/verl/V]`` (the plugin's contract against S's own code, and verl V's own
request path against S), and for every V ``verl_sglang_lora/tools/compat_probe.py verl`` (registration + Hydra overlay). Release
dirs come from scripts/sglang_release.sh and scripts/verl_release_env.sh; verl 0.9.1 is the main venv's.

A cell is
  green     the plugin's contract passes on S (requests tp 1/2/4, launch args, adapter configs) AND registration
            and composition pass on V;
  red       some of that fails -- with the failing checks, the condition under which they apply, and the error;
  untested  a probe could not run (release dir missing, probe crashed).
All of it is CPU evidence. GPU runtime is a note per cell, read from the records in docs/results (scripts/records.py).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from verl_sglang_lora.releases import SGLANG_RELEASES, VENV_VERL, VERL_RELEASES

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "verl_sglang_lora" / "tools" / "compat_probe.py"
JSON_OUT = ROOT / "verl_sglang_lora" / "tools" / "compat_matrix.json"
MD_OUT = ROOT / "docs" / "compatibility.md"
PROBE_TIMEOUT_S = 300
SCHEMA = 1

RESULTS = ROOT / "docs" / "results"
GPU_NONE = "not exercised (CPU contract only)"


def gpu_evidence() -> dict[tuple[str, str], str]:
    """Per (verl, SGLang): what ran on a GPU, from the records in docs/results (scripts/records.py): each kind of
    record with its number of runs and the newest one's date, GPU and commit."""
    runs: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for path in sorted(RESULTS.glob("*.json")):
        for r in json.loads(path.read_text(encoding="utf-8")):
            versions = r.get("versions") or {}
            if r.get("gpu") and versions.get("verl") and versions.get("sglang"):
                runs.setdefault((versions["verl"], versions["sglang"]), {}).setdefault(r["kind"], []).append(r)
    out = {}
    for cell, kinds in runs.items():
        items = [f"{kind} x{len(rs)} (newest {rs[-1]['date']}, {rs[-1]['gpu']}, `{rs[-1]['commit']}`)"
                 for kind, rs in kinds.items()]
        out[cell] = "runs: " + "; ".join(items) + " -- docs/validation.md, docs/benchmarks.md"
    return out


def tested_sets() -> dict[str, dict[str, str]]:
    """The GPU-tested install sets (constraints/verl*-sglang*.txt): the versions of the packages that define them."""
    out = {}
    for path in sorted((ROOT / "constraints").glob("verl*-sglang*.txt")):
        pins = {}
        for raw in path.read_text(encoding="utf-8").splitlines():
            line = raw.split("#", 1)[0].strip()
            if "==" in line:
                name, version = (p.strip() for p in line.split("==", 1))
                if name in ("verl", "sglang", "torch", "transformers"):
                    pins[name] = version
        out[path.stem] = pins
    return out


# How the resident in-place path runs per SGLang release, beyond whether the CPU probe says it applies
RESIDENT_NOTE = {
    "0.5.23": (
        "Writes run inside SGLang's weight-update session (0.5.23 refuses tensor updates outside one): the server "
        "actor begins one at the first write and holds it, closing it before a base-weight sync, after a fallback "
        "and at a relaunch; it falls back, naming the reason, where the session's end would re-process base weights "
        "(a quantized checkpoint, `rollout.quantization`, `torchao_config`, a mixture-of-experts base: "
        "`runtime/resident/support.py::session_unsafe_base`)."
    ),
}

# Where a failing check applies (so a user can tell whether it hits their run).
CONDITIONS = {
    "request": lambda name: f"tp >= {name}",
    "launch_args": lambda name: {"all_linear": "target_modules=all-linear", "explicit_list": "explicit target list",
                                 "megatron_default": "Megatron (model.lora.target_modules)"}.get(name, name),
    "adapter_config": lambda name: "Megatron" if name.startswith("megatron") else "FSDP",
    "adapter_config_normalization": lambda name: "Megatron" if name.startswith("megatron") else "FSDP",
}


# ---- running the probes -----------------------------------------------------------------------------------------
def release_dir(kind: str, version: str) -> Path | None:
    if kind == "verl" and version == VENV_VERL:
        return None
    return ROOT / ".cache" / kind / version


def run_probe(args: list[str], paths: list[Path]) -> dict:
    env = dict(os.environ)
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    env.pop("PYTHONPATH", None)
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(PROBE), *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"crashed": f"timed out after {PROBE_TIMEOUT_S}s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        return {"crashed": f"exit {proc.returncode}, no JSON line: {tail}"}
    data = json.loads(lines[-1])
    data["wall_s"] = round(time.perf_counter() - t0, 1)
    data["pythonpath"] = ":".join(str(p.relative_to(ROOT)) for p in paths)
    return data


def run_all(jobs: int) -> tuple[dict, dict]:
    """({(verl, sglang): sglang-probe}, {verl: verl-probe}); missing release dirs give {"missing": ...}."""
    tasks: dict[tuple, tuple[list[str], list[Path]] | dict] = {}
    for v in VERL_RELEASES:
        vdir = release_dir("verl", v)
        if vdir is not None and not vdir.is_dir():
            tasks[("verl", v)] = {"missing": f"{vdir.relative_to(ROOT)} (bash scripts/verl_release_env.sh {v})"}
        else:
            tasks[("verl", v)] = (["verl"], [vdir] if vdir else [])
        for s in SGLANG_RELEASES:
            sdir = release_dir("sglang", s)
            if not sdir.is_dir():
                tasks[("cell", v, s)] = {"missing": f"{sdir.relative_to(ROOT)} (bash scripts/sglang_release.sh {s})"}
            elif vdir is not None and not vdir.is_dir():
                tasks[("cell", v, s)] = dict(tasks[("verl", v)])
            else:
                tasks[("cell", v, s)] = (["sglang", "--stock"], [sdir] + ([vdir] if vdir else []))
    results: dict[tuple, dict] = {k: t for k, t in tasks.items() if isinstance(t, dict)}
    with cf.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_probe, *t): k for k, t in tasks.items() if not isinstance(t, dict)}
        for fut in cf.as_completed(futures):
            key = futures[fut]
            results[key] = fut.result()
            print(f"[compat_matrix] {' '.join(key[1:]) if key[0] == 'cell' else 'verl ' + key[1]}: "
                  f"{results[key].get('wall_s', '-')} s", file=sys.stderr, flush=True)
    cells = {(k[1], k[2]): r for k, r in results.items() if k[0] == "cell"}
    verls = {k[1]: r for k, r in results.items() if k[0] == "verl"}
    return cells, verls


# ---- deciding ---------------------------------------------------------------------------------------------------
def probe_problem(data: dict) -> str | None:
    if "missing" in data:
        return f"release dir missing: {data['missing']}"
    if "crashed" in data:
        return f"probe crashed: {data['crashed']}"
    if "error" in data:
        return f"probe failed: {data['error']}"
    return None


def plugin_gaps(plugin: dict) -> list[dict]:
    gaps = []
    for check in plugin.get("failed", []):
        group, _, name = check.partition(".")
        res = plugin.get(group, {}).get(name, {})
        cond = CONDITIONS.get(group, lambda n: "always")(name)
        gaps.append({"check": check, "when": cond, "error": res.get("error", "failed")})
    if "field" not in plugin.get("request_shape", {}):
        gaps.append({"check": "request_shape", "when": "always", "error": str(plugin.get("request_shape"))})
    return gaps


def summarize_gaps(gaps: list[dict]) -> list[str]:
    """One line per distinct failure: request gaps merge into the smallest failing tp (the error of that tp)."""
    lines, seen = [], set()
    requests = sorted((g for g in gaps if g["check"].startswith("request.")), key=lambda g: int(g["check"][8:]))
    if requests:
        lines.append(f"[{requests[0]['when']}] {requests[0]['error']}")
    by_error: dict[str, list[str]] = {}
    for g in gaps:
        if g["check"].startswith("request."):
            continue
        by_error.setdefault(g["error"], [])
        if g["when"] not in by_error[g["error"]]:
            by_error[g["error"]].append(g["when"])
    for error, whens in by_error.items():
        if error not in seen:
            seen.add(error)
            lines.append(f"[{', '.join(whens)}] {error}")
    return lines


def short_reason(cell: dict) -> str:
    """The cell's one-line summary: which part fails, and what still passes."""
    if cell["status"] == "green":
        return "all CPU contract checks pass"
    if cell["status"] == "untested":
        return cell["reasons"][0]
    parts = []
    failed = {g["check"] for g in cell["gaps"]}
    tps = sorted(int(c[8:]) for c in failed if c.startswith("request."))
    if tps:
        ok_tps = [t for t in (1, 2, 4) if t < tps[0]]
        parts.append(f"requests with tp >= {tps[0]} fail" + (f" (tp = {', '.join(map(str, ok_tps))} passes)" if ok_tps else ""))
    for engine in ("megatron", "fsdp"):
        if any(c.startswith(("adapter_config", "adapter_config_normalization")) and engine in c for c in failed):
            other = "FSDP" if engine == "megatron" else "Megatron"
            other_ok = not any(c.startswith("adapter_config") and other.lower() in c for c in failed)
            parts.append(f"{'Megatron' if engine == 'megatron' else 'FSDP'} adapter config refused"
                         + (f" ({other} passes)" if other_ok else ""))
    parts += [g["check"] for g in cell["gaps"] if g["check"].startswith(("launch_args", "request_shape"))]
    parts += [r for r in cell["reasons"] if r.startswith("verl ")]
    return "; ".join(parts)


def verl_gaps(vdata: dict) -> list[str]:
    v = vdata.get("verl", {})
    out = []
    if not v.get("registration_ok"):
        out.append(f"registration: after import verl {v.get('after_import_verl')}, after import register "
                   f"{v.get('after_import_register')}")
    for name, res in v.get("compose", {}).items():
        if not res.get("ok"):
            out.append(f"compose {name}: {res.get('error', res)}")
    return out


def short_error(text: str) -> str:
    """Errors as a table can hold them (pydantic's multi-line validation error to one line)."""
    import re

    m = re.search(r"validation error for (\w+) (\w+) (.+?) \[type=(\w+),.*?input_type=(\w+)\]", text)
    if m:
        return f"ValidationError (HTTP 422): {m.group(2)}: {m.group(3)} (got {m.group(5)})"
    return text


def stock_label(stage: str, error: str) -> str:
    """A few words for the table; the full text goes below it."""
    if "resolved to characters" in error:
        return "launch: target modules split into characters"
    if "samples the base policy" in error:
        return "launch: LoRA not enabled"
    if "--max-lora-rank" in error:
        return "launch: max_lora_rank=0 assertion"
    if "asdict()" in error:
        return "wrap_lora_params: asdict() on a dict"
    if "torn into characters" in error:
        return "adapter target_modules split into characters"
    if "unexpected keyword argument" in error.lower():
        field = error.rsplit("'", 2)[-2] if "'" in error else "?"
        return f"request: no field `{field}`"
    if "dataclasses.fields(ServerArgs)" in error:
        return "launch: dataclasses.fields() on a msgspec ServerArgs"
    if "Can't instantiate abstract class" in error:
        return "HTTP client: abstract under SGLang's EngineBase"
    if "must run between" in error:
        return "base-weight sync: no weight-update session"
    if "HTTP 422" in error:
        return "HTTP 422: list where str expected" if "got list" in error else "HTTP 422"
    return f"{stage}: {error[:60]}"


def stock_summary(stock: dict) -> tuple[str, list[dict]]:
    """(works | breaks | not probed, [{label, detail, engines}]) for verl's own path, in path order."""
    if not stock or ("producers" not in stock and "launch" not in stock):
        err = stock.get("error", "no stock section") if stock else "no stock section"
        return "not probed", [{"label": "not probed", "detail": err, "engines": []}]
    breaks: list[dict] = []

    def add(stage: str, detail: str, engine: str, past: bool = False) -> None:
        detail = short_error(detail)
        for b in breaks:
            if b["detail"] == detail:
                if engine not in b["engines"]:
                    b["engines"].append(engine)
                return
        breaks.append({"label": stock_label(stage, detail) + (" (past the asdict break)" if past else ""),
                       "detail": detail, "engines": [engine]})

    for engine, res in stock.get("launch", {}).items():
        if not res.get("ok"):
            add("launch", res.get("error", "failed"), engine)
    for res in stock.get("runtime", []):  # engine-independent steps of the run itself, in run order
        if not res.get("ok"):
            for engine in stock.get("launch", {}) or ("fsdp", "megatron"):
                add(res["stage"], res.get("error", "failed"), engine)
    for engine, res in stock.get("producers", {}).items():
        if "error" in res and "wrap_lora_params" not in res:
            add("probe", res["error"], engine)
            continue
        wrap = res.get("wrap_lora_params", {})
        past = False
        if not wrap.get("ok"):
            add("wrap_lora_params", wrap.get("error", "failed"), engine)
            if isinstance(res.get("continued_with"), dict):
                add("wrap_lora_params(peft.LoraConfig)", res["continued_with"].get("error", "failed"), engine, True)
                continue
            past = True
        if res.get("config_target_char_split"):
            add("adapter config", f"adapter config target_modules torn into characters "
                f"{res['config_dict']['target_modules']}", engine, past)
        stage = res.get("breaks_at")
        if stage == "construct":
            add("request", res["construct"]["error"], engine, past)
        elif stage == "decode":
            add("decode", res["decode"]["error"], engine, past)
        elif stage == "adapter" and not res.get("config_target_char_split"):
            add("adapter", res.get("adapter", {}).get("error", "failed"), engine, past)
    return ("works" if not breaks else "breaks"), breaks


def decide(cells: dict, verls: dict) -> dict:
    out: dict[str, dict] = {}
    for v in VERL_RELEASES:
        out[v] = {}
        vprob = probe_problem(verls[v])
        for s in SGLANG_RELEASES:
            data = cells[(v, s)]
            cell: dict[str, Any] = {"gpu": gpu_evidence().get((v, s), GPU_NONE)}
            problem = probe_problem(data) or (f"verl {v}: {vprob}" if vprob else None)
            if problem:
                cell.update(status="untested", reasons=[problem], gaps=[], summary=problem)
                cell["stock"] = {"status": "not probed", "breaks": [{"label": "not probed", "detail": problem,
                                                                     "engines": []}]}
                out[v][s] = cell
                continue
            gaps = plugin_gaps(data["plugin"])
            reasons = summarize_gaps(gaps) + [f"verl {v}: {r}" for r in verl_gaps(verls[v])]
            cell["status"] = "green" if not reasons else "red"
            cell["reasons"] = reasons
            cell["gaps"] = gaps
            passing = [k for k in ("request", "launch_args", "adapter_config")
                       if all(r.get("ok") for r in data["plugin"][k].values())]
            cell["passes"] = passing
            cell["summary"] = short_reason(cell)
            status, breaks = stock_summary(data.get("stock", {}))
            stock = data.get("stock", {})
            cell["stock"] = {"status": status, "breaks": breaks, "field": stock.get("field"),
                             "field_matches_docs": stock.get("field_matches_docs"),
                             "stubbed_for_import": stock.get("stubbed_for_import", []),
                             "cpu_substitutions": stock.get("cpu_substitutions", [])}
            cell["probe_s"] = data.get("wall_s")
            out[v][s] = cell
    return out


# ---- facts per release ------------------------------------------------------------------------------------------
def sglang_facts(cells: dict) -> dict:
    facts = {}
    for s in SGLANG_RELEASES:
        data = next((cells[(v, s)] for v in VERL_RELEASES if not probe_problem(cells[(v, s)])), None)
        if data is None:
            facts[s] = {"probed": False}
            continue
        shape = data["plugin"]["request_shape"]
        launches = data["plugin"]["launch_args"]
        facts[s] = {
            "probed": True,
            "request": {k: shape.get(k) for k in ("field", "per_rank", "msgspec", "has_checksums")},
            "request_text": f"{shape.get('field')}: {'List[bytes]' if shape.get('per_rank') else 'str'}",
            "launch_resolved": {k: r.get("resolved") for k, r in launches.items()},
            "launch_route": next((r.get("route") for r in launches.values() if r.get("route")), None),
            "cpu_stubs_loaded": data.get("cpu_stubs_loaded", []),
            "adapter_wire": data["plugin"]["request"].get("1", {}).get("load_format") or "name -> tensor dict",
            "lora_load_patches": data["plugin"].get("lora_load_patches_reducers", {}).get("patches"),
            "priming_update_ok": data["plugin"].get("empty_tensor_update", {}).get("ok"),
            "resident": data["plugin"].get("resident", {}),
            "import_s": data.get("sglang_import_secs"),
        }
    return facts


def verl_facts(verls: dict) -> dict:
    facts = {}
    for v in VERL_RELEASES:
        data = verls[v]
        if probe_problem(data):
            facts[v] = {"probed": False, "problem": probe_problem(data)}
            continue
        d = data["verl"]
        facts[v] = {
            "probed": True,
            "ok": d.get("ok"),
            "sglang_pin": d.get("sglang_pin"),
            "loads_entry_points": d.get("loads_entry_points"),
            "registered_by_import_verl": all(d.get("after_import_verl", {}).values()),
            "registered_by_import_register": all(d.get("after_import_register", {}).values()),
            "registered_by_VERL_USE_EXTERNAL_MODULES": all(d.get("via_VERL_USE_EXTERNAL_MODULES", {}).values()),
            "compose": {k: {"ok": r.get("ok"), "model_engine": r.get("model_engine")} for k, r in d["compose"].items()},
            "probe_s": data.get("wall_s"),
        }
    return facts


# ---- output -----------------------------------------------------------------------------------------------------
def md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_md(matrix: dict, command: str) -> str:
    gen, cells, sf, vf = matrix["generated"], matrix["cells"], matrix["sglang"], matrix["verl"]
    L: list[str] = []
    L += ["# Compatibility: verl x SGLang", "",
          f"Generated {gen['date']} by `{command}` ({gen['wall_s']} s on {gen['host']}; {gen['python']}).",
          "Do not edit by hand: rerun the command. Data: `verl_sglang_lora/tools/compat_matrix.json` (read by "
          "`verl-sglang-lora doctor`).", "",
          "Every row below comes from `verl_sglang_lora/tools/compat_probe.py`, run once per cell in a fresh interpreter with the "
          "release dirs first on `PYTHONPATH` (`.cache/sglang/S`, `.cache/verl/V`; verl 0.9.1 is the venv's), "
          "against each release's **own** code: SGLang's `LoadLoRAAdapterFromTensorsReqInput`, its pydantic "
          "decode (FastAPI's path for the route), `MultiprocessingSerializer`, `ServerArgs` LoRA check, "
          "`get_normalized_target_modules`, `LoRAConfig` and `LoRAMemoryPool.can_support`; verl's registries, "
          "Hydra trees, `ServerAdapter.wrap_lora_params`, its HTTP client and its launch-arg expressions. "
          "`tests/test_compat_matrix_on_cpu.py` asserts the plugin rows in CI (the red checks as strict xfails).", "",
          "**green** = the plugin's contract passes on that SGLang (request for tp 1/2/4 decoded and deserialized "
          "to equal tensors, launch args accepted with the right target modules, FSDP and Megatron adapter "
          "configs accepted) **and** registration + Hydra composition pass on that verl. **red** = some of it "
          "fails (the condition and the error are listed). **untested** = the probe could not run. "
          "All of it is CPU evidence; the GPU column says what ran on a GPU.", "",
          "## The plugin (`rollout.name=sglang_lora`)", ""]
    L.append("| verl \\ SGLang | " + " | ".join(matrix["sglang_releases"]) + " |")
    L.append("|---|" + "---|" * len(matrix["sglang_releases"]))
    for v in matrix["verl_releases"]:
        row = [f"**{cells[v][s]['status']}**: {md_escape(cells[v][s]['summary'])}" for s in matrix["sglang_releases"]]
        L.append(f"| **{v}** | " + " | ".join(row) + " |")
    L += ["", "GPU runtime per cell:", ""]
    for v in matrix["verl_releases"]:
        for s in matrix["sglang_releases"]:
            if cells[v][s]["gpu"] != GPU_NONE:
                L.append(f"- verl {v} x SGLang {s}: {cells[v][s]['gpu']}")
    L.append(f"- every other cell: {GPU_NONE}.")
    reds = {}
    for v in matrix["verl_releases"]:
        for s in matrix["sglang_releases"]:
            for r in cells[v][s]["reasons"]:
                reds.setdefault((s, r), []).append(v)
    if reds:
        L += ["", "### Why the red cells are red", ""]
        for (s, reason), vs in reds.items():
            L.append(f"- SGLang {s} (verl {', '.join(vs)}): {md_escape(reason)}")
    L += ["", "## verl's own path (`rollout.name=sglang`, no plugin) against each SGLang", "",
          "The same probe runs verl's code for the verl release on the path: the `args.update({...})` LoRA block "
          "of `SGLangHttpServer.launch_server` (read from its source and evaluated with a stand-in `self`, FSDP: "
          "flat `lora_rank=8`, `target_modules=all-linear`; Megatron: `model.lora.rank=8`) through the release's "
          "`ServerArgs` check; the real `ServerAdapter.wrap_lora_params` (unbound, tp=2) with the adapter config "
          "each engine hands over (FSDP: peft `to_dict()`; Megatron: verl's own `build_peft_config_for_vllm`); "
          "the request struct built with the field verl uses (read from `update_weights`' source); verl's "
          "`AsyncHttpServerAdapter.load_lora_adapter_from_tensor` with only the transport captured; the "
          "release's decoder, deserializer and adapter checks. Where `wrap_lora_params` fails on the dict the "
          "engine really hands over, the probe continues with a `peft.LoraConfig` (the type its signature names) "
          "to show what breaks next. Three steps of the run itself are run against the release too: the launch's "
          "`dataclasses.fields(ServerArgs)`, building verl's HTTP client under the release's `EngineBase`, and whether "
          "its base-weight sync opens the weight-update session the release requires (all three break verl's run on "
          "SGLang 0.5.23). Breaks in path order (launch, then the adapter sync), engines in brackets:", ""]
    L.append("| verl \\ SGLang | " + " | ".join(matrix["sglang_releases"]) + " |")
    L.append("|---|" + "---|" * len(matrix["sglang_releases"]))
    details: dict[str, list[str]] = {}
    for v in matrix["verl_releases"]:
        row = []
        for s in matrix["sglang_releases"]:
            st = cells[v][s]["stock"]
            items = []
            for b in st["breaks"]:
                engines = "/".join("FSDP" if e == "fsdp" else "Megatron" if e == "megatron" else e
                                   for e in b["engines"])
                items.append(f"{b['label']}" + (f" [{engines}]" if engines else ""))
                details.setdefault(b["detail"], []).append(f"{v} x {s}")
            row.append(f"**{st['status']}**" + (": " + "<br>".join(md_escape(i) for i in items) if items else ""))
        L.append(f"| **{v}** | " + " | ".join(row) + " |")
    L += ["", "The errors behind the table (verl x SGLang where each occurs):", ""]
    for detail, where in details.items():
        L.append(f"- {md_escape(detail)} -- {', '.join(where)}")
    stubs = sorted({m for v in cells for s in cells[v] for m in cells[v][s]["stock"].get("stubbed_for_import", [])})
    subs = sorted({m for v in cells for s in cells[v] for m in cells[v][s]["stock"].get("cpu_substitutions", [])})
    L += ["", "To import verl's `sglang_rollout` on a CPU host the probe replaces "
          + ", ".join(f"`{m}`" for m in stubs)
          + " with inert modules (server entry points; not on the adapter path)"
          + ("; and " + "; ".join(f"`{m}`" for m in subs) if subs else "") + ". "
          "Runtime defects of the stock path that a CPU probe cannot show (resume of an unreleased `weights` tag, "
          "Megatron sampling the base policy on 0.8.0, ...) are in docs/verl_touchpoints.md.", ""]
    L += ["## Per SGLang release", "",
          "| SGLang | request field | launch `all-linear` resolves to | explicit list resolves to | LoRA check | CPU stubs |",
          "|---|---|---|---|---|---|"]
    for s in matrix["sglang_releases"]:
        f = sf[s]
        if not f.get("probed"):
            L.append(f"| {s} | not probed | | | | |")
            continue
        kind = "msgspec" if f["request"]["msgspec"] else "dataclass"
        L.append(f"| {s} | `{f['request_text']}` ({kind}{', checksums' if f['request']['has_checksums'] else ''}) "
                 f"| `{f['launch_resolved'].get('all_linear')}` | `{f['launch_resolved'].get('explicit_list')}` "
                 f"| `{md_escape(f['launch_route'])}` | {', '.join(f['cpu_stubs_loaded']) or '-'} |")
    L += ["", "Adapter wire form and scheduler priming (`sglang_contract/lora_request.py`, `sglang_contract/ipc_reducers.py`): "
          "where `load_lora_adapter_from_tensors` does not apply SGLang's torch patch itself, a fresh scheduler dies on "
          "the first CUDA-IPC adapter load (`no attribute '_rebuild_cuda_tensor_original'`); the plugin's server sends an empty `update_weights_from_tensor` after every launch.", "",
          "| SGLang | adapter tensors travel as | its adapter load applies the torch patch (read from `tp_worker.py`) "
          "| priming update decoded, each rank reads `[]` | resident in-place sync (rollout TP 1; `runtime/resident/support.py`) |",
          "|---|---|---|---|---|"]
    for s in matrix["sglang_releases"]:
        f = sf[s]
        if f.get("probed"):
            res = f.get("resident") or {}
            resident = ("not probed" if not res.get("ok") else "applies" if res.get("unsupported") is None
                        else f"falls back: {md_escape(res['unsupported'])}")
            if s in RESIDENT_NOTE:
                resident += f". {RESIDENT_NOTE[s]}"
            L.append(f"| {s} | `{f['adapter_wire']}` | {'yes' if f['lora_load_patches'] else 'no'} "
                     f"| {'yes' if f['priming_update_ok'] else 'NO'} | {resident} |")
    L += ["", "## Per verl release", "",
          "| verl | `[sglang]` pin | `verl.plugins` entry point | registered by `import verl` | by `import verl_sglang_lora.register` | by `VERL_USE_EXTERNAL_MODULES` | overlay: ppo_trainer / ppo_megatron_trainer |",
          "|---|---|---|---|---|---|---|"]
    for v in matrix["verl_releases"]:
        f = vf[v]
        if not f.get("probed"):
            L.append(f"| {v} | {md_escape(f.get('problem'))} | | | | | |")
            continue
        comp = " / ".join(("composes" if f["compose"][n]["ok"] else "FAILS") + f" ({f['compose'][n]['model_engine']})"
                          for n in ("ppo_trainer", "ppo_megatron_trainer"))
        yn = {True: "yes", False: "no", None: "?"}
        L.append(f"| {v} | {f['sglang_pin']} | {yn[f['loads_entry_points']]} | {yn[f['registered_by_import_verl']]} "
                 f"| {yn[f['registered_by_import_register']]} | {yn[f['registered_by_VERL_USE_EXTERNAL_MODULES']]} "
                 f"| {comp} |")
    L += ["", "On verl 0.8.0 (no entry points) the overlay's `model.external_lib` and "
          "`VERL_USE_EXTERNAL_MODULES` are what register the name; on 0.9.x the entry point alone does.", "",
          "## Timings", "",
          f"Whole run: {gen['wall_s']} s with {gen['jobs']} probes in parallel on {gen['host']}. Per probe "
          "(wall, including interpreter start and the SGLang import):", ""]
    L.append("| verl \\ SGLang | " + " | ".join(matrix["sglang_releases"]) + " | verl probe |")
    L.append("|---|" + "---|" * (len(matrix["sglang_releases"]) + 1))
    for v in matrix["verl_releases"]:
        row = [f"{cells[v][s].get('probe_s', '-')} s" for s in matrix["sglang_releases"]]
        L.append(f"| {v} | " + " | ".join(row) + f" | {vf[v].get('probe_s', '-')} s |")
    L += ["", "## Not covered", "",
          "- GPU runtime of every cell but those with records (the GPU notes above): CUDA-IPC "
          "handles, the LoRA kernels, sleep/wake on real memory, tp > 1 on real devices.",
          "- verl 0.8.0 / 0.9.0 run from `--no-deps` dirs with the venv's numpy 2 / transformers 5: good for their "
          "registries, config trees and request code, not a training runtime (docs/cpu_environment.md).",
          "- SGLang's `LoRAManager` is not constructed: the memory pool's module set is derived as "
          "`init_lora_shapes` derives it (for `all` on >= 0.5.12, Qwen3's LoRA modules plus embeddings, which a "
          "model scan would give); `can_support` itself is the release's own.", ""]
    return "\n".join(L)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    ap.add_argument("--no-write", action="store_true", help="print the tables, write nothing")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    cells, verls = run_all(args.jobs)
    wall = round(time.perf_counter() - t0, 1)
    given = list(sys.argv[1:] if argv is None else argv)
    command = " ".join([".venv/bin/python", "scripts/compat_matrix.py", *(shlex.quote(a) for a in given)])
    matrix = {
        "schema": SCHEMA,
        "generated": {
            "date": dt.date.today().isoformat(),
            "command": command,
            "wall_s": wall,
            "jobs": args.jobs,
            "host": f"{os.cpu_count()} CPU cores, {platform.system()} {platform.machine()}, no GPU",
            "python": f"Python {platform.python_version()}",
        },
        "verl_releases": list(VERL_RELEASES),
        "sglang_releases": list(SGLANG_RELEASES),
        "sglang": sglang_facts(cells),
        "verl": verl_facts(verls),
        "cells": decide(cells, verls),
        "tested_sets": tested_sets(),
    }
    md = render_md(matrix, command)
    if args.no_write:
        print(md)
    else:
        JSON_OUT.write_text(json.dumps(matrix, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        MD_OUT.write_text(md, encoding="utf-8")
        print(f"[compat_matrix] wrote {JSON_OUT.relative_to(ROOT)} and {MD_OUT.relative_to(ROOT)} in {wall} s",
              file=sys.stderr)
    for v in VERL_RELEASES:
        print(f"verl {v}: " + "  ".join(f"{s}={matrix['cells'][v][s]['status']}" for s in SGLANG_RELEASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
