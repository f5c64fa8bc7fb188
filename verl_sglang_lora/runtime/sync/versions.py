"""Versioned adapter names with in-flight reference counts.

A fixed adapter name forces unload-then-load (verl 0.9.1), which leaves a window with no adapter and can
deadlock against requests still holding it. Here every sync loads under a new name derived from a monotonic
64-bit version (the trainer's global step), the new name becomes active atomically, and an old name is
unloaded only once no in-flight request references it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

MAX_VERSION = 2**63 - 1
NAME_PREFIX = "verl_lora_v"
VERL_FIXED_ADAPTER_NAME = "verl_actor_lora_name"  # what verl's own generate() puts in lora_path
UNNAMED = (None, VERL_FIXED_ADAPTER_NAME)  # a request that leaves the adapter to the plugin


def explicit_adapters(lora_path: Any) -> list[str]:
    """The adapter names a generate request chose itself (``lora_path``: one name or one per prompt), verl's fixed
    name aside (the plugin replaces it with the active version)."""
    return [p for p in (lora_path if isinstance(lora_path, list) else [lora_path])
            if isinstance(p, str) and p and p not in UNNAMED]


def wants_active(lora_path: Any) -> bool:
    """Whether some prompt of the request leaves its adapter to the plugin (then it is served the active version)."""
    return lora_path in UNNAMED or (isinstance(lora_path, list) and any(p in UNNAMED for p in lora_path))


def fill_adapter(lora_path: Any, name: str | None) -> Any:
    """``lora_path`` with every prompt that left its adapter to the plugin given ``name`` (the active version; None:
    the base model), explicit choices kept."""
    if isinstance(lora_path, list):
        return [name if p in UNNAMED else p for p in lora_path]
    return name if lora_path in UNNAMED else lora_path


def adapter_name(version: int, revision: int = 0) -> str:
    if not 0 <= version <= MAX_VERSION:
        raise ValueError(f"adapter version must be in [0, 2**63-1], got {version}")
    return f"{NAME_PREFIX}{version}" if revision == 0 else f"{NAME_PREFIX}{version}r{revision}"


@dataclass(frozen=True)
class Lease:
    name: str
    version: int


@dataclass
class AdapterVersions:
    """Which adapter serves new requests, which are still referenced, and which can be unloaded."""

    active: Lease | None = None
    fingerprints: dict[str, str] = field(default_factory=dict)
    refs: dict[str, int] = field(default_factory=dict)
    loaded: set[str] = field(default_factory=set)
    unloading: set[str] = field(default_factory=set)
    permanent: set[str] = field(default_factory=set)  # resident slots: rewritten in place, never unloaded
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def acquire(self) -> Lease | None:
        """Pin the active adapter for one request (None before the first sync)."""
        with self._lock:
            lease = self.active
            if lease is not None:
                self.refs[lease.name] = self.refs.get(lease.name, 0) + 1
            return lease

    def acquire_named(self, name: str) -> Lease:
        """Pin ``name`` for one request that chose it itself (a slot, a pinned evaluation adapter): a resident slot a
        request reads is then never the one written next."""
        with self._lock:
            self.refs[name] = self.refs.get(name, 0) + 1
            active = self.active
            return Lease(name, active.version if active is not None and active.name == name else -1)

    def release(self, lease: Lease | None) -> list[str]:
        """Unpin; returns stale names that are now unreferenced and should be unloaded."""
        if lease is None:
            return []
        with self._lock:
            self.refs[lease.name] = max(0, self.refs.get(lease.name, 0) - 1)
            return self._stale_unreferenced()

    def check_push(self, version: int, fingerprint: str) -> str:
        """'ack' if this exact adapter is already active, 'load' if it is new; raises on a version going back."""
        with self._lock:
            if self.active is None:
                return "load"
            if version < self.active.version:
                raise ValueError(
                    f"adapter version {version} is older than the active version {self.active.version}; versions "
                    "must be monotonic (the trainer's global step)"
                )
            if version == self.active.version and self.fingerprints.get(self.active.name) == fingerprint:
                return "ack"
            return "load"

    def name_for(self, version: int) -> str:
        """A fresh name for ``version``; a re-push of the same version with different content gets a revision."""
        with self._lock:
            revision = 0
            while adapter_name(version, revision) in self.loaded | self.unloading:
                revision += 1
            return adapter_name(version, revision)

    def activate(self, name: str, version: int, fingerprint: str) -> list[str]:
        """Make a loaded adapter the one new requests use; returns stale unreferenced names to unload."""
        with self._lock:
            if self.active is not None and version < self.active.version:
                raise ValueError(f"refusing to activate version {version} below active {self.active.version}")
            self.loaded.add(name)
            self.fingerprints[name] = fingerprint
            self.active = Lease(name, version)
            return self._stale_unreferenced()

    def forget(self, names: list[str]) -> None:
        with self._lock:
            for n in names:
                self.loaded.discard(n)
                self.unloading.discard(n)
                self.refs.pop(n, None)
                self.fingerprints.pop(n, None)

    def status(self) -> dict:
        with self._lock:
            return {
                "active_name": self.active.name if self.active else None,
                "active_version": self.active.version if self.active else None,
                "loaded": sorted(self.loaded),
                "unloading": sorted(self.unloading),
                "in_flight": {k: v for k, v in self.refs.items() if v},
            }

    def _stale_unreferenced(self) -> list[str]:
        """Stale names nobody references, handed out once (moved to ``unloading``) so no name is unloaded twice."""
        active = self.active.name if self.active else None
        stale = sorted(n for n in self.loaded if n != active and n not in self.permanent and self.refs.get(n, 0) == 0)
        self.loaded.difference_update(stale)
        self.unloading.update(stale)
        return stale
