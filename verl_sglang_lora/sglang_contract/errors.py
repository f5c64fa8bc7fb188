"""SGLang failures with their body and, for the cryptic ones of the failure chain, the cause and the fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# (substring SGLang or torch prints, cause, fix). Order matters: the first match explains the error.
KNOWN_ERRORS: tuple[tuple[str, str, str], ...] = (
    (
        "get_hidden_dim not implemented for",
        "SGLang received lora_target_modules as a bare string and split it into characters (set('all-linear'))",
        "pass a list, or `all` for PEFT's all-linear; verl-sglang-lora does this at launch -- check that "
        "actor_rollout_ref.rollout.name=sglang_lora and that engine_kwargs.sglang does not override lora_target_modules",
    ),
    (
        "incompatible with the current LoRA memory pool configuration",
        "the adapter's rank exceeds --max-lora-rank, or its target_modules are not all in --lora-target-modules "
        "(a target_modules string torn into characters by list() produces exactly this)",
        "keep actor_rollout_ref.model.lora_rank (or model.lora.rank) <= max_lora_rank and target_modules "
        "`all-linear` or a list; the adapter config must keep 'all-linear' as a string",
    ),
    (
        "KeyError: 'weights'",
        "resume_memory_occupation(tags=['weights']) was sent although 'weights' was never released "
        "(adapter mode keeps the base weights resident)",
        "route sleep/wake through one tag ledger; verl-sglang-lora's server drops tags that were not released",
    ),
    (
        "_modify_tuple",
        "a CPU tensor reached CUDA-IPC serialization (SGLang's torch patch expects the device slot of a CUDA "
        "tensor's reduce tuple)",
        "move each tensor to the GPU right before serialization (verl-sglang-lora does this per tensor)",
    ),
    (
        "asdict() should be called on dataclass instances",
        "the adapter config was already a dict (LoraConfig.to_dict()) and dataclasses.asdict() was called on it",
        "pass the dict through; verl-sglang-lora normalizes dicts and LoraConfig objects alike",
    ),
    (
        "Unexpected keyword argument",
        "the request names a field the installed SGLang's struct does not declare (serialized_tensors vs "
        "serialized_named_tensors changed between 0.5.12 and 0.5.18)",
        "build the request from the installed struct's fields (verl-sglang-lora.sglang_contract.lora_request)",
    ),
    (
        ".base_layer.",
        "a weight name carries vLLM's LoRA wrapper level '.base_layer.', which SGLang's model does not have",
        "strip '.base_layer.' before sending (verl-sglang-lora resolves names against the checkpoint)",
    ),
)


def explain(text: str) -> str | None:
    """'cause: ...; fix: ...' for a known failure text, else None (matched case-insensitively: msgspec says
    'Unexpected keyword argument', a dataclass '__init__() got an unexpected keyword argument')."""
    lowered = text.lower()
    for needle, cause, fix in KNOWN_ERRORS:
        if needle.lower() in lowered:
            return f"cause: {cause}. fix: {fix}."
    return None


@dataclass
class SGLangRequestError(RuntimeError):
    """An SGLang HTTP call failed; carries status, endpoint and the full response body."""

    endpoint: str
    status: int | None
    body: str
    retryable: bool = False

    def __post_init__(self) -> None:
        super().__init__(str(self))

    def __str__(self) -> str:
        status = "no response" if self.status is None else f"HTTP {self.status}"
        msg = f"SGLang {self.endpoint} failed ({status}): {self.body}"
        hint = explain(self.body)
        return f"{msg}\n  {hint}" if hint else msg


def request_outcome(result: Any) -> tuple[bool, str]:
    """(success, message) of a tokenizer-manager answer: a ``(success, message)`` tuple (weight updates) or an output
    struct with ``success`` / ``error_message`` (adapter loads and unloads; without ``error_message`` the answer
    itself is the message); an answer without ``success`` counts as success."""
    if isinstance(result, tuple):
        return result[0] is not False, str(result[1]) if len(result) > 1 else ""
    return getattr(result, "success", True) is not False, str(getattr(result, "error_message", result))
