"""One address for a frozen model with several engines: sglang-router in front of them, or a refusal naming it.

The plugin does not balance requests itself; where the router package is missing a model gets exactly one engine.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Sequence

ROUTER_MODULE = "sglang_router"
ROUTER_FIX = ("pip install sglang-router (its launch_router puts one address in front of the engines), or give the "
              "model one engine (num_gpus = num_gpus_per_engine)")


def router_installed() -> bool:
    """Whether ``sglang_router`` can be imported here (located, not imported)."""
    return importlib.util.find_spec(ROUTER_MODULE) is not None


def router_command(worker_urls: Sequence[str], host: str, port: int) -> list[str]:
    """The router process in front of ``worker_urls`` (``http://host:port`` each), serving on ``host:port``."""
    return [sys.executable, "-m", f"{ROUTER_MODULE}.launch_router", "--worker-urls", *worker_urls,
            "--host", host, "--port", str(port)]
