"""Weight names as SGLang's loader accepts them, checked against the model's real parameter names.

The trainer's names are not SGLang's: verl's FSDP engine inserts vLLM's ``.base_layer.`` wrapper level
(``q_proj.base_layer.weight``, seed layer 6), PEFT prefixes ``base_model.model.``, FSDP/activation
checkpointing add wrapper segments, and SGLang packs q/k/v into ``qkv_proj`` and gate/up into
``gate_up_proj``. SGLang's loaders do not always fail on a name they do not know -- its LoRA loader stores
unknown modules and never uses them -- so every name is resolved here against the checkpoint's own names
(read from the safetensors headers, no weights loaded) and an unknown one is an error.
"""

from __future__ import annotations

import json
import logging
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

logger = logging.getLogger(__name__)

WRAPPER_SEGMENTS = (".base_layer.", "._fsdp_wrapped_module.", "._checkpoint_wrapped_module.", "._orig_mod.")
PEFT_PREFIX = "base_model.model."
# SGLang's packed parameters and the HF projections they stack (identical on every supported release).
PACKED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
# A fused-expert LoRA module (``mlp.experts.gate_up_proj``, sglang_contract/expert_lora.py) exists where the
# checkpoint has expert 0's per-projection weights (``mlp.experts.0.gate_proj.weight``, a Qwen3 MoE checkpoint) or
# the fused parameter itself.
EXPERT_PARTS = {"gate_up_proj": PACKED["gate_up_proj"], "down_proj": ("down_proj",)}
LORA_RE = re.compile(r"^(?P<module_path>.+)\.lora_(?P<ab>[AB])(?:\.(?P<adapter>[A-Za-z0-9_]+))?\.weight$")
LAYER_RE = re.compile(r"\.layers\.(\d+)\.")


class UnknownWeightNameError(KeyError):
    """A tensor name the SGLang model does not have; loading it would crash or silently do nothing."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


def strip_wrappers(name: str) -> str:
    """Remove the PEFT prefix and wrapper levels that exist only in the trainer's module tree."""
    for seg in ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod."):
        if name.startswith(seg):
            name = name[len(seg):]
    for seg in WRAPPER_SEGMENTS:
        while seg in name:
            name = name.replace(seg, ".")
    if name.startswith(PEFT_PREFIX):
        name = name[len(PEFT_PREFIX):]
    return name


def lora_module_path(name: str) -> str | None:
    """The module path of a LoRA tensor name (wrappers stripped), or None if the name is not a LoRA tensor."""
    m = LORA_RE.match(strip_wrappers(name))
    return m.group("module_path") if m else None


def safetensors_names(model_path: str | Path) -> set[str]:
    """Tensor names in every ``*.safetensors`` file of a local checkpoint, from the headers only."""
    names: set[str] = set()
    for file in sorted(Path(model_path).glob("*.safetensors")):
        with open(file, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(length))
        names.update(k for k in header if k != "__metadata__")
    return names


@dataclass(frozen=True)
class ModelWeightNames:
    """The parameter names a served model accepts, plus the facts needed to judge trainer names."""

    names: frozenset[str]
    num_layers: int | None = None
    tie_word_embeddings: bool = False

    @classmethod
    def from_model_path(cls, model_path: str | Path) -> "ModelWeightNames":
        names = safetensors_names(model_path)
        if not names:
            raise FileNotFoundError(
                f"no *.safetensors in {model_path}: cannot check weight names against the model. Convert the "
                "checkpoint to safetensors (model.save_pretrained(..., safe_serialization=True))."
            )
        cfg_file = Path(model_path) / "config.json"
        cfg = json.loads(cfg_file.read_text()) if cfg_file.exists() else {}
        cfg = cfg.get("text_config", cfg)
        return cls(frozenset(names), cfg.get("num_hidden_layers"), bool(cfg.get("tie_word_embeddings", False)))

    def resolve_base(self, name: str) -> str:
        """The name to send for a base weight; raises :class:`UnknownWeightNameError` if the model lacks it."""
        clean = strip_wrappers(name)
        if clean in self.names:
            return clean
        if clean == "lm_head.weight" and self.tie_word_embeddings:
            return clean  # SGLang ties lm_head to embed_tokens and skips this tensor by design
        for packed in PACKED:
            if f".{packed}." in clean:
                raise UnknownWeightNameError(
                    f"base weight {name!r} is already packed ({packed}); SGLang's loader packs q/k/v and gate/up "
                    "itself and would mangle this name. Send the per-projection HF names instead."
                )
        raise UnknownWeightNameError(self._unknown(name, clean))

    def resolve_lora(self, name: str) -> tuple[str, str, str]:
        """(name to send, module path, 'A'|'B') for a LoRA tensor whose base projection exists in the model."""
        clean = strip_wrappers(name)
        m = LORA_RE.match(clean)
        if not m:
            raise UnknownWeightNameError(
                f"{name!r} is not a LoRA tensor name (expected '<module>.lora_A.weight' or '<module>.lora_B.weight')"
            )
        module_path = m.group("module_path")
        layer = LAYER_RE.search(f".{module_path}.")
        if layer and self.num_layers is not None and int(layer.group(1)) >= self.num_layers:
            raise UnknownWeightNameError(f"{name!r} names layer {layer.group(1)} but the model has {self.num_layers} layers")
        if f"{module_path}.weight" not in self.names and not self._has_experts(module_path):
            packed = module_path.rsplit(".", 1)[-1]
            parts = PACKED.get(packed, ())
            if not parts or not all(f"{module_path[: -len(packed)]}{p}.weight" in self.names for p in parts):
                raise UnknownWeightNameError(self._unknown(name, f"{module_path}.weight"))
        return f"{PEFT_PREFIX}{module_path}.lora_{m.group('ab')}.weight", module_path, m.group("ab")

    def _has_experts(self, module_path: str) -> bool:
        stem, _, proj = module_path.rpartition(".")
        if not stem.endswith(".experts") or proj not in EXPERT_PARTS:
            return False
        return module_path in self.names or all(f"{stem}.0.{p}.weight" in self.names for p in EXPERT_PARTS[proj])

    def _unknown(self, original: str, clean: str) -> str:
        stem = clean.rsplit(".", 2)[0]
        near = sorted(n for n in self.names if n.startswith(stem))[:5]
        return (
            f"weight {original!r} (as {clean!r}) is not a parameter of the served model; SGLang would "
            f"fail or silently skip it. Closest names in the checkpoint: {near or 'none'}. Check that "
            "actor_rollout_ref.model.path is the model the trainer holds."
        )


def check_lora_pairs(modules: Iterable[tuple[str, str]]) -> None:
    """Every LoRA module must carry both A and B in the same load (an adapter with half a pair is corrupt)."""
    seen: dict[str, set[str]] = {}
    for module_path, ab in modules:
        seen.setdefault(module_path, set()).add(ab)
    broken = sorted(m for m, abs_ in seen.items() if abs_ != {"A", "B"})
    if broken:
        raise UnknownWeightNameError(f"LoRA modules missing lora_A or lora_B: {broken[:5]} (+{max(0, len(broken) - 5)} more)")
