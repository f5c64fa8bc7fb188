"""The LoRA adapters SGLang holds over a verl run, read from outside the trainer (scripts/device/stock_vs_plugin.sh:
the same figure for verl's own ``rollout.name=sglang`` and for ``rollout.name=sglang_lora``, read the same way).

    python3 scripts/device/lora_sampler.py sample --log RUN_LOG --csv OUT.csv [--interval 2] [--until-pid PID]

What it reads: SGLang's OpenAI route ``GET /v1/models`` (``sglang/srt/entrypoints/http_server.py``,
``available_models``: 0.5.18 line 1843, 0.5.12 line 1601) lists the served base model and, with LoRA enabled, one
card per adapter in the tokenizer manager's ``LoRARegistry`` (``get_all_adapters``), each with ``parent`` set to the
base model's name. The count of those cards is the number of adapters SGLang has registered (loaded and not yet
unloaded) at that moment; their names are the versions the run has loaded.

What it cannot read: the scheduler's LoRA memory pool (``LoRAMemoryPool.uid_to_buffer_id``) has no route. In 0.5.18
an unload frees the adapter's slot (``lora/lora_manager.py:350`` calls ``lora/mem_pool.py:839``), so the pool holds
at most the registered adapters that have served a batch plus the base model's slot; in 0.5.12 an unloaded uid
stays in its slot until evicted, which this figure does not see. SGLang's own ``sglang:lora_pool_slots_used`` gauge
(``observability/metrics_collector.py:608``, 0.5.18) is no pool figure either: it counts the distinct adapters of
the running batch (``managers/scheduler_components/metrics_reporter.py:1066``), and verl enables metrics only with
its Prometheus option. SGLang's load/unload log lines are at INFO, and verl launches SGLang with
``log_level=error``.

Where the server is: verl runs SGLang's HTTP server (SGLang's own ``app``, served by uvicorn on port 0 = any free
port: verl 0.9.1 ``workers/rollout/sglang_rollout/async_sglang_server.py:477``, ``workers/rollout/utils.py:69``;
the plugin's server actor launches it through the same code) inside its server actor, whose
process Ray titles ``ray::SGLangHttpServer`` (verl) or ``ray::SGLangLoRARollout`` (the plugin); the port is printed
nowhere at verl's default log level. The sampler takes the listening TCP sockets of that process (its
``/proc/PID/fd`` socket inodes matched in ``/proc/PID/net/tcp``/``tcp6``) and keeps the one that answers
``/v1/models``. Each row carries the verl step in progress, counted from the run's log as mem_sampler.py does.
"""

from __future__ import annotations

import csv
import http.client
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mem_sampler import (StepCounter, pid_alive, process_titles, read_samples,  # a sibling script  # noqa: E402
                         sample_parser, series_of)

FIELDS = ("t_s", "step", "adapters", "names")
SERVER_SERIES = "server_actor"  # mem_sampler.py's name for both server actors' titles
LISTEN = "0A"  # TCP state in /proc/net/tcp
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # a local port: never through http_proxy


def socket_inodes(pid: int, proc: Path = Path("/proc")) -> set[str]:
    """The inodes of the sockets a process holds open (``socket:[N]`` links under /proc/PID/fd)."""
    out = set()
    try:
        entries = list((proc / str(pid) / "fd").iterdir())
    except OSError:
        return out
    for fd in entries:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def _address(hex_addr: str) -> str:
    """/proc/net/tcp's hex address as a host to connect to (a wildcard bind -> the loopback address)."""
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        host = socket.inet_ntop(socket.AF_INET, raw[::-1])
        return "127.0.0.1" if host == "0.0.0.0" else host
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))  # four host-order 32-bit words
    host = socket.inet_ntop(socket.AF_INET6, words)
    return "::1" if host == "::" else host


def listening_ports(pid: int, proc: Path = Path("/proc")) -> list[tuple[str, int]]:
    """(host, port) of each TCP socket the process listens on."""
    inodes = socket_inodes(pid, proc)
    found = []
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / str(pid) / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == LISTEN and cols[9] in inodes:
                addr, port = cols[1].rsplit(":", 1)
                found.append((_address(addr), int(port, 16)))
    return found


def _url(host: str, port: int, path: str) -> str:
    return f"http://[{host}]:{port}{path}" if ":" in host else f"http://{host}:{port}{path}"


def registered_adapters(host: str, port: int, timeout: float = 2.0) -> list[str] | None:
    """The adapter names ``/v1/models`` lists (the cards with a ``parent``: the base model has none), or None where
    the port does not answer it as SGLang does."""
    try:
        with _DIRECT.open(_url(host, port, "/v1/models"), timeout=timeout) as resp:
            body = json.loads(resp.read())
    except (OSError, ValueError, http.client.HTTPException):  # URLError is an OSError
        return None
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return None
    return [card["id"] for card in body["data"] if isinstance(card, dict) and card.get("parent")]


def find_server(titles: dict[int, str], proc: Path = Path("/proc")) -> tuple[str, int] | None:
    """The address of the SGLang HTTP server inside the run's server actor, or None while there is none yet."""
    for pid, title in sorted(titles.items()):
        if series_of(title) != SERVER_SERIES:
            continue
        for host, port in listening_ports(pid, proc):
            if registered_adapters(host, port) is not None:
                return host, port
    return None


def sample(log: Path, out: Path, interval: float, until_pid: int | None) -> int:
    """Rows until the run ends; ``adapters`` is empty while no server answers (launch, or a restart between)."""
    steps, t0, server = StepCounter(log), time.monotonic(), None
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        while pid_alive(until_pid):
            server = server or find_server(process_titles())
            names = registered_adapters(*server) if server else None
            if server and names is None:
                server = None  # gone (a restarted actor listens elsewhere): look again next time
            writer.writerow({"t_s": round(time.monotonic() - t0, 2), "step": steps.current(),
                             "adapters": "" if names is None else len(names),
                             "names": "" if names is None else "|".join(sorted(names))})
            f.flush()  # rows survive the call's timeout
            time.sleep(interval)
    return 0


def per_step(rows: list[dict[str, str]]) -> dict[int, dict[str, object]]:
    """step -> the most adapters registered at any sample of that step and every name seen in it; steps without
    an answered sample are left out."""
    out: dict[int, dict[str, object]] = {}
    for row in rows:
        if row.get("adapters") in (None, ""):
            continue
        step = out.setdefault(int(row["step"]), {"adapters": 0, "names": set()})
        step["adapters"] = max(int(step["adapters"]), int(row["adapters"]))
        step["names"] |= {n for n in row.get("names", "").split("|") if n}
    return {s: {"adapters": v["adapters"], "names": sorted(v["names"])} for s, v in sorted(out.items())}


def main(argv: list[str]) -> int:
    args = sample_parser(__doc__)[0].parse_args(argv)
    return sample(args.log, args.csv, args.interval, args.until_pid)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
