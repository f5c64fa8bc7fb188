"""``target_modules``, the one owner: verl's setting as SGLang's launch flag and as the adapter config's field.

Both views come from one normalisation, so the launch and every adapter load agree:
- PEFT's ``all-linear`` stays a shorthand: SGLang's sentinel ``all`` at launch (SGLang expands it for the served
  model), the string itself in the adapter config where the installed SGLang reads it (0.5.12+), else the
  module names the adapter's tensors carry;
- a list is reduced to module leaves (PEFT matches the last path segment) and Megatron-core names become the HF
  projections SGLang knows, in both views;
- SGLang runs ``set(lora_target_modules)``: a bare string would be torn into characters (``get_hidden_dim not
  implemented for i``), so the launch value is always a list; any other string is a regex over the whole module
  path, which SGLang cannot serve, and is refused.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any, Iterable

ALL_SENTINEL = "all"
PEFT_ALL_LINEAR = "all-linear"
TARGET_MODULES_SETTING = "actor_rollout_ref.model.target_modules (Megatron: actor_rollout_ref.model.lora.target_modules)"

# Megatron-core module names -> the HF projection names SGLang knows (facts of both code bases).
MEGATRON_TO_HF = {
    "linear_qkv": ("q_proj", "k_proj", "v_proj"),
    "linear_proj": ("o_proj",),
    "linear_fc1": ("gate_proj", "up_proj"),
    "linear_fc2": ("down_proj",),
}
# What PEFT's all-linear selects in a decoder LM (every linear layer but the output head), in HF names.
ALL_LINEAR_HF = ("down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj")
# Input embedding / output head under the names PEFT, SGLang's normalizer and Megatron use for them. PEFT's LoRA on an
# embedding is ``lora_embedding_A/B`` (not a ``lora_A/B`` pair); neither kind is carried by the adapter sync.
EMBEDDING_TARGETS = frozenset(
    {"embed_tokens", "lm_head", "output_layer", "word_embeddings", "unembed_tokens", "vocab_emb", "wte"}
)
# Attention projections (HF and Megatron names): the only targets served on a mixture-of-experts model.
ATTENTION_TARGETS = frozenset(
    {"q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "linear_qkv", "linear_proj", "linear_q", "linear_k", "linear_v"}
)


class LoRAConfigError(ValueError):
    """A LoRA setting SGLang cannot serve; the message names the setting and the fix."""


def supported_target_modules() -> list[str] | None:
    """SGLang's own list of LoRA-capable module names, or None when SGLang is not importable here."""
    try:
        from sglang.srt.utils.common import SUPPORTED_LORA_TARGET_MODULES
    except Exception:  # a half-installed SGLang raises KeyError/AttributeError on re-import, not only ImportError
        return None
    return list(SUPPORTED_LORA_TARGET_MODULES)


# The installed SGLang's MoE LoRA code (0.5.12 added it: expert LoRA buffers in the memory pool, its fused-MoE LoRA
# runner); its presence is read from the package's files, without importing SGLang.
EXPERT_LORA_MODULE = "srt/lora/lora_moe_runners.py"


def sglang_serves_expert_lora(sglang_dir: str | Path | None = None) -> bool | None:
    """Whether the SGLang package at ``sglang_dir`` (default: the installed one) carries MoE LoRA code; None when
    there is no SGLang to ask."""
    if sglang_dir is None:
        try:
            spec = importlib.util.find_spec("sglang")
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        sglang_dir = next(iter(spec.submodule_search_locations))
    return (Path(sglang_dir) / EXPERT_LORA_MODULE).is_file()


@functools.lru_cache(maxsize=None)
def sglang_reads_all_linear_string() -> bool:
    """Whether the installed SGLang's adapter normalizer understands the string ``all-linear``.

    SGLang 0.5.8 iterates a string character by character (the adapter is then refused as incompatible with the
    memory pool); 0.5.12+ map it to the sentinel ``{"all"}``. Asked of SGLang itself, not of a version table.
    """
    try:
        from sglang.srt.lora.utils import get_normalized_target_modules
    except Exception:  # no SGLang here (e.g. a CPU preflight): keep verl's string
        return True
    try:
        return get_normalized_target_modules(PEFT_ALL_LINEAR) == {ALL_SENTINEL}
    except Exception:
        return False


