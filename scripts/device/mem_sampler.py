"""Memory of a verl + SGLang run over time, for the soak (scripts/device/soak.sh, item 4) and the scale runs
(scripts/device/scale.sh: each run's GPU peak per role, ``gpu_peaks``, read by ``scripts/records.py scale``).

    python3 scripts/device/mem_sampler.py sample --log RUN_LOG --csv OUT.csv [--interval 2] [--until-pid PID]
    python3 scripts/device/mem_sampler.py report --csv OUT.csv [--warmup 5] [--window 10] [--png PNG] [--log RUN_LOG]

``sample`` polls every ``interval`` seconds until ``--until-pid`` ends: the host RSS of each process class, found by
the title Ray and SGLang give their processes (``ray::WorkerDict`` = the FSDP trainer, ``ray::SGLangLoRARollout`` =
the server actor with SGLang's tokenizer manager, ``sglang::scheduler`` = SGLang's model and KV cache, ...), the GPU
memory of each class from ``nvidia-smi --query-compute-apps`` where its pids match ours (a sandbox may report other
pids), and the whole GPU's used memory. Each row carries the verl step in progress (step lines counted in the log).

``report`` turns the rows into one value per step and series (the peak of its samples in that step), then per
series: min / median / max after the warm-up, and growth = mean of the last ``window`` steps minus the mean of the
first ``window`` steps after the warm-up. The rule (printed with the table): a series GROWS beyond noise when its
growth exceeds max(3 x the standard deviation of its per-step values in the first window, 1 % of that window's
mean, 16 MiB); otherwise it is flat. The verdict is PASS when every series is flat. With ``--log`` verl's own
per-step figures join the table (the trainer's torch allocator peak, the host's used memory).
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# title prefix -> series name (first match wins); the titles Ray (ray::<Actor>[.<method>]) and SGLang
# (setproctitle "sglang::scheduler", "sglang::detokenizer") give their processes
SERIES = (
    ("ray::WorkerDict", "trainer"),
    ("ray::SGLangLoRARollout", "server_actor"),
    ("ray::SGLangHttpServer", "server_actor"),  # verl's own server actor (rollout.name=sglang)
    ("sglang::scheduler", "sglang_scheduler"),
    ("sglang::detokenizer", "sglang_detokenizer"),
    ("ray::TaskRunner", "taskrunner"),
    ("ray::AgentLoopWorker", "agent_loop"),
)
FIELDS = ("t_s", "step", "series", "procs", "rss_mib", "gpu_mib")
GPU_TOTAL = "gpu_total"
# the run's two GPU users: verl's trainer (its Ray workers) and SGLang (its scheduler processes, which hold the model
# and the KV cache, with the detokenizer and the server actor -- the plugin's or verl's own -- that runs SGLang's HTTP
# server and tokenizer manager)
ROLES = {"trainer": ("trainer",), "sglang": ("sglang_scheduler", "sglang_detokenizer", "server_actor")}
STEP_RE = re.compile(rb"(?:^|[^/\w])step:(\d+) - ")  # not training/global_step:N
NOISE_SIGMAS, NOISE_REL, NOISE_FLOOR_MIB = 3.0, 0.01, 16.0
VERL_KEYS = (("actor/perf/max_memory_reserved_gb", "trainer torch_reserved(verl) gpu"),
             ("actor/perf/cpu_memory_used_gb", "host used(verl) rss"))


# ---- sampling ---------------------------------------------------------------------------------------------------
def series_of_name(name: str) -> bool:
    """Whether a report series is one of the per-process classes (not the whole GPU or a verl figure)."""
    return name.split(" ")[0] in {n for _, n in SERIES}


def series_of(title: str) -> str | None:
    for prefix, name in SERIES:
        if title.startswith(prefix):
            return name
    return None


def process_titles(proc: Path = Path("/proc")) -> dict[int, str]:
    """pid -> command line as the process shows it (Ray and SGLang rewrite theirs to a title)."""
    out = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                raw = (entry / "cmdline").read_bytes()
                out[int(entry.name)] = raw.replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue  # ended between listing and reading
    return out


def rss_mib(pid: int, proc: Path = Path("/proc")) -> float | None:
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def nvidia_smi(query: list[str]) -> list[list[str]]:
    """Rows of one nvidia-smi query (csv, no header, no units); [] where nvidia-smi fails."""
    try:
        out = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [[c.strip() for c in row.split(",")] for row in out.stdout.splitlines() if row.strip()]


def gpu_by_pid() -> dict[int, float]:
    return {int(r[0]): float(r[1]) for r in nvidia_smi(["--query-compute-apps=pid,used_memory"])
            if len(r) == 2 and r[0].isdigit() and r[1].replace(".", "", 1).isdigit()}


def gpu_total_mib() -> float | None:
    rows = nvidia_smi(["--query-gpu=memory.used"])
    try:
        return sum(float(r[0]) for r in rows) if rows else None
    except ValueError:
        return None


class StepCounter:
    """The verl step in progress: step lines in the run's log so far + 1, read incrementally."""

    def __init__(self, log: Path) -> None:
        self.log, self.offset, self.done, self._tail = log, 0, 0, b""

    def current(self) -> int:
        try:
            with self.log.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return self.done + 1
        self.offset += len(chunk)
        data = self._tail + chunk
        complete, _, self._tail = data.rpartition(b"\n")
        self.done += len(STEP_RE.findall(complete))
        return self.done + 1


