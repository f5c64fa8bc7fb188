"""An HTTP port that every supported SGLang release accepts without ``SGLANG_GRPC_PORT``.

SGLang 0.5.12 derives its gRPC port as ``--port + 10000`` and refuses to start when that passes 65535, so an
ephemeral port (Linux hands out 32768-60999) can fail its check. Pinning ``SGLANG_GRPC_PORT`` instead is not neutral:
from 0.5.23 on the variable *enables* SGLang's native gRPC server beside HTTP. So the port is picked low enough
that the derived gRPC port is valid too, and the variable is left to the user.
"""

from __future__ import annotations

import random
import socket

GRPC_PORT_OFFSET = 10000  # SGLang 0.5.12: gRPC port = --port + 10000 unless SGLANG_GRPC_PORT is set
MAX_PORT = 65535
LOWEST_PORT = 20000
MAX_TRIES = 200


def server_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now whose derived gRPC port (+10000) is free and valid too."""
    rng = random.SystemRandom()
    for _ in range(MAX_TRIES):
        port = rng.randint(LOWEST_PORT, MAX_PORT - GRPC_PORT_OFFSET)
        if _bindable(host, port) and _bindable(host, port + GRPC_PORT_OFFSET):
            return port
    raise RuntimeError(f"no free port in {LOWEST_PORT}-{MAX_PORT - GRPC_PORT_OFFSET} on {host} "
                       f"(with port + {GRPC_PORT_OFFSET} free too) after {MAX_TRIES} tries")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
