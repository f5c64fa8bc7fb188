"""scripts/device/bg.sh: a job outlives the call that starts it; each ``wait`` copies what the job has written under
its own ``$OUT`` into the waiting call's ``$OUT``, gives up at its bound with exit 3 while the job runs, and reports
the job's exit status once it has ended."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device" / "bg.sh"


def bg(tmp_path: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "BG_DIR": str(tmp_path / "bg"), "OUT": str(out)}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def test_job_spans_calls_and_hands_its_results_over(tmp_path: Path) -> None:
    first, second = tmp_path / "call1", tmp_path / "call2"
    job = "mkdir -p $OUT/results && echo '[1]' > $OUT/results/r.json && sleep 3 && echo finished && exit 4"
    assert bg(tmp_path, first, "start", "j", "bash", "-c", job).returncode == 0
    assert bg(tmp_path, first, "start", "j", "true").returncode == 2  # one job per name while it runs
    early = bg(tmp_path, first, "wait", "j", "1")  # the job writes at once, then runs 3 s more
    assert early.returncode == 3 and "still running" in early.stdout
    # what the job wrote so far comes back with every wait (a machine may go back before the job ends)
    assert (first / "results" / "r.json").read_text().strip() == "[1]" and (first / "j.log").exists()
    done = bg(tmp_path, second, "wait", "j", "30")
    assert done.returncode == 0 and "ended rc=4" in done.stdout and "finished" in done.stdout
    assert (second / "results" / "r.json").read_text().strip() == "[1]"
    assert "finished" in (second / "j.log").read_text()


def test_unknown_job_and_usage(tmp_path: Path) -> None:
    assert bg(tmp_path, tmp_path, "wait", "none").returncode == 2
    assert bg(tmp_path, tmp_path, "start", "x").returncode == 2
    assert bg(tmp_path, tmp_path, "frob", "x").returncode == 2