def sample_rows(t_s: float, step: int, titles: dict[int, str], rss: dict[int, float | None],
                gpu: dict[int, float], total: float | None) -> list[dict[str, object]]:
    """One row per series present now (summed over its processes), plus the whole GPU."""
    acc: dict[str, list[float]] = {}
    for pid, title in titles.items():
        name = series_of(title)
        if name is None or rss.get(pid) is None:
            continue
        totals = acc.setdefault(name, [0, 0.0, 0.0])  # processes, RSS, GPU
        totals[0] += 1
        totals[1] += rss[pid]
        totals[2] += gpu.get(pid, 0.0)
    matched = any(pid in gpu for pid, title in titles.items() if series_of(title))
    rows: list[dict[str, object]] = [
        {"t_s": round(t_s, 2), "step": step, "series": name, "procs": int(v[0]), "rss_mib": round(v[1], 1),
         "gpu_mib": round(v[2], 1) if matched else ""} for name, v in sorted(acc.items())
    ]
    rows.append({"t_s": round(t_s, 2), "step": step, "series": GPU_TOTAL, "procs": "", "rss_mib": "",
                 "gpu_mib": "" if total is None else total})
    return rows


def pid_alive(pid: int | None, proc: Path = Path("/proc")) -> bool:
    """Whether the watched run still runs (an exited child its parent has not reaped yet counts as ended)."""
    if pid is None:
        return True
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # the state follows the parenthesised command name


def sample(log: Path, out: Path, interval: float, until_pid: int | None) -> int:
    steps, t0 = StepCounter(log), time.monotonic()
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        while pid_alive(until_pid):
            titles = process_titles()
            rss = {pid: rss_mib(pid) for pid, title in titles.items() if series_of(title)}
            for row in sample_rows(time.monotonic() - t0, steps.current(), titles, rss, gpu_by_pid(), gpu_total_mib()):
                writer.writerow(row)
            f.flush()  # rows survive the call's timeout
            time.sleep(interval)
    return 0


# ---- report -----------------------------------------------------------------------------------------------------
def read_samples(csv_path: Path) -> list[dict[str, str]]:
    with csv_path.open() as f:
        return list(csv.DictReader(f))


def _by_sample(rows: list[dict[str, str]], column: str) -> dict[str, tuple[int, dict[str, float]]]:
    """sample time -> (its step, series -> value of ``column``), empty cells left out."""
    out: dict[str, tuple[int, dict[str, float]]] = {}
    for row in rows:
        if row.get(column) not in (None, ""):
            out.setdefault(row["t_s"], (int(row["step"]), {}))[1][row["series"]] = float(row[column])
    return out


