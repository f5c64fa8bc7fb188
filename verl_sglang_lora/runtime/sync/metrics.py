"""Per-step sync and staleness figures kept by the server actor, drained into verl's metrics each step.

The weight-sync client hands its stats to the server with every activation; every generate records which
adapter version served it. ``drain`` returns the figures under ``sglang_lora/...`` keys and starts a new step.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

PREFIX = "sglang_lora/"


@dataclass
class SyncMetrics:
    last_sync: dict[str, float] = field(default_factory=dict)
    syncs: int = 0
    restarts: int = 0  # Ray restarts of the server actor recovered (recovery.py)
    samples: int = 0
    base_samples: int = 0  # served before any adapter was active (version -1)
    staleness_n: int = 0
    staleness_sum: int = 0
    staleness_max: int = 0
    version_min: int | None = None
    version_max: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record_sync(self, stats: Mapping[str, Any]) -> None:
        """One adapter activation (the client's stats dict: version, bytes, tensors, *_ms)."""
        with self._lock:
            self.syncs += 1
            self.last_sync = {k: float(v) for k, v in stats.items() if isinstance(v, (int, float))}

    def record_sample(self, version: int, staleness: int | None) -> None:
        with self._lock:
            self.samples += 1
            if version < 0:
                self.base_samples += 1
                return
            self.version_min = version if self.version_min is None else min(self.version_min, version)
            self.version_max = version if self.version_max is None else max(self.version_max, version)
            if staleness is not None:
                self.staleness_n += 1
                self.staleness_sum += staleness
                self.staleness_max = max(self.staleness_max, staleness)

    def drain(self) -> dict[str, float]:
        """The figures since the last drain (the last sync's stats are kept until a newer sync)."""
        with self._lock:
            out: dict[str, float] = {f"{PREFIX}syncs": float(self.syncs), f"{PREFIX}samples": float(self.samples),
                                     f"{PREFIX}base_policy_samples": float(self.base_samples),
                                     f"{PREFIX}server_restarts": float(self.restarts)}
            for key in ("total_ms", "collect_ms", "load_ms", "bytes", "tensors", "buckets", "version"):
                if key in self.last_sync:
                    out[f"{PREFIX}sync_{key}"] = self.last_sync[key]
            if self.staleness_n:
                out[f"{PREFIX}staleness_mean"] = self.staleness_sum / self.staleness_n
                out[f"{PREFIX}staleness_max"] = float(self.staleness_max)
            if self.version_min is not None:
                out[f"{PREFIX}served_version_min"] = float(self.version_min)
                out[f"{PREFIX}served_version_max"] = float(self.version_max)
            self.syncs = self.restarts = self.samples = self.base_samples = 0
            self.staleness_n = self.staleness_sum = self.staleness_max = 0
            self.version_min = self.version_max = None
            return out


def merge_replica_metrics(per_replica: list[Mapping[str, float]]) -> dict[str, float]:
    """One figure per key over the replicas: sums for counts, max for versions/staleness/latency, mean else."""
    if not per_replica:
        return {}
    summed = ("syncs", "server_restarts", "samples", "base_policy_samples", "sync_bytes", "sync_tensors")
    maxed = ("staleness_max", "served_version_max", "sync_version", "sync_total_ms", "sync_load_ms", "sync_collect_ms")
    out: dict[str, float] = {}
    for key in sorted({k for m in per_replica for k in m}):
        values = [m[key] for m in per_replica if key in m]
        short = key[len(PREFIX):]
        if short in summed:
            out[key] = float(sum(values))
        elif short in maxed:
            out[key] = float(max(values))
        elif short == "served_version_min":
            out[key] = float(min(values))
        else:
            out[key] = float(sum(values) / len(values))
    return out
