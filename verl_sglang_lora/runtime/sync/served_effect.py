"""Is the policy SGLang served the trained one? Measured on every step's batch, from log-probs verl already has.

Per response token verl holds three log-probs of the same sampled token: ``rollout`` (what SGLang served),
``old`` (the trainer's recompute with the adapter) and ``ref`` (the trainer with the adapter disabled: the base).
With E = old - ref (the adapter's expected effect) and S = rollout - ref (its served effect), the served-effect
ratio is the least-squares slope of S on E over the masked tokens::

    k = sum(S * E) / sum(E * E)

k is 1 when SGLang serves the trained adapter at the trained scale, ~0.25 when it serves it at a quarter of its
scale, ~0 when it serves the base model, and off 1 when part of the adapter (some layers) or another version is
served, because S then points elsewhere than E. Since S = E + D with D = rollout - old, ``k - 1 = sum(D*E)/sum(E*E)``:
the check asks whether the rollout-vs-trainer gap D carries the adapter's effect, or only bf16 numerics.

Tolerance. Write S = k E + r, r the part of the served change E does not explain (the two engines' bf16 numerics
when the right adapter is served). Three terms, each bounding one way k can be off with the right adapter served:

- sampling: the slope's standard error, with the sequences as independent clusters (tokens of one sequence share a
  context, so their numerics are not independent; the sandwich form needs no assumption on how noise varies)::

      se(k) = sqrt(G/(G-1) * sum_seq (sum_t E_t r_t)^2) / sum(E^2),   counted Z = 4 times (~1 false alarm in 30,000)

- dilution: E is measured with the trainer's own numerical noise in ``old``, which pulls a least-squares slope
  towards 0 by var(that noise) / mean(E^2) (errors in the regressor); with the engines' errors independent per
  token, that variance is at most mean(r^2), so the allowance is ``b = sum(r^2) / sum(E^2)``;
- scale: u = 2^-8 is bf16's unit roundoff; each engine rounds the adapter's contribution to bf16 about four times
  (x A, (x A) B, the scaling, the add into the residual stream), each off by at most u relatively, so a correctly
  served adapter's effect may differ in scale by up to 8u = 2^-5 (~3 %) with no error anywhere.

``tol = Z * se + b + 8u``. A wrong scale (rsLoRA's lora_alpha/sqrt(r) served as lora_alpha/r is off by sqrt(r): x4
at r=16), a half-loaded adapter or the base model are off by 0.5 or more.

Inconclusive. ``snr = 1 / (Z * se + b)``: the expected effect over what the noise alone can do to k (~ the
per-token effect-to-noise ratio squared, or times sqrt(tokens), whichever binds). Below ``min_snr`` the batch cannot
tell the trained adapter from a wrong one (step 1, where LoRA B is zero and E is 0): inconclusive, not fail. The
default 3 keeps a conclusive tolerance under ~0.36, so the base model (k=0), a quarter or half scale always fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import torch

BF16_UNIT_ROUNDOFF = 2.0 ** -8
SCALE_FLOOR = 8 * BF16_UNIT_ROUNDOFF
Z = 4.0
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
SETTINGS = "actor_rollout_ref.rollout.engine_kwargs.sglang_lora.served_effect_check"


class ServedEffectMismatch(RuntimeError):
    """SGLang served a policy measurably different from the trained one; training on its samples is off-policy."""


@dataclass(frozen=True)
class ServedEffect:
    ratio: float
    """k = sum(S E) / sum(E E); 1 when the trained adapter is served."""
    tol: float
    """|k - 1| allowed: Z * se(k) + dilution + 8u."""
    snr: float
    """1 / (Z * se(k) + dilution): how far the expected effect stands above what noise can do to k."""
    expected_rms: float
    """rms of E = old - ref over the masked tokens."""
    noise_rms: float
    """rms of D = rollout - old (bf16 numerics when the check passes)."""
    tokens: int
    verdict: str
    reason: str = ""

    def metrics(self) -> dict[str, float]:
        return {
            PREFIX + "served_effect_ratio": self.ratio,
            PREFIX + "served_effect_tol": self.tol,
            PREFIX + "served_effect_snr": self.snr,
            PREFIX + "expected_effect_rms": self.expected_rms,
            PREFIX + "served_noise_rms": self.noise_rms,
            PREFIX + "served_effect_verdict": VERDICT_CODE[self.verdict],
        }

    def summary(self) -> str:
        return (f"served-effect ratio k={self.ratio:.4g} (expected 1 +- {self.tol:.3g}), effect-to-noise "
                f"{self.snr:.3g}, over {self.tokens} response tokens: expected effect rms(old - ref)="
                f"{self.expected_rms:.3g}, rollout-vs-trainer rms(rollout - old)={self.noise_rms:.3g}")

    def failure_message(self) -> str:
        if abs(self.ratio) <= self.tol:
            likely = "k ~ 0: SGLang serves the base model (adapter not applied, not activated, or not named in " \
                     "the requests)"
        else:
            likely = "k != 1: SGLang serves a different adapter"
        return (
            f"sglang_lora: the policy SGLang served is not the trained one: {self.summary()}. {likely}. Likely "
            f"causes: the LoRA scaling differs (rsLoRA: peft scales by lora_alpha/sqrt(r), SGLang by lora_alpha/r, "
            f"a factor sqrt(r); a different lora_alpha); the adapter is partly loaded (layers or target modules "
            f"missing on the server); a stale adapter version is served; or the rollout's log-probs are computed "
            f"differently from the trainer's (e.g. another temperature). See docs/reliability.md (Served-effect "
            f"check). To train on anyway: {SETTINGS}=warn."
        )


def missing_keys(keys: object) -> list[str]:
    """The required batch keys that are absent (``keys`` supports ``in``)."""
    return [k for k in REQUIRED if k not in keys]  # type: ignore[operator]


def missing_message(missing: list[str]) -> str:
    needs = "; ".join(f"{k}: {ENABLE[k]}" for k in missing)
    return (f"sglang_lora: served-effect check NOT RUNNING: the batch has no {', '.join(missing)}. It needs {needs}. "
            f"Without it nothing checks that the policy SGLang serves is the trained one (beyond the canary's "
            f"'some effect'). Turn them on, or silence this with {SETTINGS}=off.")


def _inconclusive(reason: str, tokens: int, expected_rms: float, noise_rms: float) -> ServedEffect:
    return ServedEffect(math.nan, math.nan, 0.0, expected_rms, noise_rms, tokens, "inconclusive", reason)


def served_effect(rollout: torch.Tensor, old: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor,
                  min_snr: float) -> ServedEffect:
    """The verdict for one batch of [batch, response] log-probs; rows are the independent clusters."""
    if not (rollout.shape == old.shape == ref.shape == mask.shape) or rollout.dim() != 2:
        return _inconclusive(f"shapes differ: {ROLLOUT} {tuple(rollout.shape)}, {OLD} {tuple(old.shape)}, "
                             f"{REF} {tuple(ref.shape)}, {MASK} {tuple(mask.shape)}", 0, math.nan, math.nan)
    m = mask.detach().to("cpu", torch.float64) > 0
    rollout, old, ref = (t.detach().to("cpu", torch.float64) for t in (rollout, old, ref))
    keep = m & torch.isfinite(rollout) & torch.isfinite(old) & torch.isfinite(ref)
    n = int(keep.sum())
    zero = torch.zeros((), dtype=torch.float64)
    e = torch.where(keep, old - ref, zero)
    s = torch.where(keep, rollout - ref, zero)
    d = s - e
    e2 = float((e * e).sum())
    expected_rms = math.sqrt(e2 / n) if n else math.nan
    noise_rms = math.sqrt(float((d * d).sum()) / n) if n else math.nan
    if n == 0:
        return _inconclusive("no response token under the mask", 0, expected_rms, noise_rms)
    if not bool((d != 0).any()):
        return _inconclusive(f"{OLD} equal {ROLLOUT} on every token (algorithm.rollout_correction.bypass_mode=True "
                             f"copies them): nothing to compare", n, expected_rms, noise_rms)
    if e2 == 0.0:
        return _inconclusive("the adapter has no effect in the trainer (old == ref: lora_B is zero before the "
                             "first update)", n, expected_rms, noise_rms)
    k = float((s * e).sum()) / e2
    r = torch.where(keep, s - k * e, zero)
    per_seq = (e * r).sum(dim=1)[keep.any(dim=1)]
    groups = per_seq.numel()
    var_num = float((per_seq * per_seq).sum()) * (groups / (groups - 1) if groups > 1 else 1.0)
    noise_hold = Z * math.sqrt(var_num) / e2 + float((r * r).sum()) / e2
    snr = math.inf if noise_hold == 0.0 else 1.0 / noise_hold
    tol = noise_hold + SCALE_FLOOR
    if snr < min_snr:
        return ServedEffect(k, tol, snr, expected_rms, noise_rms, n, "inconclusive",
                            f"the adapter's effect is not above the noise (effect-to-noise {snr:.3g} < "
                            f"served_effect_min_snr={min_snr:g})")
    return ServedEffect(k, tol, snr, expected_rms, noise_rms, n, "pass" if abs(k - 1.0) <= tol else "fail")


def check_batch(tensors: Mapping[str, torch.Tensor], min_snr: float) -> ServedEffect:
    """:func:`served_effect` on a batch's tensors (verl's ``DataProto.batch``), keyed by verl's names."""
    return served_effect(tensors[ROLLOUT], tensors[OLD], tensors[REF], tensors[MASK], min_snr)
