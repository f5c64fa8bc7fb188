"""Is the policy SGLang served the trained one? Measured on every step's batch, from log-probs verl already has.

Per response token verl holds three log-probs of the same sampled token: ``rollout`` (what SGLang served),
``old`` (the trainer's recompute with the adapter) and ``ref`` (the trainer with the adapter disabled: the base).
E = old - ref is the trained adapter's effect; D = rollout - old is what SGLang served beyond it. With the trained
adapter served, D is only the two engines' numerics (bf16 kernels); with anything else served, D also carries the
error: -E for the base model, -E/2 at half scale, U - E for an unrelated adapter U, U for "trained plus U".

The check compares the error's size with the effect's, against a noise floor measured **independently of the served
adapter**: D on a step where the trained adapter has no effect (E = 0 on every token, e.g. step 1, where LoRA B is
zero and old == ref exactly) is the engines' numerics alone. ``served_effect_noise_floor`` gives it where no such
step exists (a resumed run).

Statistic (per token energies, robust to heavy-tailed noise): the batch's sequences are dealt into up to
``GROUPS`` groups; per group the relative error ``sum(D^2) / sum(E^2)`` and the effect energy ``mean(E^2)``; the
medians over groups are ``error`` and ``effect``. Then, with ``floor`` the noise energy per token::

    effect_to_noise = sqrt(effect / floor)          (an rms ratio)
    inconclusive  when effect_to_noise < min_snr    (the trained effect is below the noise floor: nothing to judge)
    pass          when error <= ERROR_TOL + NOISE_ALLOWANCE * floor / effect
    fail          otherwise

``ERROR_TOL`` (1/8) sits halfway to the smallest error a wrong adapter the check must catch leaves: half scale
(error 1/4). The others leave more: quarter scale 9/16, base 1, trained + equally large unrelated 1, unrelated
of equal size 2, negated 4. ``NOISE_ALLOWANCE`` (4) lets the numerics' energy run to 4x the floor (2x its rms) on a
step before a correct adapter could fail; the default ``min_snr`` (8) makes the pass bound at most 1/8 + 4/64 =
0.19, so half scale still fails. ``scripts/served_effect_sim.py`` measures both rates under heavy-tailed noise.

What it cannot catch: an adapter close to the trained one (a version one step stale, a tiny corruption): that is
what the per-sample version tags and the byte-exact slot check are for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional

import torch

ERROR_TOL = 1.0 / 16
NOISE_ALLOWANCE = 4.0
GROUPS = 8
PREFIX = "sglang_lora/"
ROLLOUT, OLD, REF, MASK = "rollout_log_probs", "old_log_probs", "ref_log_prob", "response_mask"
REQUIRED = (ROLLOUT, OLD, REF, MASK)
VERDICT_CODE = {"pass": 1.0, "inconclusive": 0.0, "fail": -1.0}
# what turns each key on in verl 0.9.1 (ray_trainer): named in the one warning when a key is missing
ENABLE = {
    ROLLOUT: "actor_rollout_ref.rollout.calculate_log_probs=True",
    REF: "a reference policy: actor_rollout_ref.actor.use_kl_loss=True (with actor_rollout_ref.actor.kl_loss_coef=0 "
         "it costs one forward without the adapter and leaves the loss unchanged) or algorithm.use_kl_in_reward=True",
    OLD: "the trainer's recompute of the log-probs (verl always does it unless "
         "algorithm.rollout_correction.bypass_mode=True)",
    MASK: "verl's response_mask (always set by ray_trainer)",
}
SETTINGS = "actor_rollout_ref.rollout.engine_kwargs.sglang_lora"


class ServedEffectMismatch(RuntimeError):
    """SGLang served a policy measurably different from the trained one; training on its samples is off-policy."""


@dataclass(frozen=True)
class ServedEffect:
    error: float
    """median over sequence groups of sum(D^2) / sum(E^2): 0 for the trained adapter without numerics noise."""
    bound: float
    """the largest ``error`` that passes: ERROR_TOL + NOISE_ALLOWANCE * floor / effect."""
    snr: float
    """effect-to-noise: sqrt(median group mean(E^2) / floor)."""
    ratio: float
    """the least-squares slope of (rollout - ref) on E: ~1 served right, ~0.25 at quarter scale, ~0 the base model."""
    noise_floor: float
    """the numerics' energy per token, measured where the trained adapter had no effect (nan: none yet)."""
    expected_rms: float
    noise_rms: float
    """rms of D = rollout - old."""
    tokens: int
    verdict: str
    reason: str = ""

    def metrics(self) -> dict[str, float]:
        return {
            PREFIX + "served_effect_error": self.error,
            PREFIX + "served_effect_bound": self.bound,
            PREFIX + "served_effect_snr": self.snr,
            PREFIX + "served_effect_ratio": self.ratio,
            PREFIX + "served_noise_floor_rms": math.sqrt(self.noise_floor),
            PREFIX + "expected_effect_rms": self.expected_rms,
            PREFIX + "served_noise_rms": self.noise_rms,
            PREFIX + "served_effect_verdict": VERDICT_CODE[self.verdict],
        }

    def summary(self) -> str:
        return (f"relative error {self.error:.3g} (pass <= {self.bound:.3g}), slope k={self.ratio:.4g}, "
                f"effect-to-noise {self.snr:.3g}, over {self.tokens} response tokens: expected effect rms(old - ref)="
                f"{self.expected_rms:.3g}, rollout-vs-trainer rms(rollout - old)={self.noise_rms:.3g}, noise floor "
                f"rms={math.sqrt(self.noise_floor):.3g}")

    def failure_message(self) -> str:
        if abs(self.ratio) < 0.15:
            likely = "k ~ 0: SGLang serves (mostly) the base model or an unrelated adapter"
        elif self.ratio < 0:
            likely = "k < 0: SGLang serves the adapter with its sign flipped"
        else:
            likely = "SGLang serves the adapter at another scale, partly, or together with something else"
        return (
            f"sglang_lora: the policy SGLang served is not the trained one: {self.summary()}. {likely}. Likely "
            f"causes: the LoRA scaling differs (rsLoRA: peft scales by lora_alpha/sqrt(r), SGLang by lora_alpha/r); "
            f"the adapter is partly loaded (layers or target modules missing on the server); another adapter is "
            f"named in the requests; or the rollout's log-probs are computed differently from the trainer's (e.g. "
            f"another temperature). What the check measures: docs/reliability.md (Served-effect check). "
            f"To train on anyway: {SETTINGS}.served_effect_check=warn."
        )


