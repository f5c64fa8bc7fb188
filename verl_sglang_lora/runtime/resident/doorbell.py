"""The doorbell: an in-place write sent straight to the loader in SGLang's scheduler process, one line each way.

Why: on the H200 an in-place write of a 0.6B r32 adapter costs ~1.3 ms in the loader and ~2.6 ms more on SGLang's
``update_weights_from_tensor`` path around it (the tokenizer manager's lock and ZMQ hop, the scheduler loop picking
the request up, its TP barrier, the answer's way back; docs/benchmarks.md). Once a slot is attached a write needs
nothing from that path: it names the slot, the version and the trainer's checksum; the sources are the attached
views; the answer goes to the slot's reply channel. So the attach (still SGLang's own request) names an abstract Unix
socket, the loader listens on it in a thread of the scheduler process, and the server actor rings it for each write.

The thread may run beside the scheduler's loop because a write touches only the idle slot (not served, no lease:
the server actor checks before ringing), runs on a CUDA stream of its own and synchronizes it before answering,
never fetches or evicts a pool slot (a slot that is not resident fails the write), and takes the loader's lock.
Where LoRA modules cache per-slot state (0.5.23's ``on_lora_slots_updated``) no listener starts and writes stay on
SGLang's request path. Linux only (abstract socket names); elsewhere the request path, said once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import threading
import uuid
from typing import Callable, Optional

logger = logging.getLogger(__name__)

# A thread woken by a socket must win the GIL from the scheduler's busy loop; CPython hands it over after the switch
# interval (5 ms by default: longer than the write). Only this thread contends, and only for a write's duration.
SWITCH_INTERVAL_S = 2e-4
_LISTENERS: dict[str, "Listener"] = {}
_LOCK = threading.Lock()


def new_address() -> str:
    """A fresh doorbell name for one client (one per trainer-side ``ResidentRequests``)."""
    return f"vsl-resident-{uuid.uuid4().hex[:16]}"


def _socket_name(address: str) -> str:
    return "\0" + address  # Linux abstract namespace: no file to clean up, gone with the process


class DoorbellError(RuntimeError):
    """The doorbell rang but no answer came back (or an unreadable one): the slot may be half written."""


class Listener(threading.Thread):
    """Scheduler side: accepts the server actor's connection and answers each line with ``serve(line)``."""

    def __init__(self, address: str, serve: Callable[[str], str]) -> None:
        super().__init__(name="verl-resident-doorbell", daemon=True)
        self.address = address
        self.serve = serve
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(_socket_name(address))
        self.sock.listen(4)

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            with conn, conn.makefile("rwb") as stream:
                for raw in stream:
                    try:
                        reply = self.serve(raw.decode("utf-8").rstrip("\n"))
                    except Exception as exc:  # noqa: BLE001 - the thread must outlive one bad request
                        logger.exception("verl resident doorbell: a request raised")
                        reply = f"refused {type(exc).__name__}: {exc}"
                    stream.write(reply.replace("\n", " ").encode("utf-8") + b"\n")
                    stream.flush()

    def close(self) -> None:
        """Stop listening: ``shutdown`` wakes the blocked ``accept`` (a bare ``close`` would leave the name bound)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.join(timeout=5.0)


def ensure_listener(address: str, serve: Callable[[str], str]) -> Optional[str]:
    """Start the listener for ``address`` in this process once; returns None, or why it could not start."""
    with _LOCK:
        if address in _LISTENERS:
            _LISTENERS[address].serve = serve  # a re-attach in the same scheduler: the newest binding answers
            return None
        if not sys.platform.startswith("linux"):
            return f"abstract Unix sockets need Linux, this is {sys.platform}"
        try:
            listener = Listener(address, serve)
        except OSError as exc:
            return f"cannot listen on {address!r}: {exc}"
        if sys.getswitchinterval() > SWITCH_INTERVAL_S:
            logger.info("verl resident doorbell: GIL switch interval %.1f -> %.1f ms in this scheduler process, so "
                        "the doorbell thread gets to run within that of a write arriving",
                        sys.getswitchinterval() * 1e3, SWITCH_INTERVAL_S * 1e3)
            sys.setswitchinterval(SWITCH_INTERVAL_S)
        _LISTENERS[address] = listener
        listener.start()
        return None


def stop_listener(address: str) -> None:
    with _LOCK:
        listener = _LISTENERS.pop(address, None)
    if listener is not None:
        listener.close()


class DoorbellClient:
    """Server-actor side: one connection, one outstanding line at a time.

    ``ring`` raises ``ConnectionError`` (``OSError``) when no listener answers the connect -- nothing was sent, so
    the caller may take SGLang's request path -- and ``DoorbellError`` once the line went out without a usable answer.
    """

    def __init__(self, address: str, timeout_s: float) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._lock = asyncio.Lock()

    async def connect(self) -> None:
        if self._writer is not None:
            return
        # connected here, not by asyncio: uvloop (SGLang's event loop) refuses an abstract name; a local connect
        # returns at once (accepted into the backlog, or refused)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(_socket_name(self.address))
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self._reader, self._writer = await asyncio.open_unix_connection(sock=sock)

    async def ring(self, line: str) -> str:
        """Send one request line, return the loader's answer line (``ok ...`` or ``refused ...``)."""
        async with self._lock:
            await self.connect()
            assert self._reader is not None and self._writer is not None
            try:
                self._writer.write(line.encode("utf-8") + b"\n")
                await self._writer.drain()
                answer = await asyncio.wait_for(self._reader.readline(), self.timeout_s)
            except (OSError, asyncio.TimeoutError) as exc:
                self.close()
                raise DoorbellError(f"no answer from the loader's doorbell within {self.timeout_s:g} s "
                                    f"({type(exc).__name__}: {exc}); is SGLang's scheduler alive?") from exc
            if not answer.endswith(b"\n"):
                self.close()
                raise DoorbellError("the loader's doorbell closed mid-answer (the scheduler process exited?)")
            return answer.decode("utf-8").rstrip("\n")

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