def role_by_step(rows: list[dict[str, str]], column: str,
                 roles: dict[str, tuple[str, ...]] = ROLES) -> dict[str, dict[int, float]]:
    """role -> step -> the largest sum of the role's series within one sample of that step (``column``: gpu_mib or
    rss_mib): a role's memory is its processes' together at one moment, and a step's figure its peak, as
    ``per_step`` takes for one series."""
    out: dict[str, dict[int, float]] = {role: {} for role in roles}
    for step, values in _by_sample(rows, column).values():
        for role, names in roles.items():
            if any(n in values for n in names):
                total = sum(values[n] for n in names if n in values)
                out[role][step] = max(out[role].get(step, total), total)
    return out


def gpu_peaks(rows: list[dict[str, str]]) -> dict[str, object]:
    """The largest GPU memory (MiB, nvidia-smi's per-process figure) over a run's samples: per role (its series
    summed within each sample), per series, and the whole GPU's. A role or series is None where no sample has a GPU
    figure for it (nvidia-smi listed none of the run's pids, or the run never started it)."""
    by_sample = {t: values for t, (_, values) in _by_sample(rows, "gpu_mib").items()}

    def peak(names: tuple[str, ...]) -> float | None:
        sums = [sum(s[n] for n in names if n in s) for s in by_sample.values() if any(n in s for n in names)]
        return max(sums) if sums else None

    series = sorted({name for s in by_sample.values() for name in s if name != GPU_TOTAL})
    return {"roles": {role: peak(names) for role, names in ROLES.items()},
            "series": {name: peak((name,)) for name in series}, "gpu_total": peak((GPU_TOTAL,)),
            "samples": len({row["t_s"] for row in rows})}


@dataclass
class SeriesStats:
    name: str  # e.g. "trainer rss", "sglang_scheduler gpu", "gpu_total gpu"
    steps: int
    lo: float
    median: float
    hi: float
    first_mean: float
    last_mean: float
    growth: float
    threshold: float
    slope: float  # MiB per step, least squares over the steps after warm-up

    @property
    def grows(self) -> bool:
        return self.growth > self.threshold


def per_step(rows: list[dict[str, str]]) -> dict[str, dict[int, float]]:
    """"<series> rss" / "<series> gpu" -> step -> the peak of that step's samples (empty cells skipped).

    The peak, not the mean: a step's phases hold different memory (SGLang releases its KV cache while the trainer
    runs), so a mean would move with where the ~2 s samples happened to fall; a leak raises the peak."""
    acc: dict[str, dict[int, list[float]]] = {}
    for row in rows:
        for metric, col in (("rss", "rss_mib"), ("gpu", "gpu_mib")):
            if row.get(col) not in (None, ""):
                acc.setdefault(f"{row['series']} {metric}", {}).setdefault(int(row["step"]), []).append(float(row[col]))
    return {name: {s: max(v) for s, v in by_step.items()} for name, by_step in acc.items()}