def missing_keys(keys: object) -> list[str]:
    """The required batch keys that are absent (``keys`` supports ``in``)."""
    return [k for k in REQUIRED if k not in keys]  # type: ignore[operator]


def missing_message(missing: list[str]) -> str:
    needs = "; ".join(f"{k}: {ENABLE[k]}" for k in missing)
    return (f"sglang_lora: served-effect check NOT RUNNING: the batch has no {', '.join(missing)}. It needs {needs}. "
            f"Without it nothing checks that the policy SGLang serves is the trained one (beyond the canary's "
            f"'some effect'). Turn them on, or silence this with {SETTINGS}.served_effect_check=off.")


@dataclass(frozen=True)
class _Batch:
    e: torch.Tensor  # [groups, ...] float64, zero outside the mask
    d: torch.Tensor
    s: torch.Tensor
    keep: torch.Tensor
    tokens: int


def _prepare(rollout: torch.Tensor, old: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor) -> _Batch | str:
    if not (rollout.shape == old.shape == ref.shape == mask.shape) or rollout.dim() != 2:
        return (f"shapes differ: {ROLLOUT} {tuple(rollout.shape)}, {OLD} {tuple(old.shape)}, {REF} {tuple(ref.shape)}, "
                f"{MASK} {tuple(mask.shape)}")
    rollout, old, ref = (t.detach().to("cpu", torch.float64) for t in (rollout, old, ref))
    keep = (mask.detach().to("cpu") > 0) & torch.isfinite(rollout) & torch.isfinite(old) & torch.isfinite(ref)
    zero = torch.zeros((), dtype=torch.float64)
    e = torch.where(keep, old - ref, zero)
    s = torch.where(keep, rollout - ref, zero)
    return _Batch(e, s - e, s, keep, int(keep.sum()))