def hf_leaves(target_modules: Any) -> list[str] | None:
    """The module leaves a setting names, Megatron names mapped to HF; None for the all-linear shorthand."""
    if target_modules is None:
        return None
    if isinstance(target_modules, str):
        if target_modules in (PEFT_ALL_LINEAR, ALL_SENTINEL):
            return None
        raise LoRAConfigError(
            f"{TARGET_MODULES_SETTING}={target_modules!r} is a string, which PEFT treats as a regex over the full "
            "module path; SGLang cannot serve a regex target. Fix: set it to `all-linear`, or to a list such as "
            "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]."
        )
    try:
        names = list(target_modules)
    except TypeError:
        raise LoRAConfigError(f"{TARGET_MODULES_SETTING} must be `all-linear` or a list of module names, got {target_modules!r}")
    out: list[str] = []
    for name in names:
        if not isinstance(name, str):
            raise LoRAConfigError(f"{TARGET_MODULES_SETTING} entries must be strings, got {name!r}")
        leaf = name.rsplit(".", 1)[-1]  # PEFT matches the last path segment ("*.layers.0.*.linear_qkv" too)
        for mapped in MEGATRON_TO_HF.get(leaf, (leaf,)):
            if mapped not in out:
                out.append(mapped)
    if PEFT_ALL_LINEAR in out or ALL_SENTINEL in out:
        if len(out) > 1:
            raise LoRAConfigError(f"{TARGET_MODULES_SETTING}: `all-linear` must be the only entry, got {names}")
        return None
    return out


def adapter_target_problems(target_modules: Any, setting: str = TARGET_MODULES_SETTING) -> list[str]:
    """Targets no adapter sync can serve, each named with ``setting`` and the fix (adapter mode only: the merged
    sync sends whole weights, where peft has already folded an embedding or output-head LoRA in)."""
    if target_modules is None:
        return []
    if isinstance(target_modules, str):  # all-linear (never the embeddings or the head), or a regex
        try:
            hf_leaves(target_modules)
        except LoRAConfigError as exc:
            return [str(exc).replace(TARGET_MODULES_SETTING, setting)]
        return []
    try:
        names = [str(n) for n in target_modules]
    except TypeError:
        return []
    if not names:
        return [
            f"{setting}=[] names no module: PEFT refuses it (NoMatchingPeftModuleError) on the training GPUs and "
            "SGLang would launch with no LoRA target. Fix: set it to `all-linear`, or list the modules, e.g. "
            "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj] (Megatron: [linear_qkv,linear_proj,"
            "linear_fc1,linear_fc2])."
        ]
    embedding = sorted({n.rsplit(".", 1)[-1] for n in names} & EMBEDDING_TARGETS)
    if embedding:
        return [
            f"{setting} has {embedding}: the adapter sync serves LoRA on the decoder layers' linear projections "
            "only (PEFT trains an embedding as lora_embedding_A/B, which it does not carry; an output-head adapter is "
            "not validated against SGLang's vocab-parallel head, and a tied head has no weight of its own). Fix: drop "
            f"{embedding} from target_modules (`all-linear` never includes them), or serve merged weights with "
            "actor_rollout_ref.model.lora.merge=True."
        ]
    return []


def sglang_target_modules(target_modules: Any, supported: Iterable[str] | None = None) -> list[str]:
    """The launch view: verl's ``target_modules`` as the list SGLang's ``--lora-target-modules`` expects."""
    problems = adapter_target_problems(target_modules)
    if problems:
        raise LoRAConfigError(problems[0])
    out = hf_leaves(target_modules)
    if out is None:
        return [ALL_SENTINEL]
    supported = list(supported) if supported is not None else supported_target_modules()
    if supported is not None:
        unknown = [n for n in out if n not in supported]
        if unknown:
            raise LoRAConfigError(
                f"{TARGET_MODULES_SETTING} has {unknown}, which the installed SGLang cannot serve as LoRA targets "
                f"(it supports {sorted(supported)}). Fix: drop them or use `all-linear`."
            )
    return out


def adapter_target_modules(target_modules: Any, modules: Iterable[str] | None = None) -> str | list[str]:
    """The adapter-config view: ``all-linear`` kept as the string where SGLang reads it, else the modules the
    adapter's tensors carry (or PEFT's all-linear set); a list as sorted HF leaves."""
    problems = adapter_target_problems(target_modules, "adapter config target_modules (from " + TARGET_MODULES_SETTING + ")")
    if problems:
        raise LoRAConfigError(problems[0])
    leaves = hf_leaves(target_modules)
    if leaves is not None:
        return sorted(leaves)
    if sglang_reads_all_linear_string():
        return PEFT_ALL_LINEAR if target_modules != ALL_SENTINEL else target_modules
    return sorted(set(modules)) if modules else list(ALL_LINEAR_HF)
