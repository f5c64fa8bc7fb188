"""What each injected fault of a GPU fault run did, read from the run's log (scripts/device/faults.sh).

    python3 scripts/device/fault_report.py LOG STEPS

faults.sh appends one marker line per fault to the run's log at the moment it injects it
(``sglang_lora_faults: inject {json}``, or ``... skipped {json}`` where it could not), so every later line of the log
-- the plugin's, SGLang's, Ray's -- is ordered against the injection. For each fault this prints: how it was injected,
the step it hit, whether the run recovered (or refused loudly), the time to recover from the log's timestamps, the
steps completed after it and the samples served by the base policy or a stale adapter version (the server's
per-step counts of its per-sample version tags, ``sglang_lora/base_policy_samples`` and ``sglang_lora/staleness_*``).
Then one verdict line per fault and a markdown table. Exit code 0 when every fault passed.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_table import parse as parse_steps  # noqa: E402  (a sibling script, not a package)

MARKER_RE = re.compile(r"sglang_lora_faults: (inject|skipped) (\{.*\})")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
# Python logging's "LEVEL:2026-12-03 06:30:15,229:" and SGLang's "[2026-12-03 06:31:51]" (the log's only two forms)
TS_RE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:,(\d{3}))?")
STEP_RE = re.compile(r"step:(\d+) - ")
SYNC_RE = re.compile(r"sglang_lora: adapter sync (\{.*\})")
RESTARTED_RE = re.compile(r"sglang_lora: server actor restarted by Ray")
RECOVERED_RE = re.compile(r"sglang_lora: server recovered (\{.*\})")
RETRIED_RE = re.compile(r"Task SGLangLoRARollout\.(\w+) failed")
CRASHED_RE = re.compile(r"Subprocess (\S+) \(pid=(\d+)\) crashed with exit code (-?\d+)")  # SGLang's watchdog
HOOK_RE = re.compile(r"sglang_lora: fault_injection: (\w+) unload #(\d+) of (\S+)")
UNLOAD_FAILED_RE = re.compile(r"sglang_lora: unloading stale adapter (\S+) failed")
# errors that name the failure (not a bare "Traceback": every run ends with verl's DataLoader teardown traceback)
LOUD_RE = re.compile(r"ServerRestartError|SGLangRequestError|ActorDiedError|ActorUnavailableError|RayActorError|"
                     r"RayTaskError|ServedEffectMismatch|VERL_SGLANG_LORA_INJECT: bad entry")

# fault id -> (what it is, what makes it count as having hit what it was aimed at)
FAULTS = {
    "unload_fail": "an unload SGLang refuses",
    "scheduler_kill": "SGLang's scheduler dies, the server actor lives",
    "actor_kill_rollout": "server actor killed mid-rollout",
    "actor_kill_sync": "server actor killed mid adapter sync",
}
KILL_FAULTS = ("scheduler_kill", "actor_kill_rollout", "actor_kill_sync")


@dataclass
class Line:
    index: int
    text: str
    ts: float | None  # epoch seconds from the line's own timestamp, None where it has none


@dataclass
class FaultResult:
    fault: str
    how: str
    injected: bool
    hit_step: int | None = None
    steps_after: int = 0
    last_step: int | None = None
    recovered: bool = False
    refused: str | None = None  # the first loud error line after the injection, when the run stopped on it
    recover_s: float | None = None  # injection -> serving again (kills) / -> the retried unload's sync (unload_fail)
    server_recover_s: float | None = None  # the restarted actor's own relaunch + snapshot load ("recover_s")
    next_sync: str | None = None  # the first adapter sync after the injection: "load v7" / "ack v9"
    resent: list[str] = field(default_factory=list)  # server-actor calls Ray re-sent after the death
    evidence: list[str] = field(default_factory=list)
    samples: int = 0
    base_samples: int = 0
    stale_samples: str = "0"  # exact 0, or a lower bound (">=1") where a step's staleness_max > 0
    verdict: str = "FAIL"
    reason: str = ""


def line_epoch(text: str) -> float | None:
    """The epoch of the first timestamp in a log line (local time, as the processes on the host wrote it)."""
    m = TS_RE.search(text)
    if not m:
        return None
    base = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
    return base + (int(m.group(2)) / 1000.0 if m.group(2) else 0.0)


def read_lines(raw: list[str]) -> list[Line]:
    out = []
    for i, text in enumerate(raw):
        text = ANSI_RE.sub("", text.rstrip("\n"))
        out.append(Line(i, text, line_epoch(text)))
    return out


def dict_in(pattern: re.Pattern[str], text: str) -> dict[str, Any] | None:
    """The Python-literal dict a plugin log line carries (logged with %s of a dict)."""
    m = pattern.search(text)
    if not m:
        return None
    try:
        value = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, dict) else None


def markers(lines: list[Line]) -> list[tuple[Line, str, dict[str, Any]]]:
    out = []
    for line in lines:
        m = MARKER_RE.search(line.text)
        if m:
            info = json.loads(m.group(2))
            out.append((line, m.group(1), info))
    return out


def step_at(lines: list[Line], index: int) -> int:
    """Steps finished before log line ``index`` (the step in progress is this + 1)."""
    return sum(1 for line in lines[:index] if STEP_RE.search(line.text))


def first(lines: list[Line], pattern: re.Pattern[str]) -> Line | None:
    return next((line for line in lines if pattern.search(line.text)), None)


def count_samples(steps: dict[int, dict[str, str]], lo: int, hi: int) -> tuple[int, int, str]:
    """(tagged samples, base-policy samples, stale samples) over steps lo..hi, from the server's per-step counts."""
    tagged = base = 0
    stale_steps = []
    for s in range(lo, hi + 1):
        m = steps.get(s, {})
        tagged += int(float(m.get("sglang_lora/samples", 0)))
        base += int(float(m.get("sglang_lora/base_policy_samples", 0)))
        if float(m.get("sglang_lora/staleness_max", 0)) > 0:
            stale_steps.append(s)
    # the server exports staleness max/mean per step, not a count: > 0 means at least one stale sample that step
    stale = "0" if not stale_steps else f">={len(stale_steps)} (steps {','.join(map(str, stale_steps))})"
    return tagged, base, stale


