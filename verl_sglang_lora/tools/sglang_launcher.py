"""A local ``sglang.launch_server`` subprocess started with the plugin's LoRA launch args.

Used where the plugin talks to SGLang without verl around it (the GPU tests and the benchmarks), so both start
the server from the same rendered args the rollout actor applies.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Sequence

from verl_sglang_lora.sglang_contract.lora_backends import chosen_backend, plugin_lora_backend
from verl_sglang_lora.sglang_contract.ports import server_port


def lora_cli_args(lora_args: dict[str, Any]) -> list[str]:
    """``lora_launch_args`` output as ``launch_server`` flags (True a bare flag, False its ``--no-`` form as SGLang's
    on/off flags take it, lists expand)."""
    out: list[str] = []
    for key, value in lora_args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False:
            out.append("--no-" + flag[2:])
        elif isinstance(value, (list, tuple)):
            out += [flag, *map(str, value)]
        elif value not in (None, False):
            out += [flag, str(value)]
    return out


class SGLangProcess:
    def __init__(self, model_path: str | Path, lora_args: dict[str, Any], *, mem_fraction: float, extra: Sequence[str] = ()):
        if lora_args.get("enable_lora"):  # as the server actor launches: SGLANG_LORA_BACKEND runs tests/gpu under another
            backend = os.environ.get("SGLANG_LORA_BACKEND") or chosen_backend(plugin_lora_backend(), lora_args)
            lora_args = {**lora_args, **({"lora_backend": backend} if backend else {})}
        self.port = server_port()  # valid on every release without SGLANG_GRPC_PORT (sglang_contract.ports)
        self.addr = f"127.0.0.1:{self.port}"
        self.cmd = [
            sys.executable, "-m", "sglang.launch_server", "--model-path", str(model_path), "--host", "127.0.0.1",
            "--port", str(self.port), *lora_cli_args(lora_args),
            "--attention-backend", os.environ.get("SGLANG_ATTENTION_BACKEND", "triton"),
            # as the examples run on the GPU host: SGLang picks flashinfer where it is installed, whose kernels
            # compile on first use
            "--sampling-backend", os.environ.get("SGLANG_SAMPLING_BACKEND", "pytorch"),
            "--mem-fraction-static", str(mem_fraction), "--disable-cuda-graph", "--skip-server-warmup",
            "--log-level", "warning", *extra,
        ]
        self.proc = subprocess.Popen(self.cmd)

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
