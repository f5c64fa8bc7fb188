"""A PEFT expert adapter (``target_parameters`` on transformers 5's fused Qwen3-MoE experts), converted by
``sglang_contract/expert_lora.py`` and loaded through the SGLang on ``sys.path``: its real ``LoRAManager``,
``load_lora_adapter_from_tensors`` and ``LoRAMemoryPool``, over a stand-in built from SGLang's own ``FusedMoE``,
``QKVParallelLinear`` and ``RowParallelLinear`` layers. Prints one JSON line: the relative error of every expert's
delta as the pool holds it (SGLang's MoE math: gate from A rows [0:max_r], up from [max_r:2 max_r], B pre-scaled)
against PEFT's own ``get_delta_weight``, for the conversion and for a wrong one (B sliced expert-major); and the
plugin's loader entry point (``runtime/resident/loader.apply``) on that pool: its ``verify`` of the load against the
tensors sent (which must pass), against structured corruptions (which must fail), and its ``attach`` of an in-place
slot (refused: SGLang stores expert B scaled, so an in-place write would not be the trainer's bytes).

    python -m tests.expert_pool_probe [--tp 1] [--tp-rank 0]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import sys
import types
from pathlib import Path
from typing import Any, Iterator

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.resident_selfcheck import LORA_SERVER_ARGS, pinning_is_noop  # noqa: E402
from verl_sglang_lora.sglang_contract.expert_lora import (EXPERTS_SEGMENT, ExpertDims, expert_deltas,  # noqa: E402
                                                         to_sglang_experts)
from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config  # noqa: E402

DTYPE = torch.bfloat16
E, H, I, R, ALPHA, LAYERS, NH, NKV, HD = 4, 32, 24, 4, 12, 2, 4, 2, 8  # alpha/r = 3: SGLang's pre-scale rounds
MAX_RANK = 8
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj"]


def _kw(fn: Any, **candidates: Any) -> dict:
    params = inspect.signature(fn).parameters
    return {k: v for k, v in candidates.items() if k in params}


def hf_config() -> Any:
    import transformers

    cfg = transformers.Qwen3MoeConfig(vocab_size=128, hidden_size=H, intermediate_size=64, moe_intermediate_size=I,
                                      num_hidden_layers=LAYERS, num_attention_heads=NH, num_key_value_heads=NKV,
                                      head_dim=HD, num_experts=E, num_experts_per_tok=2)
    cfg.architectures = ["Qwen3MoeForCausalLM"]
    return cfg


def peft_adapter(seed: int = 0) -> tuple[dict, dict, dict]:
    """(state dict as verl sends it, PEFT's per-(layer, parameter) deltas [E, out, in], adapter config)."""
    import peft
    import transformers

    torch.manual_seed(seed)
    model = transformers.Qwen3MoeForCausalLM(hf_config())
    config = peft.LoraConfig(r=R, lora_alpha=ALPHA, init_lora_weights=False,
                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                             target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])
    pm = peft.get_peft_model(model, config)
    with torch.no_grad():  # the adapter in the serving dtype, so PEFT's delta is of the bytes sent
        for name, p in pm.named_parameters():
            if "lora_" in name:
                p.copy_(p.to(DTYPE).float())
    deltas = {}
    for name, module in pm.named_modules():
        if isinstance(module, peft.tuners.lora.layer.ParamWrapper):
            layer = int(name.split(".layers.")[1].split(".")[0])
            deltas[(layer, module.parameter_name)] = module.get_delta_weight("default").detach().float()
    state = {k: v.detach().to(DTYPE) for k, v in peft.get_peft_model_state_dict(pm).items()}
    cfg = {k: (sorted(v) if isinstance(v, set) else v) for k, v in pm.peft_config["default"].to_dict().items()}
    cfg["peft_type"] = "LORA"
    return state, deltas, cfg


