"""A child process of the topology host that cannot outlive it, and its health check.

Why the wrapper: the host is a Ray actor; when the run ends Ray kills it without running ``atexit``. Every engine is
started as ``python -m verl_sglang_lora.topology.processes <host pid> -- <command>``, which asks Linux to send it
SIGTERM when its parent dies (``PR_SET_PDEATHSIG``, kept across ``exec``) and then becomes the command. SGLang's own
subprocesses die with their launcher. ``stop`` also signals the process group (started in its own session).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Mapping, Sequence

PR_SET_PDEATHSIG = 1
STOP_GRACE_S = 30.0


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now (the engine binds it a moment later)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def guarded_command(command: Sequence[str]) -> list[str]:
    """``command`` behind the die-with-parent wrapper (this process is the parent)."""
    return [sys.executable, "-m", __name__, str(os.getpid()), "--", *command]


class ChildProcess:
    """One engine or router: started in its own session, stopped with its whole process group."""

    def __init__(self, command: Sequence[str], env: Mapping[str, str], url: str) -> None:
        self.command, self.url = list(command), url
        self.proc = subprocess.Popen(guarded_command(command), env=dict(env), start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def healthy(self, timeout: float = 2.0) -> bool:
        """``GET <url>/health`` answers 200."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=timeout) as resp:
                return resp.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


def _die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the request took effect
        sys.exit(f"{__name__}: parent {parent} is gone; not starting")


def main(argv: Sequence[str]) -> None:
    parent, sep, *command = argv
    if sep != "--" or not command:
        sys.exit(f"usage: python -m {__name__} PARENT_PID -- COMMAND...")
    _die_with_parent(int(parent))
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
