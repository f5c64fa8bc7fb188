"""The CPU-testable pieces of the GPU fault run and soak (scripts/device/faults.sh, soak.sh; items 3-4):
the test-only unload hook (its spec, that it fires once on the Nth unload, that the real ``_unload`` takes it as
SGLang's refusal), the bash helpers that find processes by title and mark the log, the fault report on a log built
from the real log-line formats (as verl, Ray and SGLang print them), and the memory sampler's rows and report."""

from __future__ import annotations

import asyncio
import csv
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests import conftest
from verl_sglang_lora.runtime import fault_injection as fi
from verl_sglang_lora.sglang_contract.errors import SGLangRequestError

ROOT = Path(__file__).resolve().parents[1]
DEVICE = ROOT / "scripts" / "device"


def load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"device_{name}", DEVICE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"device_{name}"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


fault_report = load_script("fault_report")
mem_sampler = load_script("mem_sampler")


# ---- the injection hook ---------------------------------------------------------------------------------------------
def test_spec_parsing() -> None:
    assert fi.parse_spec("unload_fail:2") == [fi.Fault("unload_fail", nth=2)]
    assert fi.parse_spec(" unload_fail:v2 , unload_stall:v8:20 ") == [
        fi.Fault("unload_fail", version=2), fi.Fault("unload_stall", version=8, seconds=20.0)]
    assert fi.parse_spec("unload_stall:3") == [fi.Fault("unload_stall", nth=3, seconds=fi.DEFAULT_STALL_S)]
    assert fi.parse_spec("") == []
    for bad in ("unload_fail", "unload_fail:0", "unload_fail:x", "load_fail:1", "unload_fail:1:5", "unload_stall:v-1",
                "unload_stall:1:-1", "unload_fail:1:2:3"):
        with pytest.raises(ValueError, match="VERL_SGLANG_LORA_INJECT: bad entry"):
            fi.parse_spec(bad)
    assert [fi.adapter_version(n) for n in ("verl_lora_v7", "verl_lora_v7r1", "verl_resident_0", "v7")] == [7, 7, None, None]


async def _unloads(injector: fi.UnloadInjector, names: list[str]) -> list[str]:
    out = []
    for name in names:
        try:
            await injector.before_unload(name)
            out.append("ok")
        except SGLangRequestError as exc:
            out.append(f"fail {exc.endpoint} {exc.status}")
    return out


def test_fires_exactly_once_on_the_nth_unload_with_the_error_unload_handles() -> None:
    injector = fi.UnloadInjector(fi.parse_spec("unload_fail:2"))
    names = ["verl_lora_v0", "verl_lora_v1", "verl_lora_v2", "verl_lora_v1"]
    # the 2nd unload fails, as SGLang's success=False surfaces through _sglang_call; its retry (4th) goes through
    assert asyncio.run(_unloads(injector, names)) == ["ok", "fail unload_lora_adapter 200", "ok", "ok"]
    assert injector.count == 4


def test_version_keyed_fault_and_stall() -> None:
    injector = fi.UnloadInjector(fi.parse_spec("unload_fail:v2,unload_stall:v3:0.05"))
    t0 = time.perf_counter()
    assert asyncio.run(_unloads(injector, ["verl_lora_v1", "verl_lora_v2", "verl_lora_v3", "verl_lora_v2"])) == [
        "ok", "fail unload_lora_adapter 200", "ok", "ok"]
    assert time.perf_counter() - t0 >= 0.05  # the stall held the unload (and so the sync around it)
    assert asyncio.run(_unloads(injector, ["verl_lora_v3"])) == ["ok"]  # once: no second stall


def test_hook_is_inert_without_the_variable_and_loud_on_a_typo(monkeypatch, caplog) -> None:
    monkeypatch.delenv(fi.ENV, raising=False)
    assert fi.injector() is None
    asyncio.run(fi.before_unload("verl_lora_v1"))  # no-op
    monkeypatch.setenv(fi.ENV, "unload_fail:1")
    with caplog.at_level("WARNING"), pytest.raises(SGLangRequestError, match="injected unload failure of verl_lora_v5"):
        asyncio.run(fi.before_unload("verl_lora_v5"))
    # the exact line faults.sh waits for
    assert "sglang_lora: fault_injection: unload_fail unload #1 of verl_lora_v5" in caplog.text
    monkeypatch.setenv(fi.ENV, "unload_fial:1")
    with pytest.raises(ValueError, match="bad entry"):
        asyncio.run(fi.before_unload("verl_lora_v6"))
    with pytest.raises(ValueError, match="bad entry"):  # stays loud: a bad value is never cached
        asyncio.run(fi.before_unload("verl_lora_v6"))
    monkeypatch.delenv(fi.ENV)
    assert fi.injector() is None


