"""LoRA on fused MoE experts: PEFT's ``target_parameters`` tensors as the 3-D expert weights SGLang's LoRA loader takes.

transformers 5 stores a Qwen3-MoE layer's experts as ``mlp.experts.gate_up_proj`` [E, 2I, H] (gate rows first) and
``mlp.experts.down_proj`` [E, H, I]; PEFT adapts them through ``target_parameters`` with one ParamWrapper per
parameter, nested on the same module, so both adapters sit under ``mlp.experts`` (the inner one under
``mlp.experts.base_layer``): A is [r*E, in], expert-major (``A_e = A[e*r:(e+1)*r]``), B is [out, r*E], rank-major
with the expert index fastest (``B_e = B[:, e::E]``), and ``delta_W_e = (alpha/r) * B_e @ A_e``.

SGLang (0.5.12 on: ``sglang/srt/lora/lora.py``, ``mem_pool.py``) takes ``mlp.experts.<proj>.lora_A.weight`` as
[E, r, in] and ``lora_B.weight`` as [E, out, r] with the expert dimension first, stacks gate/up itself, and stores
the expert B multiplied by ``alpha/r`` in its pool (dense B is not): the tensors here are sent unscaled.

Which wrapper is gate_up and which is down is read from the shapes, never from the nesting (it follows the order
the parameters were registered in): gate_up's A takes H columns and its B has 2I rows; down's A takes I and its B
has H rows. Both cannot match the other's pair (that would need H = I and H = 2I).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

import torch

EXPERTS_SEGMENT = ".mlp.experts."
PROJECTIONS = ("gate_up_proj", "down_proj")
# the architectures whose fused expert layout this conversion is checked against (transformers 5 Qwen3-MoE:
# gate_up_proj [E, 2I, H] gate rows first, not transposed), and the config keys ExpertDims reads
EXPERT_LORA_MODEL_TYPES = ("qwen3_moe",)
EXPERT_DIM_KEYS = ("hidden_size", "moe_intermediate_size")
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts")  # transformers 5 writes Qwen3-MoE's as num_local_experts


class ExpertLoRAError(ValueError):
    """Expert LoRA tensors that do not form the two fused-expert adapters of a layer."""


@dataclass(frozen=True)
class ExpertDims:
    num_experts: int
    hidden: int
    intermediate: int  # per expert (``moe_intermediate_size``)

    @classmethod
    def from_hf_config(cls, cfg: dict) -> "ExpertDims":
        cfg = cfg.get("text_config", cfg)
        count = next((cfg[k] for k in EXPERT_COUNT_KEYS if cfg.get(k)), None)
        if count is None or not all(cfg.get(k) for k in EXPERT_DIM_KEYS):
            raise ExpertLoRAError(f"the model config lacks one of {EXPERT_COUNT_KEYS} or {EXPERT_DIM_KEYS}")
        return cls(int(count), int(cfg["hidden_size"]), int(cfg["moe_intermediate_size"]))

    def projection(self, a: torch.Tensor, b: torch.Tensor) -> str:
        """``gate_up_proj`` or ``down_proj`` for one (A, B) pair of PEFT tensors, from their shapes."""
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[1] or a.shape[0] % self.num_experts:
            raise ExpertLoRAError(f"expert LoRA A {tuple(a.shape)} / B {tuple(b.shape)} is not a [r*E, in] / "
                                  f"[out, r*E] pair for {self.num_experts} experts")
        shapes = {"gate_up_proj": (self.hidden, 2 * self.intermediate), "down_proj": (self.intermediate, self.hidden)}
        found = [p for p, (fan_in, fan_out) in shapes.items() if (a.shape[1], b.shape[0]) == (fan_in, fan_out)]
        if len(found) != 1:
            raise ExpertLoRAError(f"expert LoRA A {tuple(a.shape)} / B {tuple(b.shape)} matches neither gate_up_proj "
                                  f"(in {self.hidden}, out {2 * self.intermediate}) nor down_proj "
                                  f"(in {self.intermediate}, out {self.hidden})")
        return found[0]


def is_expert_lora(name: str) -> bool:
    return EXPERTS_SEGMENT in name and (".lora_A." in name or ".lora_B." in name)


def expert_projections(target_parameters: Iterable[str]) -> tuple[list[str], list[str]]:
    """(the fused projections ``target_parameters`` adapts in every layer, the other entries). PEFT matches an entry
    as a suffix of the parameter name, so ``mlp.experts.gate_up_proj`` and ``experts.gate_up_proj`` name every
    layer's fused gate/up weight; a longer path (``model.layers.0.mlp.experts.gate_up_proj``) names some layers only
    and counts as other: SGLang's pool keeps the layers an adapter leaves out from an earlier load on some releases."""
    found, other = [], []
    for entry in target_parameters:
        parts = str(entry).split(".")
        if parts[-1] in PROJECTIONS and parts[:-1] in (["experts"], ["mlp", "experts"]):
            found.append(parts[-1])
        else:
            other.append(str(entry))
    return sorted(set(found)), other


