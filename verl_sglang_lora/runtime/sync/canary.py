"""Post-sync canary: prove the served policy is the one the trainer just produced.

After each adapter load the server scores a fixed prompt with and without the new adapter -- as soon as its
KV cache is resident again (during a hybrid sync it is released, and a generate then would crash SGLang's
scheduler). An adapter whose
B matrices are non-zero must change the log-probs; an all-zero adapter (LoRA's initial state) must not. A
served policy that contradicts the pushed tensors -- a request without ``lora_path``, a stale adapter, names
SGLang silently ignored -- fails loudly instead of training on the wrong samples.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

import torch

from verl_sglang_lora.sglang_contract.weight_names import LORA_RE

ZERO_ADAPTER_TOLERANCE = 1e-3
# Below this bound on ||B @ A|| the change to bf16 activations may round away; the canary then only warns.
INCONCLUSIVE_EFFECT = 1e-2


class CanaryError(RuntimeError):
    """The served policy is not the trained one."""


def canary_prompt_ids(model_config: Any, length: int = 16) -> list[int]:
    """A fixed, tokenizer-independent prompt: evenly spaced token ids below the vocabulary size."""
    hf = getattr(model_config, "hf_config", None)
    vocab = int(getattr(hf, "vocab_size", 0) or 1000)
    step = max(1, vocab // (length + 1))
    return [(i + 1) * step % vocab for i in range(length)]


def lora_pair_norms(tensors: Mapping[str, torch.Tensor]) -> dict[str, tuple[float, float]]:
    """(||A||, ||B||) per LoRA module, computed on the tensors' device with a single host sync."""
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for name, t in tensors.items():
        m = LORA_RE.match(name)
        if m:
            pairs.setdefault(m.group("module_path"), {})[m.group("ab")] = t
    modules = sorted(p for p, ab in pairs.items() if len(ab) == 2)
    if not modules:
        return {}
    norms = [torch.linalg.vector_norm(pairs[p][ab].float()) for p in modules for ab in ("A", "B")]
    values = torch.stack([n.to(norms[0].device) for n in norms]).cpu().tolist()
    return {p: (values[2 * i], values[2 * i + 1]) for i, p in enumerate(modules)}


@dataclass(frozen=True)
class CanaryExpectation:
    """What the pushed tensors imply for the served log-probs (computed where the tensors are: the client)."""

    zero: bool
    effect_bound: float
    min_delta: float = 0.0

    @classmethod
    def of(cls, tensors: Mapping[str, torch.Tensor], scaling: float, min_delta: float = 0.0) -> "CanaryExpectation":
        """LoRA's delta is scaling * B @ A: all B zero means a no-op; ||scaling|| ||A|| ||B|| bounds ||delta W||."""
        norms = lora_pair_norms(tensors)
        zero = bool(norms) and all(b == 0.0 for _, b in norms.values())
        bound = max((abs(scaling) * a * b for a, b in norms.values()), default=0.0)
        return cls(zero, bound, min_delta)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge_canary(result: Mapping[str, float], expect: CanaryExpectation, name: str) -> str:
    """'pass', or 'inconclusive' when the adapter is too small to move bf16 log-probs; raises on a contradiction."""
    diff = float(result["max_abs_diff"])
    if expect.zero:
        if diff > ZERO_ADAPTER_TOLERANCE:
            raise CanaryError(
                f"canary: adapter {name} has all-zero lora_B yet changed the log-probs by {diff:.3g}; SGLang is "
                "serving something other than the pushed adapter"
            )
        return "pass"
    if diff > expect.min_delta:
        return "pass"
    if expect.effect_bound < INCONCLUSIVE_EFFECT:
        return "inconclusive"  # early in training the delta can sit below the served precision
    raise CanaryError(
        f"canary: adapter {name} (non-zero lora_B, weight delta up to {expect.effect_bound:.3g}) did not change the "
        f"served log-probs (max |delta| = {diff:.3g} <= {expect.min_delta}); the served policy is not the trained "
        "one -- adapter not applied, wrong names, or target modules not served. Set "
        "engine_kwargs.sglang_lora.canary=false only to debug."
    )
