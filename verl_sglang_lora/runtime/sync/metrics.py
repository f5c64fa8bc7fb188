"""Per-step sync and staleness figures kept by the server actor, drained into verl's metrics each step.

Every figure is declared once, with how replicas combine it: :class:`SyncStats` for one adapter sync (filled
by the client and the server actor), :class:`SyncMetrics` for the step's counters. ``drain`` and
``merge_replica_metrics`` read those declarations, so a new figure is one new field.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

PREFIX = "sglang_lora/"
SUM, MAX, MIN, MEAN = "sum", "max", "min", "mean"


def figure(merge: str, default: Any = 0):
    """A metric field and how replicas' values combine (sum, max, min or mean)."""
    return field(default=default, metadata={"merge": merge})


@dataclass
class SyncStats:
    """One adapter sync, as reported under ``sglang_lora/sync_<field>``."""

    version: int = figure(MAX, -1)
    tensors: int = figure(SUM)
    bytes: int = figure(SUM)
    collect_ms: float = figure(MAX, 0.0)  # trainer stream -> flat device buffer, names checked, fingerprint
    request_ms: float = figure(MAX, 0.0)  # request fields built for the installed SGLang (IPC handles)
    snapshot_ms: float = figure(MAX, 0.0)  # recovery snapshot written (server_max_restarts > 0)
    load_ms: float = figure(MAX, 0.0)  # SGLang's load (with its verify where one ran), inside the server actor
    activate_ms: float = figure(MAX, 0.0)  # switch, unload of stale versions, cache flush
    total_ms: float = figure(MAX, 0.0)  # client start to activation (the Ray reply is not counted)
    inplace: int = figure(SUM)  # 1 when the version was written in place into a resident slot
    load_verified: int = figure(SUM)  # 1 when the loader's verify of an ordinary load ran (a mismatch stops the run)

    def as_metrics(self) -> dict[str, float]:
        return {f"{PREFIX}sync_{k}": float(v) for k, v in asdict(self).items()}


@dataclass
class SyncMetrics:
    last_sync: SyncStats | None = None
    syncs: int = figure(SUM)
    restarts: int = figure(SUM)  # Ray restarts of the server actor recovered (runtime/recovery.py)
    unload_failures: int = figure(SUM)  # SGLang refused to unload a stale version (retried at the next sync)
    resident_fallbacks: int = figure(SUM)  # in-place writes that failed a check and were loaded the ordinary way
    samples: int = figure(SUM)
    base_policy_samples: int = figure(SUM)  # served before any adapter was active (version -1)
    # inside verl's update_weights timer after the sync: resume_memory(kv_cache) in SGLang, then the cache flush and
    # the canary's two scoring requests, with the newest adapter and on the base (0 in a step with no KV cache resume)
    resume_kv_ms: float = figure(MAX, 0.0)
    canary_ms: float = figure(MAX, 0.0)
    staleness_n: int = 0
    staleness_sum: int = 0
    staleness_max: int = figure(MAX)
    served_version_min: int | None = figure(MIN, None)
    served_version_max: int | None = figure(MAX, None)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record_sync(self, stats: SyncStats | Mapping[str, Any]) -> None:
        """One adapter activation."""
        if not isinstance(stats, SyncStats):
            known = {f.name for f in fields(SyncStats)}
            stats = SyncStats(**{k: v for k, v in stats.items() if k in known})
        with self._lock:
            self.syncs += 1
            self.last_sync = stats

    def record_sample(self, version: int, staleness: int | None) -> None:
        with self._lock:
            self.samples += 1
            if version < 0:
                self.base_policy_samples += 1
                return
            lo, hi = self.served_version_min, self.served_version_max
            self.served_version_min = version if lo is None else min(lo, version)
            self.served_version_max = version if hi is None else max(hi, version)
            if staleness is not None:
                self.staleness_n += 1
                self.staleness_sum += staleness
                self.staleness_max = max(self.staleness_max, staleness)

    def drain(self) -> dict[str, float]:
        """The figures since the last drain (the last sync's stats are kept until a newer sync)."""
        with self._lock:
            out = {f"{PREFIX}{k}": float(getattr(self, k)) for k in _merged_fields(SyncMetrics)
                   if getattr(self, k) is not None and k != "staleness_max"}
            out[f"{PREFIX}server_restarts"] = out.pop(f"{PREFIX}restarts")
            if self.last_sync is not None:
                out.update(self.last_sync.as_metrics())
            if self.staleness_n:
                out[f"{PREFIX}staleness_mean"] = self.staleness_sum / self.staleness_n
                out[f"{PREFIX}staleness_max"] = float(self.staleness_max)
            for f in fields(self):
                if f.name not in ("last_sync", "_lock"):
                    setattr(self, f.name, f.default)
            return out


def _merged_fields(cls: type) -> dict[str, str]:
    return {f.name: f.metadata["merge"] for f in fields(cls) if "merge" in f.metadata}


def merge_rules() -> dict[str, str]:
    """``sglang_lora/<key>`` -> how replicas combine it, from the declarations above."""
    rules = {f"{PREFIX}{k}": m for k, m in _merged_fields(SyncMetrics).items()}
    rules[f"{PREFIX}server_restarts"] = rules.pop(f"{PREFIX}restarts")
    rules.update({f"{PREFIX}sync_{k}": m for k, m in _merged_fields(SyncStats).items()})
    rules[f"{PREFIX}staleness_mean"] = MEAN
    return rules


def merge_replica_metrics(per_replica: list[Mapping[str, float]]) -> dict[str, float]:
    """One figure per key over the replicas, combined as each figure declares (mean for undeclared keys)."""
    rules = merge_rules()
    combine = {SUM: sum, MAX: max, MIN: min, MEAN: lambda v: sum(v) / len(v)}
    out: dict[str, float] = {}
    for key in sorted({k for m in per_replica for k in m}):
        values = [m[key] for m in per_replica if key in m]
        out[key] = float(combine[rules.get(key, MEAN)](values))
    return out