def _group_sums(x: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per group (sequences dealt round-robin into up to ``GROUPS``): sum of x^2 and token count, groups with tokens."""
    rows = keep.any(dim=1)
    x2, n = (x * x).sum(dim=1)[rows], keep.sum(dim=1)[rows].to(torch.float64)
    g = min(GROUPS, int(rows.sum()))
    if g == 0:
        return x2[:0], n[:0]
    index = torch.arange(x2.numel()) % g
    return (torch.zeros(g, dtype=torch.float64).index_add_(0, index, x2),
            torch.zeros(g, dtype=torch.float64).index_add_(0, index, n))


def noise_energy(rollout: torch.Tensor, old: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor) -> Optional[float]:
    """The numerics' energy per token (median over groups of mean(D^2)) on a batch where the trained adapter has no
    effect (old == ref on every token); None on any other batch."""
    return _noise_energy(_prepare(rollout, old, ref, mask))


def _noise_energy(b: _Batch | str) -> Optional[float]:
    if isinstance(b, str) or b.tokens == 0 or bool((b.e != 0).any()) or not bool((b.d != 0).any()):
        return None
    d2, n = _group_sums(b.d, b.keep)
    return float((d2 / n).median())


def served_effect(rollout: torch.Tensor, old: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor,
                  noise_floor: Optional[float], min_snr: float) -> ServedEffect:
    """The verdict for one batch of [batch, response] log-probs, given the noise floor (energy per token)."""
    return _judge(_prepare(rollout, old, ref, mask), noise_floor, min_snr)


def _judge(b: _Batch | str, noise_floor: Optional[float], min_snr: float) -> ServedEffect:
    floor = math.nan if noise_floor is None else float(noise_floor)
    if isinstance(b, str):
        return ServedEffect(math.nan, math.nan, 0.0, math.nan, floor, math.nan, math.nan, 0, "inconclusive", b)
    n = max(b.tokens, 1)
    e2_all, d2_all = float((b.e * b.e).sum()), float((b.d * b.d).sum())
    expected_rms, noise_rms = math.sqrt(e2_all / n), math.sqrt(d2_all / n)
    ratio = float((b.s * b.e).sum()) / e2_all if e2_all else math.nan

    def result(error: float, bound: float, snr: float, verdict: str, reason: str = "") -> ServedEffect:
        return ServedEffect(error, bound, snr, ratio, floor, expected_rms, noise_rms, b.tokens, verdict, reason)

    if b.tokens == 0:
        return result(math.nan, math.nan, 0.0, "inconclusive", "no response token under the mask")
    if not bool((b.d != 0).any()):
        return result(math.nan, math.nan, 0.0, "inconclusive", f"{OLD} equal {ROLLOUT} on every token "
                      "(algorithm.rollout_correction.bypass_mode=True copies them): nothing to compare")
    if e2_all == 0.0:
        return result(math.nan, math.nan, 0.0, "inconclusive", "the trained adapter has no effect (old == ref: "
                      "lora_B is zero before the first update); this step measures the noise floor")
    e2, count = _group_sums(b.e, b.keep)
    d2, _ = _group_sums(b.d, b.keep)
    effect = float((e2 / count).median())
    error = float((d2 / e2.clamp_min(1e-300)).median())
    if not floor > 0:
        return result(error, math.nan, math.nan, "inconclusive", "no noise floor: the run had no step where the "
                      f"trained adapter had no effect; set {SETTINGS}.served_effect_noise_floor")
    snr = math.sqrt(effect / floor)
    bound = ERROR_TOL + NOISE_ALLOWANCE * floor / effect if effect > 0 else math.inf
    if snr < min_snr:
        return result(error, bound, snr, "inconclusive", f"the trained adapter's effect is not above the noise "
                      f"floor (effect-to-noise {snr:.3g} < served_effect_min_snr={min_snr:g})")
    return result(error, bound, snr, "pass" if error <= bound else "fail")


class ServedEffectCheck:
    """The check across a run's steps: keeps the noise floor from the zero-effect steps, judges the others, and
    turns a run of inconclusive steps after the effect rose above the floor into an error."""

    def __init__(self, min_snr: float, noise_floor: float = 0.0, max_inconclusive: int = 3) -> None:
        self.min_snr = min_snr
        self.floor: Optional[float] = noise_floor if noise_floor > 0 else None
        self.fixed = noise_floor > 0
        self.max_inconclusive = max_inconclusive
        self.conclusive_seen = False
        self.inconclusive_run = 0

    def step(self, tensors: Mapping[str, torch.Tensor]) -> ServedEffect:
        batch = _prepare(tensors[ROLLOUT], tensors[OLD], tensors[REF], tensors[MASK])  # once for both
        measured = _noise_energy(batch)
        if measured is not None and not self.fixed:
            self.floor = measured if self.floor is None else max(self.floor, measured)
        result = _judge(batch, self.floor, self.min_snr)
        if result.verdict != "inconclusive":
            self.conclusive_seen, self.inconclusive_run = True, 0
        elif measured is None:
            self.inconclusive_run += 1
        return result

    @property
    def stuck(self) -> bool:
        """Inconclusive on ``max_inconclusive`` steps in a row after a conclusive one: the effect fell back under the
        noise, which a training adapter does not do (a served policy drifting towards the base looks like this)."""
        return self.conclusive_seen and self.inconclusive_run >= self.max_inconclusive