def _split(name: str) -> tuple[str, str, str]:
    """(layer prefix, wrapper path, "A"|"B") of a PEFT expert tensor name."""
    prefix, _, tail = name.partition(EXPERTS_SEGMENT)  # tail: [base_layer.]lora_A[.default].weight
    wrapper, _, leaf = tail.partition("lora_")
    return prefix, wrapper, leaf[0]


def _convert_pair(prefix: str, a: torch.Tensor, b: torch.Tensor, dims: ExpertDims) -> tuple[str, dict[str, torch.Tensor]]:
    proj = dims.projection(a, b)
    r = a.shape[0] // dims.num_experts
    base = f"{prefix}{EXPERTS_SEGMENT}{proj}"
    return proj, {f"{base}.lora_A.weight": a.reshape(dims.num_experts, r, a.shape[1]),
                  f"{base}.lora_B.weight": b.reshape(b.shape[0], r, dims.num_experts).permute(2, 0, 1).contiguous()}


def convert_stream(weights: Iterable[tuple[str, torch.Tensor]], dims: ExpertDims) -> Iterator[tuple[str, torch.Tensor]]:
    """The trainer's LoRA stream with each fused-expert PEFT pair replaced by SGLang's 3-D tensors as soon as both
    halves have arrived; every other tensor passes through. Raises :class:`ExpertLoRAError` at the end of the stream
    on a half pair, and on two pairs for one projection of a layer."""
    waiting: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
    done: set[tuple[str, str]] = set()
    for name, tensor in weights:
        if not is_expert_lora(name):
            yield name, tensor
            continue
        prefix, wrapper, ab = _split(name)
        pair = waiting.setdefault((prefix, wrapper), {})
        pair[ab] = tensor
        if set(pair) != {"A", "B"}:
            continue
        del waiting[(prefix, wrapper)]
        proj, converted = _convert_pair(prefix, pair["A"], pair["B"], dims)
        if (prefix, proj) in done:
            raise ExpertLoRAError(f"{prefix}{EXPERTS_SEGMENT}: two adapters for {proj}")
        done.add((prefix, proj))
        yield from converted.items()
    for (prefix, wrapper), pair in sorted(waiting.items()):
        raise ExpertLoRAError(f"{prefix}{EXPERTS_SEGMENT}{wrapper}lora_*: only lora_{''.join(pair)} present")


def to_sglang_experts(tensors: dict[str, torch.Tensor], dims: ExpertDims) -> dict[str, torch.Tensor]:
    """``tensors`` with every fused-expert PEFT pair replaced by SGLang's 3-D ``mlp.experts.<proj>.lora_{A,B}``; the
    other tensors unchanged (:func:`convert_stream` over a whole state dict)."""
    return dict(convert_stream(sorted(tensors.items()), dims))


def expert_deltas(a: torch.Tensor, b: torch.Tensor, num_experts: int, scaling: float) -> torch.Tensor:
    """PEFT's per-expert ``delta_W`` [E, out, in] of one fused-expert pair, in float32 (the reference the tests hold
    SGLang's pool to)."""
    r = a.shape[0] // num_experts
    return torch.stack([scaling * b[:, e::num_experts].float() @ a[e * r:(e + 1) * r].float()
                        for e in range(num_experts)])