def analyse(raw: list[str], total_steps: int) -> list[FaultResult]:
    lines = read_lines(raw)
    steps = parse_steps([line.text for line in lines])
    marks = markers(lines)
    results = []
    for k, (mark, kind, info) in enumerate(marks):
        fault = info.get("fault", "?")
        res = FaultResult(fault, info.get("how", ""), injected=kind == "inject")
        if not res.injected:
            res.verdict, res.reason = "NOT_RUN", info.get("why", "not injected")
            results.append(res)
            continue
        start = mark.index
        if fault == "unload_fail":  # injected inside the server; faults.sh marks it when it sees the hook's line
            hook = next((ln for ln in reversed(lines[:start]) if HOOK_RE.search(ln.text)
                         and HOOK_RE.search(ln.text).group(1) == "unload_fail"), None)
            start = hook.index if hook else start
        end = marks[k + 1][0].index if k + 1 < len(marks) else len(lines)
        window = lines[start:end]
        t_inject = info.get("epoch") if fault != "unload_fail" else (lines[start].ts or info.get("epoch"))
        res.hit_step = step_at(lines, start) + 1
        done = [s for s in steps if s >= res.hit_step]
        next_hit = step_at(lines, end) + 1 if end < len(lines) else None
        window_steps = [s for s in done if next_hit is None or s < next_hit]
        res.steps_after = len(done)
        res.last_step = max(window_steps) if window_steps else None
        hi = res.last_step if res.last_step is not None else res.hit_step
        res.samples, res.base_samples, res.stale_samples = count_samples(steps, res.hit_step, hi)
        (judge_unload_fail if fault == "unload_fail" else judge_kill)(res, window, t_inject, steps)
        loud = first([ln for ln in window if not RETRIED_RE.search(ln.text)], LOUD_RE)
        if loud is not None and not res.recovered:
            res.refused = loud.text.strip()[:200]
        decide(res, total_steps)
        results.append(res)
    return results


def judge_kill(res: FaultResult, window: list[Line], t_inject: float | None, steps: dict[int, dict[str, str]]) -> None:
    """A killed server: Ray restarted the actor, it relaunched SGLang and served the newest snapshot, syncs go on."""
    restarted = first(window, RESTARTED_RE)
    recovered = first(window, RECOVERED_RE)
    res.resent = sorted({RETRIED_RE.search(ln.text).group(1) for ln in window if RETRIED_RE.search(ln.text)})
    crashed = first(window, CRASHED_RE)
    if crashed is not None:
        m = CRASHED_RE.search(crashed.text)
        res.evidence.append(f"SGLang watchdog: {m.group(1)} pid={m.group(2)} exit {m.group(3)}")
    if restarted is not None:
        res.evidence.append("actor restarted by Ray")
    if recovered is not None:
        report = dict_in(RECOVERED_RE, recovered.text) or {}
        res.server_recover_s = report.get("recover_s")
        res.evidence.append(f"recovered {report.get('adapter')} (version {report.get('version')})")
        if recovered.ts is not None and t_inject is not None:
            res.recover_s = round(recovered.ts - t_inject, 1)
    # the first sync after the injection: the re-sent one when the kill hit a sync. Not "after the recovered line":
    # the worker's ack and the actor's "recovered" line come from two processes and interleave in either order
    sync = next((ln for ln in window if recovered is not None and SYNC_RE.search(ln.text)), None)
    if sync is not None:
        d = dict_in(SYNC_RE, sync.text) or {}
        res.next_sync = f"{d.get('action', 'load')} v{d.get('version')}"
    res.recovered = recovered is not None and sync is not None and res.steps_after > 0


