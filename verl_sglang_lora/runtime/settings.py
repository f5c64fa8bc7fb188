"""Plugin settings, read from ``actor_rollout_ref.rollout.engine_kwargs.sglang_lora`` (verl passes
``engine_kwargs`` through untouched and only reads its ``sglang`` key, so this block is ours)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from verl_sglang_lora.verl_glue.config_access import cfg_get, to_plain

SETTINGS_PATH = "actor_rollout_ref.rollout.engine_kwargs.sglang_lora"
REMOVED = {
    "bucket_mb": "SGLang takes an adapter in one load, so a bucket never bounded the device memory of a sync; the "
                 "adapter is now gathered into one flat device buffer of exactly its size, reused every sync",
}


@dataclass(frozen=True)
class PluginSettings:
    max_lora_rank: int | None = None
    """SGLang's --max-lora-rank; defaults to the LoRA rank."""
    canary: bool = True
    """After each adapter sync, score a fixed prompt with and without the adapter and fail if unchanged."""
    canary_min_delta: float = 0.0
    """The canary fails when max |logprob(with) - logprob(without)| <= this (a zero-B adapter is exempt)."""
    verify_checksums: bool = False
    """Send sha256 per tensor where SGLang verifies them (>=0.5.18); costs a device->host copy."""
    http_timeout_s: float = 300.0
    """Longest wait for one SGLang request (an adapter load in the server actor, an HTTP call of the tools)."""
    health_timeout_s: float = 30.0
    """While an adapter call to SGLang is pending, its scheduler is asked for its state every half of this; no answer
    within it fails the call (a hung scheduler surfaces in under a minute, not at http_timeout_s)."""
    http_max_attempts: int = 3
    """Attempts for retryable failures (connection refused/reset, timeouts, 502/503/504); 4xx fail at once."""
    server_max_restarts: int = 0
    """Ray restarts of a dead SGLang server actor, each relaunching SGLang with the newest adapter (adapter mode)."""
    resident: str = "auto"
    """In-place adapter sync into two pinned SGLang slots: auto (where it can run, else versioned loads, logged),
    on (refuse to start where it cannot run), off (versioned loads)."""
    device_collect: bool = True
    """FSDP2: the trainer hands the adapter over on the device (verl's collect copies it to the host and back)."""
    snapshot_dir: str = ""
    """Where the newest adapter is kept for a restarted server (node-local; empty = the temp dir)."""
    topology: str = ""
    """Path of an SGLang topology YAML (models -> server groups, docs/topology.md): each actor group's overrides go
    to its rollout replicas, frozen models are launched by the plugin and found by name
    (``verl_sglang_lora.topology.model_url``); `verl-sglang-lora doctor` prints the placement and the run's checks."""
    served_effect_check: str = "on"
    """Every step, in the trainer: the error of what SGLang served, (rollout - old), relative to the trained adapter's
    effect, (old - ref), must stay within a bound set by a noise floor measured where the adapter has no effect
    (runtime/sync/served_effect.py). on: a mismatch stops the run; warn: logged as an error; off: not computed. Needs
    rollout.calculate_log_probs=True and a reference policy."""
    served_effect_min_snr: float = 8.0
    """The check decides only when the trained effect's rms is this many times the noise floor's; below, the step is
    inconclusive (the effect is below the noise: nothing to judge)."""
    served_effect_noise_floor: float = 0.0
    """The rollout-vs-trainer numerics' energy per token (mean squared log-prob gap with the adapter served right);
    0: measured on the run's first step where the adapter has no effect (a fresh LoRA's first step). Set it for a
    run that resumes from a trained adapter (the ``served_noise_floor_rms`` metric of a fresh run, squared)."""

    @classmethod
    def from_rollout_config(cls, rollout_config: Any) -> "PluginSettings":
        raw = to_plain(cfg_get(cfg_get(rollout_config, "engine_kwargs", {}), "sglang_lora", {})) or {}
        known = {f.name for f in fields(cls)}
        for key, why in REMOVED.items():
            if key in raw:
                raise ValueError(f"{SETTINGS_PATH}.{key} was removed: {why}. Fix: delete the key.")
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"{SETTINGS_PATH} has unknown key(s) {unknown}; known: {sorted(known)}")
        try:
            return cls(**{k: v for k, v in raw.items() if v is not None})
        except TypeError as exc:
            raise ValueError(f"{SETTINGS_PATH}: {exc}") from exc

    def __post_init__(self) -> None:
        if self.http_timeout_s <= 0:
            raise ValueError(f"{SETTINGS_PATH}.http_timeout_s must be > 0 seconds, got {self.http_timeout_s}")
        if self.health_timeout_s <= 0:
            raise ValueError(f"{SETTINGS_PATH}.health_timeout_s must be > 0 seconds, got {self.health_timeout_s}")
        if self.served_effect_noise_floor < 0:
            raise ValueError(f"{SETTINGS_PATH}.served_effect_noise_floor must be >= 0, got {self.served_effect_noise_floor}")
        if self.resident not in ("auto", "on", "off"):
            raise ValueError(f"{SETTINGS_PATH}.resident must be auto, on or off, got {self.resident!r}")
        if self.canary_min_delta < 0:
            raise ValueError(f"{SETTINGS_PATH}.canary_min_delta must be >= 0, got {self.canary_min_delta}")
        if isinstance(self.served_effect_check, bool):  # YAML 1.1 reads a bare on/off as a boolean
            object.__setattr__(self, "served_effect_check", "on" if self.served_effect_check else "off")
        if self.served_effect_check not in ("on", "warn", "off"):
            raise ValueError(f"{SETTINGS_PATH}.served_effect_check must be on, warn or off, "
                             f"got {self.served_effect_check!r}")
        if not self.served_effect_min_snr > 0:
            raise ValueError(f"{SETTINGS_PATH}.served_effect_min_snr must be > 0, got {self.served_effect_min_snr}")
        if self.http_max_attempts < 1:
            raise ValueError(f"{SETTINGS_PATH}.http_max_attempts must be >= 1")
        if self.server_max_restarts < 0:
            raise ValueError(f"{SETTINGS_PATH}.server_max_restarts must be >= 0, got {self.server_max_restarts}")