def verl_series(log: Path) -> dict[str, dict[int, float]]:
    """verl's own per-step memory figures (GiB -> MiB): the trainer's torch allocator peak, which tells the trainer's
    GPU memory apart from SGLang's where nvidia-smi cannot map pids, and the host's used memory."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from step_table import parse  # a sibling script

    steps = parse(log.read_text(errors="replace").splitlines())
    out: dict[str, dict[int, float]] = {}
    for key, name in VERL_KEYS:
        values = {s: float(m[key]) * 1024.0 for s, m in steps.items() if key in m}
        if values:
            out[name] = values
    return out


def slope(points: list[tuple[int, float]]) -> float:
    if len(points) < 2:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def series_stats(name: str, by_step: dict[int, float], warmup: int, window: int) -> SeriesStats | None:
    """Figures over the steps after the warm-up; None when fewer than one window remains."""
    steps = sorted(s for s in by_step if s > warmup)
    if len(steps) < window:
        return None
    values = [by_step[s] for s in steps]
    first, last = values[:window], values[-window:]
    first_mean, last_mean = statistics.fmean(first), statistics.fmean(last)
    noise = statistics.stdev(first) if len(first) > 1 else 0.0
    threshold = max(NOISE_SIGMAS * noise, NOISE_REL * abs(first_mean), NOISE_FLOOR_MIB)
    return SeriesStats(name, len(steps), min(values), statistics.median(values), max(values), first_mean, last_mean,
                       last_mean - first_mean, threshold, slope(list(zip(steps, values))))


def report_table(stats: list[SeriesStats]) -> str:
    rows = ["| series (MiB) | steps | min | median | max | first-window mean | last-window mean | growth | "
            "threshold | slope /step | verdict |", "|---" * 11 + "|"]
    for s in stats:
        rows.append(f"| {s.name} | {s.steps} | {s.lo:.0f} | {s.median:.0f} | {s.hi:.0f} | {s.first_mean:.1f} | "
                    f"{s.last_mean:.1f} | {s.growth:+.1f} | {s.threshold:.1f} | {s.slope:+.2f} | "
                    f"{'GROWS' if s.grows else 'flat'} |")
    return "\n".join(rows)


def plot(series: dict[str, dict[int, float]], png: Path) -> str:
    """One panel per metric kind (host RSS, GPU memory) over the steps; skipped where matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed"
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for ax, metric, label in ((axes[0], "rss", "host RSS (MiB)"), (axes[1], "gpu", "GPU memory (MiB)")):
        for name, by_step in sorted(series.items()):
            if name.endswith(" " + metric):
                steps = sorted(by_step)
                ax.plot(steps, [by_step[s] for s in steps], marker=".", label=name.rsplit(" ", 1)[0])
        ax.set_xlabel("verl step")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return f"plot: {png}"


def report(csv_path: Path, warmup: int, window: int, png: Path | None, log: Path | None = None) -> int:
    rows = read_samples(csv_path)
    series = per_step(rows)
    if log is not None:
        series.update(verl_series(log))
    last_step = max((int(r["step"]) for r in rows), default=0)
    stats = [s for name in sorted(series) if (s := series_stats(name, series[name], warmup, window)) is not None]
    print(f"soak memory: {len(rows)} samples, steps 1..{last_step}; warm-up {warmup} steps, windows of {window} steps")
    if not stats:
        print(f"soak verdict=INCOMPLETE (fewer than {window} steps after the warm-up)")
        return 1
    print(report_table(stats))
    print(f"rule: GROWS when growth > max({NOISE_SIGMAS:g} x stdev of the first window, {NOISE_REL:.0%} of its mean, "
          f"{NOISE_FLOOR_MIB:g} MiB)")
    if not any(name.endswith(" gpu") and series_of_name(name) for name in series):
        print("note: nvidia-smi listed none of the run's pids (a sandboxed PID namespace): GPU memory is the whole "
              "GPU's only")
    if png is not None:
        print(plot(series, png))
    growing = [s.name for s in stats if s.grows]
    print(f"soak verdict={'FAIL' if growing else 'PASS'} (growing: {', '.join(growing) or 'none'}; "
          f"{len(stats)} series, steps after warm-up {stats[0].steps})")
    return 1 if growing else 0


def sample_parser(doc: str) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """The ``sample`` command line this sampler and lora_sampler.py share (a run's log, the CSV, the interval, the
    run's pid), and the subcommands to add others to."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--log", type=Path, required=True)
    s.add_argument("--csv", type=Path, required=True)
    s.add_argument("--interval", type=float, default=2.0)
    s.add_argument("--until-pid", type=int, default=None)
    return parser, sub


def main(argv: list[str]) -> int:
    parser, sub = sample_parser(__doc__)
    r = sub.add_parser("report")
    r.add_argument("--csv", type=Path, required=True)
    r.add_argument("--warmup", type=int, default=5)
    r.add_argument("--window", type=int, default=10)
    r.add_argument("--png", type=Path, default=None)
    r.add_argument("--log", type=Path, default=None, help="the run's log: adds verl's per-step memory figures")
    args = parser.parse_args(argv)
    if args.cmd == "sample":
        return sample(args.log, args.csv, args.interval, args.until_pid)
    return report(args.csv, args.warmup, args.window, args.png, args.log)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
