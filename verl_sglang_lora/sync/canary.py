"""Post-sync canary: prove the served policy is the one the trainer just produced.

After each adapter load the server scores a fixed prompt with and without the new adapter. An adapter whose
B matrices are non-zero must change the log-probs; an all-zero adapter (LoRA's initial state) must not. A
served policy that contradicts the pushed tensors -- a request without ``lora_path``, a stale adapter, names
SGLang silently ignored -- fails loudly instead of training on the wrong samples.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

ZERO_ADAPTER_TOLERANCE = 1e-3


class CanaryError(RuntimeError):
    """The served policy is not the trained one."""


def canary_prompt_ids(model_config: Any, length: int = 16) -> list[int]:
    """A fixed, tokenizer-independent prompt: evenly spaced token ids below the vocabulary size."""
    hf = getattr(model_config, "hf_config", None)
    vocab = int(getattr(hf, "vocab_size", 0) or 1000)
    step = max(1, vocab // (length + 1))
    return [(i + 1) * step % vocab for i in range(length)]


def adapter_is_zero(tensors: Mapping[str, torch.Tensor]) -> bool:
    """LoRA's delta is B @ A; with every B zero the adapter is a no-op."""
    b = [t for n, t in tensors.items() if ".lora_B." in n]
    return bool(b) and all(not torch.any(t) for t in b)


def judge_canary(result: Mapping[str, float], tensors: Mapping[str, torch.Tensor], min_delta: float, name: str) -> None:
    diff = float(result["max_abs_diff"])
    if adapter_is_zero(tensors):
        if diff > ZERO_ADAPTER_TOLERANCE:
            raise CanaryError(
                f"canary: adapter {name} has all-zero lora_B yet changed the log-probs by {diff:.3g}; SGLang is "
                "serving something other than the pushed adapter"
            )
        return
    if diff <= min_delta:
        raise CanaryError(
            f"canary: adapter {name} (non-zero lora_B) did not change the served log-probs (max |delta| = {diff:.3g} "
            f"<= {min_delta}); the served policy is not the trained one -- adapter not applied, wrong names, or "
            "target modules not served. Set engine_kwargs.sglang_lora.canary=false only to debug."
        )
