"""A local ``sglang.launch_server`` subprocess started with the plugin's LoRA launch args.

Used where the plugin talks to SGLang without verl around it (the GPU tests and the benchmarks), so both start
the server from the same rendered args the rollout actor applies.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Sequence


def lora_cli_args(lora_args: dict[str, Any]) -> list[str]:
    """``lora_launch_args`` output as ``launch_server`` flags (booleans become bare flags, lists expand)."""
    out: list[str] = []
    for key, value in lora_args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, *map(str, value)]
        elif value not in (None, False):
            out += [flag, str(value)]
    return out


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now (all held open until every one is picked)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def launch_env(grpc_port: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment with SGLang's gRPC port pinned (unless the user pinned it).

    SGLang 0.5.12 derives the gRPC port as ``--port + 10000`` when ``SGLANG_GRPC_PORT`` is unset and refuses to
    start when that passes 65535: an ephemeral port such as 58989 gives ``SGLANG_GRPC_PORT (68989) must
    be between 1 and 65535``. Releases without the variable ignore it.
    """
    env = dict(os.environ if base is None else base)
    env.setdefault("SGLANG_GRPC_PORT", str(grpc_port))
    return env


class SGLangProcess:
    def __init__(self, model_path: str | Path, lora_args: dict[str, Any], *, mem_fraction: float, extra: Sequence[str] = ()):
        self.port, grpc_port = free_ports(2)
        self.addr = f"127.0.0.1:{self.port}"
        self.cmd = [
            sys.executable, "-m", "sglang.launch_server", "--model-path", str(model_path), "--host", "127.0.0.1",
            "--port", str(self.port), *lora_cli_args(lora_args),
            "--attention-backend", os.environ.get("SGLANG_ATTENTION_BACKEND", "triton"),
            "--mem-fraction-static", str(mem_fraction), "--disable-cuda-graph", "--skip-server-warmup",
            "--log-level", "warning", *extra,
        ]
        self.proc = subprocess.Popen(self.cmd, env=launch_env(grpc_port))

    def wait(self, timeout: float = 600) -> None:
        """Block until /health answers; raises if the process exits or the timeout passes."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"SGLang exited with {self.proc.returncode}: {' '.join(self.cmd)}")
            try:
                urllib.request.urlopen(f"http://{self.addr}/health", timeout=2)
                return
            except OSError:
                time.sleep(1)
        raise TimeoutError(f"SGLang did not come up in {timeout:.0f} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
