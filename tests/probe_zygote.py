"""A pre-imported interpreter that forks one child per probe script (``server_probe.run_probe_script``).

Every probe script starts with the same imports (SGLang with its CPU stubs, Ray, torch, verl, the plugin's server
actor): ~9 CPU-s in a fresh interpreter, most of a CI core's time for these tests. The zygote pays them once per
pytest process, under the probes' own environment (the same PYTHONPATH, ``SGLANG_USE_CPU_ENGINE`` unset), then forks:
each child is the state a fresh interpreter reaches after those imports, runs the script as ``__main__`` with its
arguments and extra environment (read at run time: the switches are checked by the actor processes Ray starts), and
exits. Ray's own workers and daemons are started by the child, fresh as before.

Falls back to a fresh interpreter per script when the zygote cannot fork safely (a thread started by the imports) or
cannot start; ``VSL_PROBE_FRESH=1`` forces that.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ZYGOTE = r"""
import json, os, sys, threading, time, traceback
from verl_sglang_lora.tools.compat_probe import stub_inert_modules
stub_inert_modules()
import ray, torch  # noqa: F401
from verl.workers.rollout.replica import RolloutMode  # noqa: F401
import verl_sglang_lora.runtime.server, verl_sglang_lora.tools.doctor, tests.server_probe  # noqa: F401
print(json.dumps({"ready": threading.active_count() == 1, "threads": threading.active_count()}), flush=True)

def run(req):
    pid = os.fork()
    if pid == 0:
        os.setsid()  # the child's group: a timeout kills what it started too
        with open(req["out"], "wb") as out, open(req["err"], "wb") as err:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
        sys.stdout, sys.stderr = os.fdopen(1, "w", buffering=1), os.fdopen(2, "w", buffering=1)
        os.environ.update(req["env"])
        sys.argv = ["-c", *req["args"]]
        code = 0
        try:
            exec(compile(req["script"], "<probe>", "exec"), {"__name__": "__main__"})
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            if "ray" in sys.modules and sys.modules["ray"].is_initialized():
                sys.modules["ray"].shutdown()
            sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    deadline = time.monotonic() + req["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.killpg(pid, 9)
            os.waitpid(pid, 0)
            return "timeout"
        time.sleep(0.05)

for line in sys.stdin:
    print(json.dumps({"rc": run(json.loads(line))}), flush=True)
"""


class Zygote:
    """One zygote process per pytest process, started at first use, stopped at exit."""

    _instance: "Zygote | None" = None
    _failed = False

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-W", "ignore", "-c", ZYGOTE], cwd=cwd, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        hello = json.loads(self.proc.stdout.readline() or "{}")
        if not hello.get("ready"):
            self.stop()
            raise RuntimeError(f"zygote cannot fork safely: {hello}")
        atexit.register(self.stop)

    @classmethod
    def get(cls, env: dict[str, str], cwd: Path) -> "Zygote | None":
        if os.environ.get("VSL_PROBE_FRESH") == "1" or cls._failed or not hasattr(os, "fork"):
            return None
        if cls._instance is None or cls._instance.proc.poll() is not None:
            try:
                cls._instance = Zygote(env, cwd)
            except Exception:  # noqa: BLE001 - the probes run in fresh interpreters instead
                cls._failed = True
                return None
        return cls._instance

    def run(self, script: str, args: tuple[str, ...], extra_env: dict[str, str], timeout: float) -> Any:
        """(returncode or "timeout", stdout, stderr) of one forked run."""
        with tempfile.TemporaryDirectory() as tmp:
            out, err = Path(tmp, "out"), Path(tmp, "err")
            req = {"script": script, "args": list(args), "env": extra_env, "out": str(out), "err": str(err),
                   "timeout": timeout}
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
            if not line:  # the zygote itself died: say so, with what the child wrote
                raise RuntimeError(f"probe zygote exited ({self.proc.poll()}); child stderr: "
                                   f"{err.read_text(errors='replace')[-2000:] if err.exists() else ''}")
            return json.loads(line)["rc"], out.read_text(errors="replace"), err.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