def judge_unload_fail(res: FaultResult, window: list[Line], t_inject: float | None,
                      steps: dict[int, dict[str, str]]) -> None:
    """A refused unload: warned and counted once, retried at the next activation (a second refusal would raise)."""
    hook = first(window, HOOK_RE)
    name = HOOK_RE.search(hook.text).group(3) if hook else None
    warnings = [ln for ln in window if UNLOAD_FAILED_RE.search(ln.text)
                and UNLOAD_FAILED_RE.search(ln.text).group(1) == name]
    res.evidence.append(f"{len(warnings)} refusal warning(s) for {name}")
    counted = sum(int(float(m.get("sglang_lora/unload_failures", 0))) for m in steps.values())
    res.evidence.append(f"unload_failures counted {counted}")
    # the refusal happens in the sync that activates version v+1; the retry in the next one (v+2)
    from_version = None
    m = re.search(r"_v(\d+)", name or "")
    if m:
        from_version = int(m.group(1)) + 2
    retry = None
    for ln in window:
        d = dict_in(SYNC_RE, ln.text)
        if d is not None and from_version is not None and int(d.get("version", -1)) >= from_version:
            retry = ln
            res.next_sync = f"{d.get('action', 'load')} v{d.get('version')}"
            break
    if retry is not None and retry.ts is not None and t_inject is not None:
        res.recover_s = round(retry.ts - t_inject, 1)
    res.recovered = hook is not None and len(warnings) == 1 and retry is not None


def decide(res: FaultResult, total_steps: int) -> None:
    """PASS: recovered, the run went on past the fault, nothing served by the base policy or a stale version."""
    if res.fault == "actor_kill_rollout" and res.recovered and "generate" not in res.resent:
        res.verdict, res.reason = "MISSED", "no generate call was in flight at the kill (Ray re-sent none)"
        return
    if res.fault == "actor_kill_sync" and res.recovered and not (res.next_sync or "").startswith("ack"):
        res.verdict, res.reason = "MISSED", f"the re-sent sync was not acknowledged from the snapshot ({res.next_sync})"
        return
    if res.base_samples or res.stale_samples != "0":
        res.verdict = "FAIL"
        res.reason = f"{res.base_samples} base-policy samples, stale {res.stale_samples}"
    elif res.recovered:
        res.verdict, res.reason = "PASS", "recovered"
    elif res.refused:
        res.verdict, res.reason = "REFUSED", f"refused loudly: {res.refused}"
    else:
        res.verdict, res.reason = "FAIL", "no recovery seen and no error raised (silent)"


def fmt(value: Any) -> str:
    return "-" if value is None else str(value)


def table(results: list[FaultResult]) -> str:
    rows = ["| fault | how injected | hit step | outcome | time to recover s (actor relaunch s) | next sync | "
            "steps after | samples tagged / base / stale | verdict |", "|---" * 9 + "|"]
    for r in results:
        outcome = "; ".join(r.evidence + ([f"Ray re-sent: {', '.join(r.resent)}"] if r.resent else []))
        name = f"{FAULTS.get(r.fault, r.fault)} (`{r.fault}`)"
        rows.append(f"| {name} | {r.how} | {fmt(r.hit_step)} | {outcome or '-'} | "
                    f"{fmt(r.recover_s)} ({fmt(r.server_recover_s)}) | {fmt(r.next_sync)} | {r.steps_after} | "
                    f"{r.samples} / {r.base_samples} / {r.stale_samples} | {r.verdict} |")
    return "\n".join(rows)


def verdict_lines(results: list[FaultResult], raw: list[str], total_steps: int) -> list[str]:
    done = len(parse_steps([ANSI_RE.sub("", x) for x in raw]))
    out = [f"faults verdict fault={r.fault} verdict={r.verdict} hit_step={fmt(r.hit_step)} "
           f"recover_s={fmt(r.recover_s)} base={r.base_samples} stale={r.stale_samples} ({r.reason})" for r in results]
    seen = {r.fault for r in results}
    out += [f"faults verdict fault={f} verdict=NOT_RUN (no marker in the log: the run ended before it)"
            for f in FAULTS if f not in seen]
    ok = len(seen) == len(FAULTS) and all(r.verdict == "PASS" for r in results)
    out.append(f"faults verdict={'PASS' if ok else 'FAIL'} (steps={done}/{total_steps}, "
               f"pass={sum(r.verdict == 'PASS' for r in results)}/{len(FAULTS)})")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    raw = Path(argv[0]).read_text(errors="replace").splitlines()
    total = int(argv[1])
    results = analyse(raw, total)
    print(table(results))
    lines = verdict_lines(results, raw, total)
    print("\n".join(lines))
    return 0 if lines[-1].startswith("faults verdict=PASS") else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