def test_unload_calls_the_hook_inside_its_refusal_handling() -> None:
    """Read from the source: the hook is awaited inside the try whose except handles SGLang's refusal."""
    source = (ROOT / "verl_sglang_lora" / "runtime" / "server.py").read_text()
    body = source[source.index("    async def _unload("):source.index("    async def canary(")]
    try_block = body[body.index("try:"):body.index("except SGLangRequestError")]
    assert "await before_unload(name)" in try_block
    assert try_block.index("before_unload") < try_block.index("_sglang_call(\"unload_lora_adapter\"")
    assert source.count("before_unload(") == 1


_PROBE = r"""
import json, sys
from verl_sglang_lora.tools.compat_probe import stub_inert_modules
stub_inert_modules()
import ray
from tests.server_probe import push_down_proj_version, start_probe_server

cfg, srv = start_probe_server(sys.argv[1], sys.argv[2])

def push(version):
    try:
        return push_down_proj_version(srv, version)["action"]
    except Exception as exc:
        return "error: " + str(exc)[-300:]

out = {"pushes": [push(v) for v in (1, 2, 3)], "metrics": ray.get(srv.drain_metrics.remote()),
       "unloads": [c[1] for c in ray.get(srv.calls.remote()) if c[0] == "unload"]}
print(json.dumps(out, default=str))
ray.shutdown()
"""


def test_injected_unload_failure_through_the_real_server_actor(tiny_qwen3, tmp_path) -> None:
    """VERL_SGLANG_LORA_INJECT reaches the Ray actor from the driver's environment, and the real ``_unload`` takes the
    injected failure as a refusal: counted, retried at the next sync, no error into the trainer."""
    pytest.importorskip("ray")
    pytest.importorskip("verl")
    from tests.server_probe import run_probe_script

    out = run_probe_script(_PROBE, str(tiny_qwen3), str(tmp_path), extra_env={fi.ENV: "unload_fail:v1"})
    assert out["pushes"] == ["load", "load", "load"]
    assert out["metrics"]["sglang_lora/unload_failures"] == 1.0
    # v1's unload was refused before it reached SGLang (at v2), then retried and sent at v3 after v2's
    assert out["unloads"] == ["verl_lora_v2", "verl_lora_v1"]


# ---- the bash helpers of faults.sh, run as written ---------------------------------------------------------------------
def bash_functions(script: Path, names: list[str]) -> str:
    """The definitions of these functions from a script (each ends at the first line that is exactly '}')."""
    text = script.read_text()
    out = []
    for name in names:
        m = re.search(rf"^{name}\(\) \{{.*?^\}}$|^{name}\(\) \{{[^\n]*\}}$", text, re.S | re.M)
        assert m, name
        out.append(m.group(0))
    return "\n".join(out)


