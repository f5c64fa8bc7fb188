"""TEST-ONLY fault injection for the GPU fault and proof runs (scripts/device/faults.sh, proof_run.sh).

Off unless ``VERL_SGLANG_LORA_INJECT`` is set in the server actor's environment (Ray workers inherit the driver's);
a real run never sets it, and then the hook is one dictionary lookup per unload. It exists because two faults
cannot be caused from outside on demand: SGLang refusing an unload, and a kill that lands while an adapter
sync is in flight (the sync takes ~15 ms, too short for an external kill to hit).

The value is a comma-separated list of ``KIND:WHICH[:SECONDS]``:

- ``unload_fail``: the unload raises ``SGLangRequestError("unload_lora_adapter", 200, ...)`` -- exactly what
  ``SGLangLoRARollout._sglang_call`` raises when SGLang answers ``success=False`` -- so ``_unload`` takes its
  ordinary refusal path (warn, count ``unload_failures``, retry at the next activation).
- ``unload_stall``: the unload waits ``SECONDS`` (default 30) before going on. The unload runs inside
  ``sync_adapter`` (``_activate`` unloads the previous version), so the sync call stays open that long and an
  external kill lands mid-sync; the hook's log line tells the script when.

- ``served_scale:vK:FACTOR``: from adapter version K on, the adapter config the weight-sync client sends to SGLang
  carries ``lora_alpha * FACTOR`` while the trainer keeps its own scaling: SGLang then serves the adapter mis-scaled
  (the rsLoRA bug class). The config reaches SGLang only when an adapter is loaded (the resident slots at the first
  sync of a launch, versioned loads); in-place writes carry tensors only, so use v0 with the resident path. The
  resident loader's scaling check and the trainer's served-effect check must catch it.

``WHICH`` is ``N`` (the Nth unload this server process attempts, 1-based; a Ray-restarted actor counts from 0 again)
or ``vK`` (the first unload of adapter version K, any revision: stable across restarts, because a restarted server
loads only the newest snapshot and never unloads an earlier version again). Each entry fires once per process; an
unload takes at most one fault (the first entry that matches).
A malformed value raises ``ValueError`` at the first unload: a typo must stop the run, not inject nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from dataclasses import dataclass

from verl_sglang_lora.runtime.sync.versions import NAME_PREFIX
from verl_sglang_lora.sglang_contract.errors import SGLangRequestError

ENV = "VERL_SGLANG_LORA_INJECT"
KINDS = ("unload_fail", "unload_stall", "served_scale")
UNLOAD_KINDS = ("unload_fail", "unload_stall")
DEFAULT_STALL_S = 30.0
UNLOAD_METHOD = "unload_lora_adapter"  # the method name _sglang_call puts in its SGLangRequestError
_VERSION_RE = re.compile(rf"^{re.escape(NAME_PREFIX)}(\d+)(?:r\d+)?$")

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)


@dataclass(frozen=True)
class Fault:
    kind: str
    nth: int | None = None  # the Nth unload attempt of this process
    version: int | None = None  # or: the first unload of this adapter version
    seconds: float = DEFAULT_STALL_S
    factor: float = 1.0  # served_scale: lora_alpha sent to SGLang is multiplied by this

    def matches(self, count: int, name: str) -> bool:
        if self.nth is not None:
            return count == self.nth
        return adapter_version(name) == self.version


def adapter_version(name: str) -> int | None:
    """The version in a versioned adapter name (``verl_lora_v7``, ``verl_lora_v7r1``); None for other names."""
    m = _VERSION_RE.match(name)
    return int(m.group(1)) if m else None


def parse_spec(text: str) -> list[Fault]:
    """``unload_fail:2,unload_stall:v8:20`` -> faults; raises ValueError naming the bad entry."""
    faults = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        parts = entry.split(":")
        if len(parts) not in (2, 3) or parts[0] not in KINDS:
            raise ValueError(f"{ENV}: bad entry {entry!r}; expected KIND:N or KIND:vK[:SECONDS], KIND in {KINDS}")
        kind, which = parts[0], parts[1]
        try:
            nth, version = (None, int(which[1:])) if which.startswith("v") else (int(which), None)
            value = float(parts[2]) if len(parts) == 3 else None
        except ValueError:
            raise ValueError(f"{ENV}: bad entry {entry!r}; N, K, SECONDS and FACTOR must be numbers") from None
        if (nth is not None and nth < 1) or (version is not None and version < 0) or (value is not None and value < 0):
            raise ValueError(f"{ENV}: bad entry {entry!r}; N >= 1, K >= 0, SECONDS >= 0")
        if kind == "served_scale":
            if version is None or value is None or value <= 0:
                raise ValueError(f"{ENV}: bad entry {entry!r}; served_scale takes vK:FACTOR with FACTOR > 0")
            faults.append(Fault(kind, None, version, factor=value))
            continue
        if value is not None and kind != "unload_stall":
            raise ValueError(f"{ENV}: bad entry {entry!r}; only unload_stall takes SECONDS")
        faults.append(Fault(kind, nth, version, DEFAULT_STALL_S if value is None else value))
    return faults


class UnloadInjector:
    """Counts this process's unload attempts and fires each configured fault once."""

    def __init__(self, faults: list[Fault], spec: str = "") -> None:
        self.faults = faults
        self.spec = spec
        self.count = 0
        self.fired: set[int] = set()  # indices into faults

    async def before_unload(self, name: str) -> None:
        self.count += 1
        for i, fault in enumerate(self.faults):
            if fault.kind not in UNLOAD_KINDS or i in self.fired or not fault.matches(self.count, name):
                continue
            self.fired.add(i)
            # the line faults.sh waits for (kind and adapter name in fixed places); WARNING so it is never filtered
            logger.warning("sglang_lora: fault_injection: %s unload #%d of %s (%s=%s, test-only)",
                           fault.kind, self.count, name, ENV, self.spec)
            if fault.kind == "unload_fail":
                raise SGLangRequestError(UNLOAD_METHOD, 200, f"injected unload failure of {name} ({ENV}, test-only)")
            await asyncio.sleep(fault.seconds)


_injector: UnloadInjector | None = None
_injector_spec: str | None = None


def injector() -> UnloadInjector | None:
    """The process's injector for the current value of the variable (None when unset: no injection)."""
    global _injector, _injector_spec
    spec = os.environ.get(ENV, "")
    if spec != _injector_spec:  # read per call so a test can change it; rebuilt (and counted afresh) only on change
        _injector = UnloadInjector(parse_spec(spec), spec) if spec.strip() else None  # raises before caching
        _injector_spec = spec
    return _injector


async def before_unload(name: str) -> None:
    """The hook ``SGLangLoRARollout._unload`` calls before each SGLang unload request; a no-op unless enabled."""
    active = injector()
    if active is not None:
        await active.before_unload(name)


def served_config(config: dict, version: int) -> dict:
    """The adapter config to send to SGLang for ``version``: ``config`` itself unless a ``served_scale`` fault covers
    that version, then a copy with ``lora_alpha`` scaled (the trainer's own scaling is computed before this)."""
    active = injector()
    if active is None:
        return config
    for fault in active.faults:
        if fault.kind == "served_scale" and version >= (fault.version or 0):
            logger.warning("sglang_lora: fault_injection: served_scale x%g of version %d (%s=%s, test-only)",
                           fault.factor, version, ENV, active.spec)
            return {**config, "lora_alpha": float(config["lora_alpha"]) * fault.factor}
    return config