@contextlib.contextmanager
def release_scope(tp: int, tp_rank: int) -> Iterator[Any]:
    """The process state SGLang's LoRA and MoE layers read, per release (cf. resident_selfcheck.release_scope; the
    MoE layers also read the expert-parallel groups)."""
    settings = dict(LORA_SERVER_ARGS, max_loras_per_batch=2, max_lora_rank=MAX_RANK, lora_target_modules=TARGETS)
    with contextlib.ExitStack() as stack:
        try:
            from sglang.srt import runtime_context as rc
        except ImportError:  # <= 0.5.12: module-level process groups and a global ServerArgs
            from sglang.srt import server_args as S
            from sglang.srt.distributed import parallel_state as ps

            group = types.SimpleNamespace(world_size=tp, rank_in_group=tp_rank, rank=tp_rank, ranks=list(range(tp)),
                                          local_rank=tp_rank, device_group=None, cpu_group=None)
            for attr in ("_TP", "_MOE_EP", "_MOE_TP", "_ATTN_TP", "_ATTN_CP", "_MOE_DP", "_PP"):
                if getattr(ps, attr, "absent") is None:
                    ep = attr in ("_MOE_EP", "_MOE_DP", "_PP", "_ATTN_CP")
                    setattr(ps, attr, types.SimpleNamespace(**{**vars(group), **({"world_size": 1, "rank_in_group": 0}
                                                                                 if ep else {})}))
                    stack.callback(setattr, ps, attr, None)
            args = S.ServerArgs.__new__(S.ServerArgs)
            for f in dataclasses.fields(S.ServerArgs):
                if f.default is not dataclasses.MISSING:
                    setattr(args, f.name, f.default)
                elif f.default_factory is not dataclasses.MISSING:
                    setattr(args, f.name, f.default_factory())
            for k, v in settings.items():
                setattr(args, k, v)
            S.set_global_server_args_for_scheduler(args)
            yield args
            return
        args: Any = types.SimpleNamespace(**settings)
        context = rc.get_context() if hasattr(rc, "get_context") else None
        if context is not None and hasattr(context, "override_server_args"):
            from sglang.srt.server_args import ServerArgs

            known = set(getattr(ServerArgs, "__struct_fields__", ()))
            args = stack.enter_context(context.override_server_args(**{k: v for k, v in settings.items() if k in known}))
        allowed = getattr(rc, "_PARALLEL_FIELDS", None) or rc._parallel_fields()
        values = dict(tp_size=tp, tp_rank=tp_rank, attn_tp_size=tp, attn_tp_rank=tp_rank, moe_tp_size=tp,
                      moe_tp_rank=tp_rank, moe_ep_size=1, moe_ep_rank=0, moe_dp_size=1, moe_dp_rank=0,
                      attn_dp_size=1, attn_dp_rank=0, dp_size=1, pp_size=1, pp_rank=0, attn_cp_size=1,
                      attn_cp_rank=0)
        stack.enter_context(rc.get_parallel().override(**{k: v for k, v in values.items() if k in allowed}))
        yield args