def run_bash(code: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_marker_lines_are_json_the_report_reads(tmp_path) -> None:
    log = tmp_path / "run.log"
    log.write_text("(TaskRunnerV1 pid=1) step:1 - a:1\n(TaskRunnerV1 pid=1) step:2 - a:1\n")
    defs = bash_functions(DEVICE / "faults.sh", ["steps_done", "mark"])
    run_bash(defs + '\nmark inject scheduler_kill "SIGKILL to sglang::scheduler pid=5 (child of ray::X pid=4)"'
             '\nmark skipped actor_kill_rollout "-" "no ray::SGLangLoRARollout process"', {"LOG": str(log)})
    marks = fault_report.markers(fault_report.read_lines(log.read_text().splitlines()))
    assert [(kind, info["fault"], info["steps_done"]) for _, kind, info in marks] == [
        ("inject", "scheduler_kill", 2), ("skipped", "actor_kill_rollout", 2)]
    assert abs(marks[0][2]["epoch"] - time.time()) < 30
    assert marks[1][2]["why"] == "no ray::SGLangLoRARollout process"


def test_synced_matches_both_sync_line_formats(tmp_path) -> None:
    log = tmp_path / "run.log"
    log.write_text(SYNC_NEW.format(ts="2026-12-03 06:32:42,339", v=12) + "\n" + SYNC_OLD.format(v=3) + "\n")
    defs = bash_functions(DEVICE / "faults.sh", ["synced"])
    found = run_bash(defs + "\nfor v in 1 2 3 12; do synced $v && echo $v; done", {"LOG": str(log)})
    assert found.split() == ["3", "12"]


def test_actor_and_scheduler_found_by_their_titles(tmp_path) -> None:
    """A parent titled like Ray's server actor with a child titled like SGLang's scheduler (setproctitle, as both
    set theirs): actor_pid and scheduler_pid find exactly those two."""
    pytest.importorskip("setproctitle")
    script = tmp_path / "tree.py"
    script.write_text(textwrap.dedent("""
        import subprocess, sys, time, setproctitle
        setproctitle.setproctitle("ray::SGLangLoRARollout.generate")
        child = subprocess.Popen([sys.executable, "-c",
            "import setproctitle, time; setproctitle.setproctitle('sglang::scheduler'); time.sleep(60)"])
        print(child.pid, flush=True)
        time.sleep(60)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        time.sleep(0.5)  # the child sets its title after the interpreter starts
        defs = bash_functions(DEVICE / "faults.sh", ["actor_pid", "is_descendant", "scheduler_pid", "title_of"])
        out = run_bash(defs + '\nACTOR_TITLE="ray::SGLangLoRARollout"; a=$(actor_pid); echo "$a $(scheduler_pid $a)";'
                       ' title_of $a')
        first, title = out.splitlines()[0], out.splitlines()[1]
        assert first.split() == [str(parent.pid), str(child)]
        assert "SGLangLoRARollout.generate" in title
    finally:
        if child is not None:
            os.kill(child, 9)  # the process this test started, by its id
        parent.kill()
        parent.wait()


# ---- the fault report on a log in the run's real line formats -----------------------------------------------------------
# the formats of verl's console step lines and the kill-and-recover log, as printed on a GPU host
SYNC_NEW = ("\x1b[36m(WorkerDict pid=2452)\x1b[0m INFO:{ts}:sglang_lora: adapter sync {{'action': 'load', 'name': "
            "'verl_lora_v{v}', 'version': {v}, 'stats': {{'version': {v}, 'tensors': 56, 'bytes': 2097152, "
            "'collect_ms': 5.67, 'request_ms': 1.09, 'snapshot_ms': 0.0, 'load_ms': 6.02, 'activate_ms': 0.9, "
            "'total_ms': 15.0}}}}")
SYNC_ACK = ("\x1b[36m(WorkerDict pid=2452)\x1b[0m INFO:{ts}:sglang_lora: adapter sync {{'action': 'ack', 'name': "
            "'verl_lora_v{v}', 'version': {v}, 'resident': {{'ran': [], 'attached': False, 'disabled': None}}}}")
SYNC_OLD = ("(WorkerDict pid=2580) INFO:2026-12-02 17:59:16,998:sglang_lora: adapter sync {{'version': {v}, 'name': "
            "'verl_lora_v{v}', 'buckets': 1, 'tensors': 56, 'bytes': 2097152, 'collect_ms': 7.17, 'load_ms': 19.09, "
            "'snapshot_ms': 11.78, 'total_ms': 39.52}}")
CANARY = ("\x1b[36m(SGLangLoRARollout pid=2910)\x1b[0m [{sec}] sglang_lora: canary {{'adapter': 'verl_lora_v{v}', "
          "'verdict': 'pass', 'max_abs_diff': 0.003978729248046875, 'tokens': 15.0}}")
STEP = ("\x1b[36m(TaskRunnerV1 pid=1766)\x1b[0m step:{s} - global_seqlen/min:3568.0 - actor/entropy:6.290353298187256 "
        "- training/rollout_probs_diff_mean:3.5927596e-06 - sglang_lora/base_policy_samples:{base} - "
        "sglang_lora/samples:{n} - sglang_lora/served_version_max:{sv} - sglang_lora/served_version_min:{sv} - "
        "sglang_lora/server_restarts:{r} - sglang_lora/staleness_max:{stale} - sglang_lora/staleness_mean:0.0 - "
        "sglang_lora/sync_version:{v} - sglang_lora/unload_failures:{uf} - timing_s/step:{t}")
RAYLET_DIED = ("(raylet) A worker died or was killed while executing a task by an unexpected system error. To "
               "troubleshoot the problem, check the logs for the dead worker. Worker PID: 3096 Worker exit type: "
               "SYSTEM_ERROR")
RAYLET_RETRY = ("(raylet) Task SGLangLoRARollout.{m} failed. There are {n} retries remaining, so the task will be "
                "retried. Error: The actor is temporarily unavailable: RpcError: RPC error: failed to connect")
RESTARTED = "(SGLangLoRARollout pid={pid}) WARNING:{ts}:sglang_lora: server actor restarted by Ray; relaunching SGLang"
RELAUNCH = ("(SGLangLoRARollout pid={pid}) WARNING:{ts}:sglang_lora: relaunching SGLang on the checkpoint's weights "
            "(load_format dummy -> auto): /work/main/.assets/tiny/model")
RECOVERED = ("(SGLangLoRARollout pid={pid}) [{sec}] sglang_lora: server recovered {{'adapter': 'verl_lora_v{v}', "
             "'version': {v}, 'recover_s': 19.87}}")
# SGLang 0.5.12's SubprocessWatchdog (sglang/srt/utils/watchdog.py), through SGLang's log format
WATCHDOG = ("(SGLangLoRARollout pid={pid}) [{sec}] Subprocess scheduler_0 (pid={child}) crashed with exit code -9. "
            "Triggering SIGQUIT for cleanup...")
# the plugin's own warning in _unload, with the hook's error text
UNLOAD_WARN = ("(SGLangLoRARollout pid={pid}) [{sec}] sglang_lora: unloading stale adapter verl_lora_v{v} failed: SGLang "
               "unload_lora_adapter failed (HTTP 200): injected unload failure of verl_lora_v{v} "
               "(VERL_SGLANG_LORA_INJECT, test-only)")
HOOK = ("(SGLangLoRARollout pid={pid}) [{sec}] sglang_lora: fault_injection: {kind} unload #{n} of verl_lora_v{v} "
        "(VERL_SGLANG_LORA_INJECT=unload_fail:v2,unload_stall:v8:30, test-only)")
TEARDOWN = "(TaskRunnerV1 pid=1794) RuntimeError: DataLoader worker (pid 3812) is killed by signal: Killed. "


class LogBuilder:
    """A fault run's log, line by line, with a clock (the formats above; markers as faults.sh writes them)."""

    def __init__(self) -> None:
        self.t = time.mktime(time.strptime("2026-12-03 07:00:00", "%Y-%m-%d %H:%M:%S"))
        self.lines: list[str] = []
        self.steps = 0

    def tick(self, seconds: float) -> None:
        self.t += seconds

    def ts(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.t)) + f",{int(self.t * 1000) % 1000:03d}"

    def sec(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.t))

    def add(self, template: str, **kw: object) -> None:
        self.lines.append(template.format(ts=self.ts(), sec=self.sec(), **kw))

    def mark(self, fault: str, how: str) -> None:
        self.lines.append("sglang_lora_faults: inject " + json.dumps(
            {"fault": fault, "epoch": self.t, "steps_done": self.steps, "how": how, "why": ""}))

    def step(self, version: int, ack: bool = False, base: int = 0, stale: float = 0.0, restarts: int = 0,
             unload_failures: int = 0, samples: int = 32, seconds: float = 5.0) -> None:
        """Step ``version``: its rollout (already logged by the caller's faults), the sync of ``version``, the line."""
        self.tick(seconds)
        self.add(SYNC_ACK if ack else SYNC_NEW, v=version)
        self.add(CANARY, v=version)
        self.steps += 1
        self.add(STEP, s=self.steps, base=float(base), n=float(samples), sv=float(version - 1), r=float(restarts),
                 stale=float(stale), v=float(version), uf=float(unload_failures), t=seconds)


def fault_run_log(kill_rollout_resends_generate: bool = True, base_in_rollout_fault: int = 0,
                  stop_after_scheduler_kill: bool = False) -> list[str]:
    """The run faults.sh drives with its defaults: 12 steps, faults at v2 (unload), v4, v6, v8 (stall at sync v9)."""
    b = LogBuilder()
    b.lines.append("[validate_config] All configuration checks passed successfully!")
    b.add("(SGLangLoRARollout pid=100) WARNING:{ts}:sglang_lora: launching SGLang with {{'enable_lora': True}}")
    b.tick(30)
    b.add(SYNC_NEW, v=0)
    b.step(1, seconds=40)
    b.step(2)
    # (d) the unload of v2 is refused at the sync of v3, retried at v4
    b.tick(4.9)
    b.add(HOOK, pid=100, kind="unload_fail", n=2, v=2)
    b.add(UNLOAD_WARN, pid=100, v=2)
    b.mark("unload_fail", "VERL_SGLANG_LORA_INJECT=unload_fail:v2")
    b.step(3, seconds=0.1, unload_failures=1)
    b.step(4)
    # (a) the scheduler killed after the sync of v4
    b.tick(1)
    b.mark("scheduler_kill", "SIGKILL to sglang::scheduler pid=120 (child of ray::SGLangLoRARollout pid=100)")
    b.tick(1)
    b.add(WATCHDOG, pid=100, child=120)
    b.lines.append(RAYLET_DIED)
    b.lines.append(RAYLET_RETRY.format(m="generate", n=5))
    if stop_after_scheduler_kill:
        b.lines.append("(TaskRunnerV1 pid=1794) ray.exceptions.ActorDiedError: The actor died unexpectedly before "
                       "finishing this task.")
        b.lines.append(TEARDOWN)
        return b.lines
    b.tick(2)
    b.add(RESTARTED, pid=200)
    b.add(RELAUNCH, pid=200)
    b.tick(19.9)
    b.add(RECOVERED, pid=200, v=4)
    b.step(5, restarts=1, seconds=3)
    b.step(6)
    # (b) the actor killed mid-rollout after the sync of v6
    b.tick(0.8)
    b.mark("actor_kill_rollout", "SIGKILL to ray::SGLangLoRARollout pid=200 after sync v6 (its title showed .generate)")
    b.lines.append(RAYLET_DIED)
    if kill_rollout_resends_generate:
        b.lines += [RAYLET_RETRY.format(m="generate", n=4)] * 3
    else:
        b.lines.append(RAYLET_RETRY.format(m="sleep", n=4))
    b.tick(2)
    b.add(RESTARTED, pid=300)
    b.tick(20)
    b.add(RECOVERED, pid=300, v=6)
    b.step(7, restarts=1, base=base_in_rollout_fault, seconds=3)
    b.step(8)
    # (c) the sync of v9 held in the unload of v8, the actor killed; Ray re-sends the sync, acknowledged from the snapshot
    b.tick(4.9)
    b.add(HOOK, pid=300, kind="unload_stall", n=2, v=8)
    b.tick(0.3)
    b.mark("actor_kill_sync", "SIGKILL to ray::SGLangLoRARollout pid=300 while sync_adapter(v9) is held")
    b.lines.append(RAYLET_RETRY.format(m="sync_adapter", n=3))
    b.tick(2)
    b.add(RESTARTED, pid=400)
    b.tick(20)
    b.add(RECOVERED, pid=400, v=9)
    b.step(9, ack=True, restarts=1, seconds=0.2)
    for v in (10, 11, 12):
        b.step(v)
    b.lines.append(TEARDOWN)
    return b.lines


def by_fault(results: list) -> dict:
    return {r.fault: r for r in results}


def test_report_of_a_run_where_every_fault_recovers() -> None:
    results = by_fault(fault_report.analyse(fault_run_log(), 12))
    assert set(results) == set(fault_report.FAULTS)
    assert {f: r.verdict for f, r in results.items()} == dict.fromkeys(fault_report.FAULTS, "PASS")
    unload, sched, rollout, sync = (results[f] for f in fault_report.FAULTS)
    assert unload.hit_step == 3 and unload.next_sync == "load v4"
    assert unload.recover_s == pytest.approx(5.1, abs=1.0)  # the hook line has SGLang's 1 s timestamps
    assert "1 refusal warning(s) for verl_lora_v2" in unload.evidence and "unload_failures counted 1" in unload.evidence
    assert sched.hit_step == 5 and sched.resent == ["generate"] and sched.server_recover_s == 19.87
    assert sched.recover_s == pytest.approx(22.9, abs=1.0)  # marker -> "server recovered" (SGLang's 1 s timestamps)
    assert any("watchdog: scheduler_0 pid=120 exit -9" in e for e in sched.evidence)
    assert rollout.hit_step == 7 and rollout.resent == ["generate"] and rollout.next_sync == "load v7"
    assert sync.hit_step == 9 and sync.next_sync == "ack v9" and sync.resent == ["sync_adapter"]
    assert sync.steps_after == 4 and sync.last_step == 12
    assert all(r.base_samples == 0 and r.stale_samples == "0" for r in results.values())
    assert unload.samples == 64 and sched.samples == 64  # steps 3-4 and 5-6, 32 tagged samples each


def test_report_table_and_verdict_lines() -> None:
    raw = fault_run_log()
    results = fault_report.analyse(raw, 12)
    table = fault_report.table(results)
    assert table.count("\n") == 1 + 4 and table.startswith("| fault | how injected | hit step |")
    assert "| SGLang's scheduler dies, the server actor lives (`scheduler_kill`) |" in table
    lines = fault_report.verdict_lines(results, raw, 12)
    assert lines[-1] == "faults verdict=PASS (steps=12/12, pass=4/4)"
    assert lines[0].startswith("faults verdict fault=unload_fail verdict=PASS hit_step=3")


def test_report_fails_on_base_policy_samples_and_misses() -> None:
    results = by_fault(fault_report.analyse(fault_run_log(base_in_rollout_fault=3), 12))
    assert results["actor_kill_rollout"].verdict == "FAIL"
    assert "3 base-policy samples" in results["actor_kill_rollout"].reason
    results = by_fault(fault_report.analyse(fault_run_log(kill_rollout_resends_generate=False), 12))
    assert results["actor_kill_rollout"].verdict == "MISSED"  # recovered, but the kill did not land mid-rollout


def test_report_of_a_run_that_stopped_loudly(tmp_path) -> None:
    raw = fault_run_log(stop_after_scheduler_kill=True)
    results = by_fault(fault_report.analyse(raw, 12))
    assert results["unload_fail"].verdict == "PASS"
    assert results["scheduler_kill"].verdict == "REFUSED"
    assert "ActorDiedError" in results["scheduler_kill"].reason
    lines = fault_report.verdict_lines(list(results.values()), raw, 12)
    assert "faults verdict fault=actor_kill_sync verdict=NOT_RUN" in "\n".join(lines)
    assert lines[-1] == "faults verdict=FAIL (steps=4/12, pass=1/4)"
    log = tmp_path / "run.log"
    log.write_text("\n".join(raw))
    proc = subprocess.run([sys.executable, str(DEVICE / "fault_report.py"), str(log), "12"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and "| fault |" in proc.stdout and "faults verdict=FAIL" in proc.stdout


def test_a_fault_run_becomes_a_record_and_a_generated_table(tmp_path) -> None:
    records = conftest.load_script(ROOT / "scripts" / "records.py", "records_for_faults")
    passed, stopped = tmp_path / "passed.log", tmp_path / "stopped.log"
    passed.write_text("\n".join(fault_run_log()))
    stopped.write_text("\n".join(fault_run_log(stop_after_scheduler_kill=True)))
    for log in (passed, stopped):
        assert records.main(["faults", str(log), "--steps", "12", "--command", "bash scripts/device/faults.sh",
                             "--out", str(tmp_path / "results")]) == 0
    ran = json.loads((tmp_path / "results" / "faults.json").read_text())
    assert [r["figures"]["verdict"] for r in ran] == ["PASS (steps=12/12, pass=4/4)", "FAIL (steps=4/12, pass=1/4)"]
    assert ran[1]["figures"]["not_run"] == ["actor_kill_rollout", "actor_kill_sync"]
    assert [f["verdict"] for f in ran[1]["figures"]["faults"]] == ["PASS", "REFUSED"]
    page = records.render_validation({"faults": ran})
    assert page.count("## Fault run -- ") == 2 and "Verdict: FAIL (steps=4/12, pass=1/4); not injected: " \
        "actor_kill_rollout, actor_kill_sync." in page
    row = next(x for x in page.splitlines() if "(`actor_kill_sync`)" in x)
    assert row.endswith("| 21.1 (19.87) | ack v9 | 4 | 128 / 0 / 0 | PASS |")


def test_skipped_fault_is_not_run() -> None:
    raw = fault_run_log()
    at = next(i for i, x in enumerate(raw) if '"fault": "scheduler_kill"' in x)
    raw[at] = raw[at].replace("inject", "skipped").replace('"why": ""', '"why": "no sglang::scheduler process"')
    results = by_fault(fault_report.analyse(raw, 12))
    assert results["scheduler_kill"].verdict == "NOT_RUN" and results["scheduler_kill"].reason.startswith("no sglang")


# ---- the memory sampler -----------------------------------------------------------------------------------------------
def test_rows_by_process_title() -> None:
    titles = {1: "ray::WorkerDict.actor_rollout_update_actor", 2: "ray::WorkerDict", 3: "ray::SGLangLoRARollout.generate",
              4: "sglang::scheduler", 5: "sglang::detokenizer", 6: "python3 -m verl.trainer.main_ppo", 7: "bash"}
    rss = {1: 1000.0, 2: 500.0, 3: 800.0, 4: 3000.0, 5: 200.0}
    rows = mem_sampler.sample_rows(12.5, 3, titles, rss, {1: 4000.0, 4: 60000.0}, 70000.0)
    got = {r["series"]: (r["procs"], r["rss_mib"], r["gpu_mib"]) for r in rows}
    assert got == {"trainer": (2, 1500.0, 4000.0), "server_actor": (1, 800.0, 0.0), "sglang_scheduler": (1, 3000.0, 60000.0),
                   "sglang_detokenizer": (1, 200.0, 0.0), "gpu_total": ("", "", 70000.0)}
    # nvidia-smi listing none of our pids (a sandbox): per-class GPU left empty, the whole GPU kept
    rows = mem_sampler.sample_rows(1.0, 1, titles, rss, {99999: 5.0}, 70000.0)
    assert {r["gpu_mib"] for r in rows if r["series"] != "gpu_total"} == {""}


def test_step_counter_reads_the_log_incrementally(tmp_path) -> None:
    log = tmp_path / "run.log"
    counter = mem_sampler.StepCounter(log)
    assert counter.current() == 1  # no log yet
    log.write_text("(TaskRunnerV1 pid=1) step:1 - a:1\n(TaskRunnerV1 pid=1) ste")
    assert counter.current() == 2
    with log.open("a") as f:
        f.write("p:2 - a:1\nother\n")
    assert counter.current() == 3


def test_proc_readers_see_this_process() -> None:
    titles = mem_sampler.process_titles()
    assert os.getpid() in titles and "python" in titles[os.getpid()].lower() or "pytest" in titles[os.getpid()]
    assert mem_sampler.rss_mib(os.getpid()) > 1.0


def test_sampler_writes_rows_until_the_run_ends(tmp_path) -> None:
    log, out = tmp_path / "run.log", tmp_path / "mem.csv"
    log.write_text("step:1 - a:1\n")
    run = subprocess.Popen(["sleep", "1.2"])
    rc = subprocess.run([sys.executable, str(DEVICE / "mem_sampler.py"), "sample", "--log", str(log), "--csv", str(out),
                         "--interval", "0.3", "--until-pid", str(run.pid)], timeout=60).returncode
    run.wait()
    rows = list(csv.DictReader(out.open()))
    assert rc == 0 and rows and {r["series"] for r in rows} >= {"gpu_total"} and {r["step"] for r in rows} == {"2"}


def soak_csv(path: Path, steps: int, leak_mib_per_step: float = 0.0) -> None:
    """Three samples a step: SGLang's GPU memory drops while the trainer runs (the peak is what a step reports)."""
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=mem_sampler.FIELDS)
        w.writeheader()
        t = 0.0
        for s in range(1, steps + 1):
            for phase, gpu in enumerate((70000.0, 50000.0, 52000.0)):
                t += 2
                jitter = (s * 7 + phase * 3) % 5  # a few MiB of noise
                w.writerow({"t_s": t, "step": s, "series": "trainer", "procs": 1, "rss_mib": 3000 + jitter, "gpu_mib": ""})
                w.writerow({"t_s": t, "step": s, "series": "sglang_scheduler", "procs": 1,
                            "rss_mib": 2500 + jitter + leak_mib_per_step * s, "gpu_mib": ""})
                w.writerow({"t_s": t, "step": s, "series": "gpu_total", "procs": "", "rss_mib": "", "gpu_mib": gpu + jitter})


def test_soak_report_flat_and_growing(tmp_path, capsys) -> None:
    flat, leak = tmp_path / "flat.csv", tmp_path / "leak.csv"
    soak_csv(flat, 50)
    soak_csv(leak, 50, leak_mib_per_step=2.0)  # e.g. a 2 MiB adapter version never freed
    assert mem_sampler.report(flat, 5, 10, None) == 0
    out = capsys.readouterr().out
    assert "soak verdict=PASS" in out and "| gpu_total gpu | 45 | 70000 |" in out and "rule: GROWS when growth" in out
    assert "nvidia-smi listed none of the run's pids" in out
    assert mem_sampler.report(leak, 5, 10, None) == 1
    out = capsys.readouterr().out
    assert "soak verdict=FAIL (growing: sglang_scheduler rss;" in out
    row = next(line for line in out.splitlines() if line.startswith("| sglang_scheduler rss"))
    assert "+70.0" in row and "+2.00" in row and "GROWS" in row  # window means 35 steps apart, 2 MiB a step
    short = tmp_path / "short.csv"
    soak_csv(short, 12)
    assert mem_sampler.report(short, 5, 10, None) == 1
    assert "soak verdict=INCOMPLETE" in capsys.readouterr().out


def test_soak_report_adds_verls_figures_and_plots_or_says_why_not(tmp_path, capsys) -> None:
    data, log, png = tmp_path / "mem.csv", tmp_path / "run.log", tmp_path / "mem.png"
    soak_csv(data, 30)
    log.write_text("\n".join(f"(TaskRunnerV1 pid=1) step:{s} - actor/perf/max_memory_reserved_gb:0.12890625 - "
                             f"actor/perf/cpu_memory_used_gb:21.385475158691406 - timing_s/step:4.0" for s in range(1, 31)))
    assert mem_sampler.report(data, 5, 10, png, log) == 0
    out = capsys.readouterr().out
    assert "| trainer torch_reserved(verl) gpu | 25 | 132 |" in out and "| host used(verl) rss | 25 |" in out
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "no plot: matplotlib is not installed" in out and not png.exists()
    else:
        assert png.stat().st_size > 1000


# ---- faults.sh end to end against a stand-in run ------------------------------------------------------------------------
_FAKE_RUN = r'''
import json, os, subprocess, sys, time
T = json.loads(sys.argv[1])
procs, scheds = [], []

def stamp():
    t = time.time()
    return {"ts": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{int(t * 1000) % 1000:03d}",
            "sec": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))}

def say(name, **kw):
    print(T[name].format(**stamp(), **kw), flush=True)

def actor():
    """A process titled like Ray's server actor (mid-generate), with a child titled like SGLang's scheduler."""
    code = ("import setproctitle, subprocess, sys, time; setproctitle.setproctitle('ray::SGLangLoRARollout.generate'); "
            "subprocess.Popen([sys.executable, '-c', \"import setproctitle, time; "
            "setproctitle.setproctitle('sglang::scheduler'); time.sleep(120)\"]); time.sleep(120)")
    p = subprocess.Popen([sys.executable, "-c", code])
    procs.append(p)
    for _ in range(100):  # until the child exists (kept by id: a killed actor's child outlives it)
        if children(p):
            break
        time.sleep(0.05)
    scheds.extend(children(p))
    time.sleep(0.3)  # the child's title is set once its interpreter has started
    return p

def wait_dead(p, what):
    for _ in range(200):
        if p.poll() is not None:
            return
        time.sleep(0.05)
    raise SystemExit(f"stand-in run: {what} was not killed")

def children(p):
    out = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
    return [int(x) for x in out]

def step(v, ack=False, restarts=0, uf=0):
    time.sleep(0.3)
    say("SYNC_ACK" if ack else "SYNC_NEW", v=v)
    say("STEP", s=v, base=0.0, n=32.0, sv=float(v - 1), r=float(restarts), stale=0.0, v=float(v), uf=float(uf), t=0.3)

def recover(pid, v):
    say("RESTARTED", pid=pid)
    say("RECOVERED", pid=pid, v=v)

a = actor()
say("SYNC_NEW", v=0)
for v in range(1, 13):
    if v == 3:
        say("HOOK", pid=a.pid, kind="unload_fail", n=2, v=2)
        say("UNLOAD_WARN", pid=a.pid, v=2)
    if v == 9:
        say("HOOK", pid=a.pid, kind="unload_stall", n=2, v=8)
        wait_dead(a, "the actor held in the sync")
        print(T["RAYLET_RETRY"].format(m="sync_adapter", n=3), flush=True)
        a = actor()
        recover(a.pid, 9)
    step(v, ack=(v == 9), uf=int(v == 3))
    if v == 4:
        sched = children(a)
        for _ in range(200):
            if not os.path.exists(f"/proc/{sched[0]}") or open(f"/proc/{sched[0]}/stat").read().split(") ")[1][0] == "Z":
                break
            time.sleep(0.05)
        else:
            raise SystemExit("stand-in run: the scheduler was not killed")
        say("WATCHDOG", pid=a.pid, child=sched[0])
        a.kill(); a.wait()  # what SGLang's watchdog SIGQUIT does to the actor
        print(T["RAYLET_RETRY"].format(m="generate", n=5), flush=True)
        a = actor()
        recover(a.pid, 4)
    if v == 6:
        wait_dead(a, "the actor mid-rollout")
        print(T["RAYLET_RETRY"].format(m="generate", n=4), flush=True)
        a = actor()
        recover(a.pid, 6)
for pid in scheds:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass
for p in procs:
    p.kill()
'''


def test_faults_sh_injects_each_fault_at_its_version_and_reports(tmp_path) -> None:
    """faults.sh as written, against a stand-in run that prints the real log lines and has processes titled like the
    server actor and SGLang's scheduler: each fault is injected once at its version, by the process it targets, and
    the report at the end reads the markers it wrote."""
    pytest.importorskip("setproctitle")
    templates = {"SYNC_NEW": SYNC_NEW, "SYNC_ACK": SYNC_ACK, "STEP": STEP, "RESTARTED": RESTARTED,
                 "RECOVERED": RECOVERED, "WATCHDOG": WATCHDOG, "HOOK": HOOK, "UNLOAD_WARN": UNLOAD_WARN,
                 "RAYLET_RETRY": RAYLET_RETRY}
    fake = tmp_path / "fake_run.py"
    fake.write_text(_FAKE_RUN)
    example = tmp_path / "example.sh"
    example.write_text(f'exec {sys.executable} {fake} {json.dumps(json.dumps(templates))}\n')
    env = {**os.environ, "OUT": str(tmp_path), "EXAMPLE": str(example), "E2E_TIMEOUT": "140",
           "FAULT_GENERATE_WAIT_MS": "300"}
    proc = subprocess.run(["bash", "scripts/device/faults.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=200)
    assert "faults verdict=PASS (steps=12/12, pass=4/4)" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    log = (tmp_path / "e2e_faults.log").read_text()
    marks = [json.loads(m) for m in re.findall(r"sglang_lora_faults: inject (\{.*\})", log)]
    assert [(m["fault"], m["steps_done"]) for m in marks] == [
        ("unload_fail", 2), ("scheduler_kill", 4), ("actor_kill_rollout", 6), ("actor_kill_sync", 8)]
    assert "its title showed .generate" in marks[2]["how"]


# ---- served_scale: SGLang serves the adapter mis-scaled, the trainer keeps its scaling (the proof run) ----------
def test_served_scale_rescales_what_sglang_gets_from_its_version_on(monkeypatch) -> None:
    monkeypatch.setenv(fi.ENV, "served_scale:v3:0.25")
    config = {"r": 16, "lora_alpha": 32.0}
    assert fi.served_config(config, 2) is config  # before version 3: untouched
    assert fi.served_config(config, 3) == {"r": 16, "lora_alpha": 8.0} and config["lora_alpha"] == 32.0
    assert fi.served_config(config, 7)["lora_alpha"] == 8.0  # every later version too
    monkeypatch.delenv(fi.ENV)
    assert fi.served_config(config, 7) is config


def test_served_scale_entries_are_checked_and_never_fire_on_unloads(monkeypatch) -> None:
    for bad in ("served_scale:3:0.5", "served_scale:v3", "served_scale:v3:0", "served_scale:v3:x"):
        with pytest.raises(ValueError, match=fi.ENV):
            fi.parse_spec(bad)
    injector = fi.UnloadInjector(fi.parse_spec("served_scale:v1:0.5"))
    asyncio.run(injector.before_unload("verl_lora_v1"))  # no exception, no stall: not an unload fault


def test_a_slot_served_at_another_scaling_fails_the_clients_check() -> None:
    """What the resident path does with a served_scale fault: the loader reports the scaling SGLang applies to the
    slot, and the client refuses it against the trainer's (then loads the version the ordinary way, loudly)."""
    from verl_sglang_lora.runtime.resident import protocol as P
    from verl_sglang_lora.runtime.resident.requests import LoaderCall, check_results

    status, message = P.new_status(), P.new_message(64)
    P.write_status(status, {P.STATE: P.OK, P.SCALING_BITS: P.float_to_bits(0.5), P.LORA_R: 16, P.N_COPIES: 4,
                            P.VERIFIED_BY: P.BY_MIRROR})
    call = LoaderCall("write", "verl_lora_slot1", [], status, message)
    assert check_results([call], 0.5) is None
    failed = check_results([call], 2.0)
    assert failed and "scaling 0.5" in failed and "trainer's scaling is 2" in failed
