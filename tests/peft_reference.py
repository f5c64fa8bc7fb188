"""peft as the reference for served log-probs (tests/gpu/test_served_matches_peft.py; checked on CPU by
tests/test_peft_reference_on_cpu.py).

A random but deterministic LoRA adapter on a Hugging Face causal LM, per-token log-probs of a response, the
wrong variants of an adapter the served comparison must reject, and the tolerance of that comparison.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterable, Iterator, Mapping, Sequence

import torch

# tolerance = TOL_MULTIPLE * (served-vs-reference gap of the base model on the same tokens) + TOL_FLOOR;
# the derivation is in tests/gpu/test_served_matches_peft.py.
TOL_MULTIPLE = 4.0
TOL_FLOOR = 2.0 ** -7
# an adapter must move the reference log-probs by at least this many tolerances, or the comparison proves nothing
MIN_EFFECT_IN_TOLERANCES = 10.0

# the compared adapter and tokens (rank: the GPU suite's server rank)
ALPHA_PER_RANK = 2  # scaling lora_alpha / r = 2
B_STD = 0.1  # lora_B ~ N(0, 0.1^2): moves the tiny Qwen3's log-probs by ~1 nat, bf16 keeps them within ~1e-2
ADAPTER_SEED = 1
TOKEN_SEED = 0
PROMPT_LEN = 32
RESPONSE_LEN = 32


def tolerance(base_gap: float) -> float:
    """The largest served-vs-reference gap accepted with an adapter, given the gap measured without one."""
    if not math.isfinite(base_gap) or base_gap < 0:
        raise ValueError(f"base gap must be a finite non-negative number, got {base_gap}")
    return TOL_MULTIPLE * base_gap + TOL_FLOOR


def token_sequence(vocab_size: int, length: int, seed: int = 0, low: int = 5) -> list[int]:
    """Deterministic token ids in ``[low, vocab_size)`` (drawn on CPU: the same on every host)."""
    if not 0 <= low < vocab_size:
        raise ValueError(f"no token ids in [{low}, {vocab_size})")
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(low, vocab_size, (length,), generator=gen).tolist()


@contextlib.contextmanager
def full_fp32_matmul() -> Iterator[None]:
    """float32 matmuls in full precision (no TF32) while the reference runs, whatever was set globally."""
    precision = torch.get_float32_matmul_precision()
    cudnn_tf32 = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.cudnn.allow_tf32 = cudnn_tf32


def response_logprobs(model: torch.nn.Module, input_ids: Sequence[int], response_len: int) -> list[float]:
    """log p(token_t | tokens_<t) for the last ``response_len`` tokens of ``input_ids``, one causal forward.

    Position t's logits predict token t + 1, so the response's log-probs come from the positions just before it.
    """
    if not 0 < response_len < len(input_ids):
        raise ValueError(f"response_len must be in [1, {len(input_ids) - 1}], got {response_len}")
    device = next(model.parameters()).device
    ids = torch.tensor([list(input_ids)], dtype=torch.long, device=device)
    with torch.no_grad(), full_fp32_matmul():
        logits = model(input_ids=ids).logits[0].float()
    logprobs = torch.log_softmax(logits[:-1], dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
    return logprobs[-response_len:].double().cpu().tolist()


def fill_lora(model: torch.nn.Module, seed: int, b_std: float) -> int:
    """Overwrite every lora_A / lora_B of a peft model with deterministic non-zero values; returns the count.

    A ~ U(-1/sqrt(in), 1/sqrt(in)) (peft's own init range, so ``A x`` stays O(1) for normalised ``x``) and
    B ~ N(0, b_std^2) instead of peft's zeros, drawn on CPU in name order: the same adapter on any device.
    """
    gen = torch.Generator().manual_seed(seed)
    count = 0
    for name, param in sorted(model.named_parameters(), key=lambda item: item[0]):
        if ".lora_A." in name:
            value = (torch.rand(param.shape, generator=gen, dtype=torch.float32) * 2 - 1) / math.sqrt(param.shape[1])
        elif ".lora_B." in name:
            value = torch.randn(param.shape, generator=gen, dtype=torch.float32) * b_std
        else:
            continue
        with torch.no_grad():
            param.copy_(value.to(device=param.device, dtype=param.dtype))
        count += 1
    return count


def random_peft_lora(model: torch.nn.Module, *, rank: int, alpha: float, seed: int, b_std: float,
                     autocast_adapter_dtype: bool = True) -> Any:
    """``model`` wrapped by peft with an all-linear LoRA (no dropout) whose A and B are :func:`fill_lora`'s.

    ``autocast_adapter_dtype=False`` keeps the adapter in a bf16 model's dtype (peft upcasts it to float32 by
    default), as a bf16 engine holds it.
    """
    import peft

    config = peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules="all-linear", lora_dropout=0.0)
    extra = {} if autocast_adapter_dtype else {"autocast_adapter_dtype": False}  # peft's default is True
    lora = peft.get_peft_model(model, config, **extra)
    if fill_lora(lora, seed, b_std) == 0:
        raise RuntimeError("peft created no LoRA layers for target_modules='all-linear'")
    return lora.eval()


def lora_state(lora: Any) -> dict[str, torch.Tensor]:
    """The adapter's tensors under peft's saved names (what a trainer hands to the weight sync)."""
    import peft

    return {name: t.detach() for name, t in peft.get_peft_model_state_dict(lora).items()}


def negated_b(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The same adapter with every lora_B negated: its weight delta is the correct one's, sign-flipped."""
    return {name: (-t if ".lora_B." in name else t) for name, t in tensors.items()}


def mis_scaled(config: Mapping[str, Any], factor: float = 0.5) -> dict[str, Any]:
    """The same adapter config with ``lora_alpha`` times ``factor`` (the served scaling lora_alpha/r follows)."""
    return {**config, "lora_alpha": float(config["lora_alpha"]) * factor}


def max_gap(a: Iterable[float], b: Iterable[float]) -> float:
    """max |a_t - b_t| over two equally long sequences of log-probs."""
    a, b = list(a), list(b)
    if len(a) != len(b) or not a:
        raise ValueError(f"need two non-empty sequences of one length, got {len(a)} and {len(b)}")
    return max(abs(float(x) - float(y)) for x, y in zip(a, b))