def stand_in(tp: int, tp_rank: int) -> torch.nn.Module:
    from torch import nn

    from sglang.srt.layers.linear import QKVParallelLinear, RowParallelLinear
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE

    def linear(cls: Any, *args: Any) -> Any:
        return cls(*args, bias=False, **_kw(cls.__init__, tp_rank=tp_rank, tp_size=tp, params_dtype=DTYPE,
                                            reduce_results=False))

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv_proj, self.o_proj = linear(QKVParallelLinear, H, HD, NH, NKV), linear(RowParallelLinear, NH * HD, H)

    class Mlp(nn.Module):
        def __init__(self, i: int) -> None:
            super().__init__()
            self.experts = FusedMoE(num_experts=E, hidden_size=H, intermediate_size=I, layer_id=i, top_k=2,
                                    params_dtype=DTYPE, prefix=f"model.layers.{i}.mlp.experts")

    class Layer(nn.Module):
        def __init__(self, i: int) -> None:
            super().__init__()
            self.self_attn, self.mlp = Attention(), Mlp(i)

    class Body(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(Layer(i) for i in range(LAYERS))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config, self.model = hf_config(), Body()

    return Model()


def pool_deltas(pool: Any, slot: int, layer: int, key: str) -> torch.Tensor:
    """Each expert's delta [E, out/tp, in/tp] as SGLang's MoE LoRA kernels read the pool (B already scaled)."""
    a, b = pool.A_buffer[key][layer][slot].float(), pool.B_buffer[key][layer][slot].float()
    if key == "gate_up_proj_moe":
        half = b.shape[1] // 2
        return torch.cat([b[:, :half] @ a[:, :MAX_RANK], b[:, half:] @ a[:, MAX_RANK:2 * MAX_RANK]], dim=1)
    return b @ a


def this_rank(delta: torch.Tensor, key: str, tp: int, tp_rank: int) -> torch.Tensor:
    s = I // tp
    if key == "gate_up_proj_moe":  # this rank's gate rows and up rows
        return torch.cat([delta[:, tp_rank * s:(tp_rank + 1) * s], delta[:, I + tp_rank * s:I + (tp_rank + 1) * s]], 1)
    return delta[:, :, tp_rank * s:(tp_rank + 1) * s]  # down: this rank's intermediate columns


def client_adapter(state: dict, cfg: dict) -> tuple[dict, dict]:
    """The adapter as the sync client sends it: verl's stream converted pair by pair, names resolved against a real
    Qwen3-MoE checkpoint's (per-expert) names, gathered into the client's flat buffer; the config normalized with
    the modules the tensors carry (target_parameters folded into target_modules)."""
    import tempfile

    import transformers

    from verl_sglang_lora.runtime.sync.flat_adapter import AdapterCollector
    from verl_sglang_lora.sglang_contract.expert_lora import convert_stream
    from verl_sglang_lora.sglang_contract.weight_names import ModelWeightNames

    with tempfile.TemporaryDirectory() as tmp:
        transformers.Qwen3MoeForCausalLM(hf_config()).save_pretrained(tmp)
        names = ModelWeightNames.from_model_path(tmp)
    assert any(".mlp.experts.0.gate_proj.weight" in n for n in names.names)  # the checkpoint is per-expert
    adapter = AdapterCollector("cpu").collect(convert_stream(iter(state.items()), ExpertDims(E, H, I)),
                                              names.resolve_lora)
    config = normalize_peft_config(cfg, rank=R, alpha=ALPHA, modules=adapter.module_leaves())
    return dict(adapter.tensors), config


def load_and_compare(tensors: dict, deltas: dict, cfg: dict, tp: int, tp_rank: int) -> dict:
    from sglang.srt.lora.lora_manager import LoRAManager
    from sglang.srt.lora.lora_registry import LoRARef

    with release_scope(tp, tp_rank) as args:
        model = stand_in(tp, tp_rank)
        with pinning_is_noop():
            manager = LoRAManager(**_kw(LoRAManager.__init__, base_model=model, base_hf_config=model.config,
                                        max_loras_per_batch=2, load_config=None, dtype=DTYPE, server_args=args,
                                        lora_backend="triton", tp_size=tp, tp_rank=tp_rank, max_lora_rank=MAX_RANK,
                                        target_modules=TARGETS, lora_paths=None))
            ref = LoRARef(lora_name="experts", lora_path="/nonexistent/experts", pinned=True)
            result = manager.load_lora_adapter_from_tensors(ref, dict(tensors), cfg)
            if not result.success:
                return {"loaded": False, "error": getattr(result, "error_message", str(result))}
            manager.fetch_new_loras({ref.lora_id})
        pool = manager.memory_pool
        slot = pool.uid_to_buffer_id[ref.lora_id]
        verify = loader_verdicts(manager, tensors)
        errors = {}
        for layer in range(LAYERS):
            for param, key in (("gate_up_proj", "gate_up_proj_moe"), ("down_proj", "down_proj_moe")):
                want = this_rank(deltas[(layer, param)], key, tp, tp_rank)
                got = pool_deltas(pool, slot, layer, key)
                errors[f"layer{layer}.{param}"] = float((got - want).abs().max() / want.abs().max())
        return {"loaded": True, "buffers": sorted(k for k in pool.A_buffer if k.endswith("_moe")), "rel_err": errors,
                "loader": verify}


def corruptions(tensors: dict) -> dict[str, dict]:
    """The tensors sent, each changed in one structured way the loader's verify must see."""
    def changed(part: str, edit: Any) -> dict:
        name = next(n for n in sorted(tensors) if part in n)
        t = tensors[name].clone()
        edit(t)
        return {**tensors, name: t}

    def sign(t: torch.Tensor) -> None:
        t[1, 0, 0] = -t[1, 0, 0]

    def swap(t: torch.Tensor) -> None:
        t[[0, 1]] = t[[1, 0]].clone()

    def plus_minus(t: torch.Tensor) -> None:  # (+d, -2d, +d) down the rank rows: sums unchanged; in the first and
        for col in (0, -1):                      # the last input column, so that every TP rank's slice has one
            d = t[0, :3, col].abs().max() + 1
            t[0, :3, col] += torch.tensor([1.0, -2.0, 1.0], dtype=t.dtype) * d

    def last_expert(t: torch.Tensor) -> None:  # one expert's B from a stale version
        t[-1] *= 2

    return {"expert_B_sign_flip": changed("experts.down_proj.lora_B", sign),
            "experts_swapped_in_A": changed("experts.gate_up_proj.lora_A", swap),
            "plus_minus_in_expert_A": changed("experts.down_proj.lora_A", plus_minus),
            "one_expert_B_stale": changed("experts.gate_up_proj.lora_B", last_expert)}


def loader_verdicts(manager: Any, tensors: dict) -> dict:
    """The loader's answers on this pool: verify (the tensors sent, then each corruption), then an attach."""
    from verl_sglang_lora.runtime.resident import protocol as P
    from verl_sglang_lora.runtime.resident.loader import apply

    def run(op: str, sent: dict, **fields: Any) -> dict:
        status, message = P.new_status(), P.new_message()
        apply(manager.base_model, P.request_tensors(op, status, sent, message, slot="experts", **fields))
        return {**P.read_status(status), "message": P.read_message(message)}

    out = {"sent": run("verify", tensors, allow_unpinned=1)}
    for what, sent in corruptions(tensors).items():
        out[what] = run("verify", sent, allow_unpinned=1)
    out["attach"] = run("attach", tensors, version=1, write=1)
    # an adapter that leaves a layer's experts out: SGLang 0.5.12 keeps whatever that slot held there
    partial = {k: v for k, v in tensors.items() if not (".layers.1." in k and EXPERTS_SEGMENT in k)}
    out["layer_without_experts"] = run("verify", partial, allow_unpinned=1)
    return {k: {"ok": v["ok"], "error": v["error_text"], "message": v["message"][:300]} for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--tp-rank", type=int, default=0)
    args = parser.parse_args(argv)
    import sglang

    state, deltas, cfg = peft_adapter()
    dims = ExpertDims(E, H, I)
    converted, cfg = client_adapter(state, cfg)
    assert all(torch.equal(converted[k], v) for k, v in to_sglang_experts(state, dims).items())
    # a plausible wrong conversion: B sliced expert-major (B[:, e*r:(e+1)*r]) instead of rank-major
    wrong = dict(converted)
    for name, b in state.items():
        if ".mlp.experts." in name and ".lora_B." in name:
            target = next(k for k in converted if k.startswith(name.split(".mlp.experts.")[0] + ".mlp.experts.")
                          and k.endswith("lora_B.weight") and converted[k].shape[1] == b.shape[0])
            wrong[target] = b.reshape(b.shape[0], E, R).permute(1, 0, 2).contiguous()
    out = {"version": sglang.__version__, "tp": [args.tp, args.tp_rank],
           "converted": load_and_compare(converted, deltas, cfg, args.tp, args.tp_rank),
           "wrong": load_and_compare(wrong, deltas, cfg, args.tp, args.tp_rank)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
