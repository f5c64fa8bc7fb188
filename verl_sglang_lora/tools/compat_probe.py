"""One cell of the compatibility matrix, probed against the real code of the releases on ``sys.path``.

Run in a subprocess with the main venv's python and a release dir in front of site-packages:

    PYTHONPATH=.cache/sglang/0.5.8 .venv/bin/python verl_sglang_lora/tools/compat_probe.py sglang
    PYTHONPATH=.cache/sglang/0.5.8:.cache/verl/0.8.0 .venv/bin/python verl_sglang_lora/tools/compat_probe.py sglang --stock
    PYTHONPATH=.cache/verl/0.8.0 .venv/bin/python verl_sglang_lora/tools/compat_probe.py verl

Prints exactly one JSON line on stdout (everything the libraries print goes to stderr).

``sglang``: the plugin's contract layer against THAT SGLang release's own code --
  * the request shape read from its ``LoadLoRAAdapterFromTensorsReqInput``;
  * the plugin's request for tp 1/2/4 with real tensors -> ``request_to_json`` -> JSON text -> pydantic
    ``TypeAdapter(LoadLoRAAdapterFromTensorsReqInput)`` (FastAPI's decode path for the route) -> the release's
    ``MultiprocessingSerializer.deserialize`` of every blob a TP rank reads: tensors equal;
  * ``lora_launch_args`` through the release's real ``ServerArgs`` LoRA check (``check_lora_server_args``;
    on 0.5.23 ``arg_groups.lora_hook.check_lora_server_args`` + ``resolving_view``);
  * ``normalize_peft_config`` of a real peft ``LoraConfig.to_dict()`` (FSDP, after injection) and of the
    ``"all-linear"`` string config (Megatron) through the release's ``LoRAConfig.from_dict``,
    ``get_normalized_target_modules`` and ``LoRAMemoryPool.can_support`` (the check behind "adapter ... is
    incompatible with the current LoRA memory pool configuration").
``--stock`` adds verl's OWN path for the verl on the path: ``ServerAdapter.update_weights``'s request field
  (read from its source), the real ``ServerAdapter.wrap_lora_params`` (unbound), the request struct built as verl
  builds it, verl's real HTTP client body, the release's decoder and deserializer, verl's adapter configs, and
  verl's launch-arg rendering through the release's ServerArgs check (char-split detection).
``verl``: registration (both registries; entry point vs ``import verl_sglang_lora.register`` vs
  ``VERL_USE_EXTERNAL_MODULES``) and the Hydra overlay composed into ``ppo_trainer`` / ``ppo_megatron_trainer``
  and converted with verl's ``omega_conf_to_dataclass``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import inspect
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path
from typing import Any, Callable

RANK, ALPHA = 8, 16
TP_SIZES = (1, 2, 4)
HF_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
MEGATRON_DEFAULT = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]  # verl's model.lora.target_modules
# SGLang resolves `--lora-target-modules all` (>= 0.5.12) by scanning the served model; for Qwen3 these are its
# LoRA-capable (packed) linear modules, plus the embedding names SGLang always adds. Written out, not the release's
# auto_detect_lora_target_modules: it walks a built model, whose VocabParallelEmbedding / ParallelLMHead need
# SGLang's initialized tensor-parallel process group to construct.
QWEN3_SGLANG_MODULES = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
EMBEDDING_NAMES = {"embed_tokens", "lm_head"}
# Modules the probe stubs to import verl's sglang_rollout on a CPU host: server entry points and uvicorn (not in
# the CPU venv); none of them is on the adapter request path exercised here.
INERT_MODULES = ("sglang.srt.entrypoints.engine", "sglang.srt.entrypoints.http_server", "uvicorn")
# docs/verl_touchpoints.md B3, cross-checked against the source of each release's update_weights
DOCUMENTED_STOCK_FIELD = {"0.8.0": "serialized_tensors", "0.9.0": "serialized_tensors", "0.9.1": "serialized_named_tensors"}


def _err(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(text.split())[:600]


def step(fn: Callable[[], dict | None]) -> dict:
    """Run one check; an exception is a failed check with its message, never a crashed probe."""
    t0 = time.perf_counter()
    try:
        out = fn() or {}
        out.setdefault("ok", True)
    except Exception as exc:  # noqa: BLE001 - every failure is data here
        out = {"ok": False, "error": _err(exc)}
    out["secs"] = round(time.perf_counter() - t0, 3)
    return out


def char_split(modules: Any) -> bool:
    """A target-module collection that is a string torn into characters."""
    return bool(modules) and not isinstance(modules, str) and all(isinstance(m, str) and len(m) == 1 for m in modules)


def _sorted(value: Any) -> Any:
    return sorted(value) if isinstance(value, (set, frozenset, list, tuple)) else value


# ---- shared fixtures --------------------------------------------------------------------------------------------
def tiny_qwen3_config_dir() -> str:
    """A directory with only a tiny Qwen3 config.json: what ServerArgs and verl's HFModelConfig read."""
    from transformers import Qwen3Config

    path = tempfile.mkdtemp(prefix="vsl_compat_qwen3_")
    cfg = Qwen3Config(
        vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=512, tie_word_embeddings=False,
    )
    cfg.architectures = ["Qwen3ForCausalLM"]
    cfg.save_pretrained(path)
    return path


def adapter_tensors() -> dict:
    """Named LoRA tensors as the FSDP export names them (fp32 and bf16, deterministic values)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    prefix = "base_model.model.model.layers.0"
    return {
        f"{prefix}.self_attn.q_proj.lora_A.weight": torch.randn(RANK, 64, generator=gen),
        f"{prefix}.self_attn.q_proj.lora_B.weight": torch.randn(64, RANK, generator=gen),
        f"{prefix}.mlp.down_proj.lora_A.weight": torch.randn(RANK, 128, generator=gen).to(torch.bfloat16),
        f"{prefix}.mlp.down_proj.lora_B.weight": torch.randn(64, RANK, generator=gen).to(torch.bfloat16),
    }


def tensors_equal(got: Any, want: dict) -> tuple[bool, str]:
    import torch

    if not isinstance(got, dict) or set(got) != set(want):
        return False, f"names differ: {sorted(got) if isinstance(got, dict) else type(got).__name__}"
    for name, tensor in want.items():
        other = got[name]
        if other.dtype != tensor.dtype or other.shape != tensor.shape or not torch.equal(other, tensor):
            return False, f"{name}: {other.dtype}{tuple(other.shape)} != {tensor.dtype}{tuple(tensor.shape)}"
    return True, ""


def fsdp_peft_config() -> dict:
    """What verl's FSDP engine hands over: ``peft_model.peft_config['default'].to_dict()`` after peft injected
    ``target_modules='all-linear'`` into a (tiny, random) Qwen3 -- enums and a *set* of module names."""
    import torch
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
    ))
    peft_model = get_peft_model(model, LoraConfig(
        task_type=TaskType.CAUSAL_LM, r=RANK, lora_alpha=ALPHA, target_modules="all-linear", bias="none",
    ))
    return peft_model.peft_config["default"].to_dict()


MEGATRON_CONFIG = {  # verl 0.9.0's build_peft_config_for_vllm output shape (no peft_type, the string target)
    "task_type": "CAUSAL_LM", "r": RANK, "lora_alpha": ALPHA, "target_modules": "all-linear", "bias": "none",
    "lora_dropout": 0.0,
}


def megatron_peft_config() -> tuple[dict, str]:
    """What verl's Megatron engine hands over: ``build_peft_config_for_vllm(model.lora)`` of the verl on the path
    (0.8.0: an explicit HF list; 0.9.0: ``"all-linear"``, no peft_type; 0.9.1: + peft_type), else the 0.9.0 shape."""
    try:
        from verl.utils.megatron_peft_utils import build_peft_config_for_vllm
        import verl

        block = {"rank": RANK, "alpha": ALPHA, "dropout": 0.0, "target_modules": list(MEGATRON_DEFAULT)}
        return build_peft_config_for_vllm(block), f"verl {verl.__version__} build_peft_config_for_vllm"
    except Exception as exc:  # noqa: BLE001
        return dict(MEGATRON_CONFIG), f"verl 0.9.0's shape, written out (verl not importable: {_err(exc)})"


def describe_config(cfg: dict) -> dict:
    target = cfg.get("target_modules")
    return {
        "keys": sorted(cfg) if len(cfg) <= 12 else f"{len(cfg)} keys (peft LoraConfig.to_dict())",
        "peft_type": str(getattr(cfg.get("peft_type"), "value", cfg.get("peft_type"))),
        "target_modules": _sorted(list(target)) if isinstance(target, (set, frozenset)) else target,
        "target_modules_type": type(target).__name__,
    }


# ---- SGLang -----------------------------------------------------------------------------------------------------
class SGLang:
    """The release on sys.path: its structs, decoders, server-arg check and LoRA adapter checks."""

    def __init__(self) -> None:
        import sglang
        from sglang.srt.lora import utils as lora_utils
        from sglang.srt.managers import io_struct
        from sglang.srt.utils import MultiprocessingSerializer

        self.version = sglang.__version__
        self.file = sglang.__file__
        self.request_cls = io_struct.LoadLoRAAdapterFromTensorsReqInput
        self.serializer = MultiprocessingSerializer
        self.normalize = lora_utils.get_normalized_target_modules
        try:
            from sglang.srt.utils.common import SUPPORTED_LORA_TARGET_MODULES
        except ImportError:
            from sglang.srt.utils import SUPPORTED_LORA_TARGET_MODULES
        self.supported = sorted(SUPPORTED_LORA_TARGET_MODULES)
        self.model_dir = tiny_qwen3_config_dir()

    def decode(self, body: dict) -> Any:
        """FastAPI's decode of the route's body: pydantic validation of the request class, from JSON text."""
        import pydantic

        return pydantic.TypeAdapter(self.request_cls).validate_python(json.loads(json.dumps(body)))

    def server_args_check(self, launch_args: dict) -> dict:
        """The release's own LoRA server-arg validation (docs/cpu_environment.md, per release)."""
        from sglang.srt.server_args import ServerArgs

        sa = ServerArgs(model_path=self.model_dir, device="cpu", **launch_args)
        if hasattr(sa, "check_lora_server_args"):  # <= 0.5.18: a method that mutates the fields
            sa.check_lora_server_args()
            route, resolved = "ServerArgs.check_lora_server_args()", sa.lora_target_modules
        else:  # 0.5.23: a hook; fields stay as given, the resolved value is in the resolving view
            from sglang.srt.arg_groups.lora_hook import check_lora_server_args
            from sglang.srt.arg_groups.overrides import resolving_view

            check_lora_server_args(sa)
            route = "arg_groups.lora_hook.check_lora_server_args(sa); resolving_view(sa)"
            resolved = resolving_view(sa).lora_target_modules
        return {"route": route, "resolved": _sorted(resolved), "char_split": char_split(resolved)}

    def pool_modules(self, resolved: list[str]) -> tuple[set, str]:
        """The LoRA memory pool's target modules for resolved launch modules, as LoRAManager.init_lora_shapes
        derives them: the normalized set, or for the `all` sentinel (>= 0.5.12) the served model's modules."""
        if set(resolved) == {"all"}:
            return QWEN3_SGLANG_MODULES | EMBEDDING_NAMES, "all -> Qwen3's LoRA modules + embeddings (model scan)"
        return set(self.normalize(resolved)), "get_normalized_target_modules(resolved launch modules)"

    def adapter_check(self, config_dict: dict, launch: dict) -> dict:
        """The release's adapter-side checks for a config dict sent with a LoRA load."""
        from sglang.srt.lora.lora_config import LoRAConfig
        from sglang.srt.lora.mem_pool import LoRAMemoryPool

        cfg = LoRAConfig.from_dict(json.loads(json.dumps(config_dict)))
        out: dict[str, Any] = {"r": cfg.r, "lora_alpha": cfg.lora_alpha}
        # sglang/srt/lora/lora.py asserts hf_config["peft_type"].lower() == "lora" when the adapter is built
        peft_type = cfg.hf_config.get("peft_type")
        out["peft_type_ok"] = isinstance(peft_type, str) and peft_type.lower() == "lora"
        if not out["peft_type_ok"]:
            out["peft_type_error"] = "KeyError: 'peft_type'" if peft_type is None else f"peft_type={peft_type!r}"
        try:
            normalized = self.normalize(cfg.target_modules)
            out["normalized_target_modules"] = sorted(normalized)
            out["char_split"] = char_split(normalized - {"all"})
        except Exception as exc:  # noqa: BLE001
            out.update(ok=False, error=f"get_normalized_target_modules: {_err(exc)}")
            return out
        pool_modules, how = self.pool_modules(launch["resolved"])
        pool = types.SimpleNamespace(max_lora_rank=launch["max_lora_rank"], lora_added_tokens_size=0,
                                     target_modules=pool_modules)
        out["pool_target_modules"], out["pool_from"] = sorted(pool_modules), how
        out["can_support"] = bool(LoRAMemoryPool.can_support(pool, cfg))
        out["ok"] = out["peft_type_ok"] and out["can_support"] and not out["char_split"]
        if not out["can_support"]:
            out["error"] = (f"LoRAMemoryPool.can_support is False: adapter target_modules={cfg.target_modules!r} "
                            f"normalize to {sorted(normalized)}, pool has "
                            f"{sorted(pool_modules)} -> 'LoRA adapter ... is incompatible with the current LoRA "
                            "memory pool configuration'")
        elif not out["peft_type_ok"]:
            out["error"] = f"SGLang's adapter loader asserts peft_type == 'lora': {out['peft_type_error']}"
        return out

    def round_trip(self, body: dict, field: str, want: dict, tp: int | None) -> dict:
        """Decode a JSON body as the route does, then deserialize what each TP rank reads."""
        decoded = self.decode(body)
        payload = getattr(decoded, field)
        if isinstance(payload, (list, tuple)):  # >= 0.5.18: rank i deserializes payload[i]
            blobs = list(payload)
            if tp is not None and len(blobs) != tp:
                raise AssertionError(f"{len(blobs)} blobs for tp_size={tp}")
        elif isinstance(payload, (str, bytes)):  # <= 0.5.12: every rank deserializes the one blob
            blobs = [payload]
        else:
            raise AssertionError(f"{field} decoded as {type(payload).__name__}")
        distinct = len({bytes(b) if not isinstance(b, str) else b.encode() for b in blobs})
        for i, blob in enumerate(blobs):
            try:
                restored = self.serializer.deserialize(blob)
            except Exception as exc:  # noqa: BLE001
                first = next(j for j, other in enumerate(blobs) if other == blob)
                if first < i:
                    raise AssertionError(
                        f"rank {i}'s blob is byte-identical to rank {first}'s ({distinct} distinct serialization(s) "
                        f"for {len(blobs)} ranks) and deserializing it again raised {_err(exc)}: a serialized "
                        "tensor handle is received once (CPU: torch's file-descriptor sharing); SGLang's own "
                        "producer serializes once per rank (Engine._serialize_tensors_per_rank, >= 0.5.18)"
                    ) from exc
                raise
            if getattr(decoded, "load_format", None) == "flattened_bucket":  # the release's own reconstruction
                from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorBucket

                bucket = FlattenedTensorBucket(flattened_tensor=restored["flattened_tensor"], metadata=restored["metadata"])
                restored = dict(bucket.reconstruct_tensors())
            same, why = tensors_equal(restored, want)
            if not same:
                raise AssertionError(f"blob {i}: {why}")
        return {"decoded_type": type(decoded).__name__, "payload_type": type(payload).__name__,
                "load_format": getattr(decoded, "load_format", None), "blobs": len(blobs), "distinct_blobs": distinct, "tensors_equal": True, "decoded": decoded}


def empty_update_round_trip(sg: SGLang) -> dict:
    """The scheduler-priming request (``ipc_reducers``) through the release's decoder: each rank reads []."""
    from verl_sglang_lora.sglang_contract.ipc_reducers import empty_tensor_update
    from verl_sglang_lora.sglang_contract.lora_request import request_to_json

    import pydantic
    from sglang.srt.managers import io_struct

    cls = io_struct.UpdateWeightsFromTensorReqInput
    req = empty_tensor_update(2)
    if not isinstance(req, cls):
        raise AssertionError(f"built {type(req).__name__}, not the release's struct")
    decoded = pydantic.TypeAdapter(cls).validate_python(json.loads(json.dumps(request_to_json(req))))
    restored = [sg.serializer.deserialize(blob) for blob in decoded.serialized_named_tensors]
    if restored != [[], []]:
        raise AssertionError(f"ranks read {restored!r}, not []")
    return {"ranks": len(restored), "flush_cache": getattr(decoded, "flush_cache", None)}


def lora_load_patches_reducers(sg: SGLang) -> bool:
    """Read from the release's ``tp_worker.py`` (it does not import on a CPU host): does its
    ``load_lora_adapter_from_tensors`` apply SGLang's torch patch itself, directly or through the per-rank
    deserializer? Where it does not, a fresh scheduler needs the plugin's priming update (``ipc_reducers``)."""
    source = (Path(sg.file).parent / "srt" / "managers" / "tp_worker.py").read_text()

    def body(name: str) -> str:
        m = re.search(rf"\n    def {name}\(.*?(?=\n    def |\Z)", source, re.S)
        return m.group(0) if m else ""

    lora = body("load_lora_adapter_from_tensors")
    if not lora:
        raise AssertionError("tp_worker.py has no load_lora_adapter_from_tensors")
    if "monkey_patch_torch_reductions" in lora:
        return True
    helper = re.search(r"self\.(_?deserialize_own_rank)\(", lora)
    return bool(helper) and "monkey_patch_torch_reductions" in body(helper.group(1))


def plugin_contract(sg: SGLang) -> dict:
    from verl_sglang_lora.runtime.lora_plan import LoRAPlan
    from verl_sglang_lora.sglang_contract.installed import cuda_graph_max_bs_field
    from verl_sglang_lora.sglang_contract.launch_args import lora_launch_args
    from verl_sglang_lora.sglang_contract.lora_backends import plugin_lora_backend
    from verl_sglang_lora.sglang_contract.lora_request import (
        build_lora_request,
        request_shape,
        request_to_json,
        tensor_checksums,
    )
    from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config

    out: dict[str, Any] = {}
    shape_step = step(lambda: {"shape": {k: list(v) if isinstance(v, tuple) else v
                                         for k, v in dataclasses.asdict(request_shape()).items()}})
    out["request_shape"] = shape_step.get("shape", shape_step)
    out["cuda_graph_flag"] = step(lambda: {"field": cuda_graph_max_bs_field()})
    tensors = adapter_tensors()
    megatron_raw, out["megatron_producer"] = megatron_peft_config()
    configs = {"fsdp_peft_to_dict": fsdp_peft_config(), "megatron_peft_config": megatron_raw}

    normalized: dict[str, dict] = {}

    def normalize(name: str) -> dict:
        normalized[name] = normalize_peft_config(configs[name], rank=RANK, alpha=ALPHA)
        json.dumps(normalized[name])
        cfg = normalized[name]
        return {"producer": describe_config(configs[name]),
                "normalized": {**describe_config(cfg), "r": cfg.get("r"), "lora_alpha": cfg.get("lora_alpha")}}

    out["adapter_config_normalization"] = {name: step(lambda name=name: normalize(name)) for name in configs}

    def one_request(tp: int, flatten: bool | None = None) -> dict:
        shape = request_shape()
        checksums = tensor_checksums(tensors) if shape.has_checksums else None
        req = build_lora_request("vsl_probe_v1", normalized["fsdp_peft_to_dict"], tensors, tp_size=tp,
                                 checksums=checksums, flatten=flatten)
        if not isinstance(req, sg.request_cls):
            raise AssertionError(f"built {type(req).__name__}, not the release's struct")
        body = request_to_json(req)
        res = sg.round_trip(body, shape.field, tensors, tp if shape.per_rank else None)
        decoded = res.pop("decoded")
        if decoded.lora_name != "vsl_probe_v1" or decoded.config_dict != normalized["fsdp_peft_to_dict"]:
            raise AssertionError("lora_name/config_dict changed in the round trip")
        if checksums is not None and getattr(decoded, "expected_checksums", None) != checksums:
            raise AssertionError("expected_checksums changed in the round trip")
        return {"field": shape.field, "body_keys": sorted(body), "checksums_sent": checksums is not None, **res}

    out["request"] = {str(tp): step(lambda tp=tp: one_request(tp)) for tp in TP_SIZES}
    out["request_per_tensor"] = step(lambda: one_request(1, flatten=False))  # the path for releases without it
    out["empty_tensor_update"] = step(lambda: empty_update_round_trip(sg))
    out["lora_load_patches_reducers"] = step(lambda: {"patches": lora_load_patches_reducers(sg)})
    out["resident"] = step(lambda: {"ok": True, "unsupported": installed_facts()["resident_unsupported"],
                                    **resident_release_facts()})

    launches = {
        "all_linear": "all-linear",  # FSDP default model.target_modules
        "explicit_list": list(HF_LINEAR),
        "megatron_default": list(MEGATRON_DEFAULT),  # model.lora.target_modules default
    }
    launch_results: dict[str, dict] = {}
    backend = plugin_lora_backend()  # as the server actor launches

    def launch(name: str) -> dict:
        args = lora_launch_args(LoRAPlan(rank=RANK, alpha=float(ALPHA), target_modules=launches[name], merge=False),
                                lora_backend=backend)
        res = {"launch_args": args, **sg.server_args_check(args), "max_lora_rank": args["max_lora_rank"]}
        if res["char_split"]:
            raise AssertionError(f"lora_target_modules resolved to characters: {res['resolved']}")
        launch_results[name] = res
        return res

    out["launch_args"] = {name: step(lambda name=name: launch(name)) for name in launches}

    pairs = {  # (adapter config, launch) as a run pairs them, plus the cross pairs
        "fsdp_peft_to_dict@all_linear": ("fsdp_peft_to_dict", "all_linear"),
        "fsdp_peft_to_dict@explicit_list": ("fsdp_peft_to_dict", "explicit_list"),
        "megatron_peft_config@megatron_default": ("megatron_peft_config", "megatron_default"),
        "megatron_peft_config@all_linear": ("megatron_peft_config", "all_linear"),
    }

    def accept(cfg_name: str, launch_name: str) -> dict:
        if cfg_name not in normalized or launch_name not in launch_results:
            raise RuntimeError("its normalization or launch check failed")
        return sg.adapter_check(normalized[cfg_name], launch_results[launch_name])

    out["adapter_config"] = {k: step(lambda c=c, l=l: accept(c, l)) for k, (c, l) in pairs.items()}
    checks = [*out["adapter_config_normalization"].values(), *out["request"].values(),
              *out["launch_args"].values(), *out["adapter_config"].values()]
    out["failed"] = sorted(
        f"{group}.{name}" for group in ("adapter_config_normalization", "request", "launch_args", "adapter_config")
        for name, res in out[group].items() if not res.get("ok")
    )
    out["ok"] = all(c.get("ok") for c in checks) and "field" in out["request_shape"]
    out["http_client"] = step(verl_http_client_session)  # last: it stubs SGLang's server modules for verl's import
    return out


def verl_http_client_session() -> dict[str, Any]:
    import_verl_sglang_rollout()
    from verl.workers.rollout.sglang_rollout.http_server_engine import AsyncHttpServerAdapter

    return {"ok": True, **http_client_session(AsyncHttpServerAdapter)}


# ---- verl's stock path ------------------------------------------------------------------------------------------
class _Inert(types.ModuleType):
    """A stand-in module whose every attribute is an empty class (import-time names only)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {})
        setattr(self, name, value)
        return value


def import_verl_sglang_rollout() -> tuple[Any, list[str]]:
    """verl's sglang_rollout module, with the CPU-unimportable server entry points stubbed (recorded)."""
    stubbed = stub_inert_modules()
    from verl.workers.rollout.sglang_rollout import sglang_rollout

    return sglang_rollout, stubbed


def installed_facts() -> dict[str, Any]:
    """What the doctor reads of the installed SGLang: request shape, LoRA-capable modules, resident support."""
    from verl_sglang_lora.sglang_contract.lora_backends import plugin_lora_backend
    from verl_sglang_lora.sglang_contract.lora_request import request_shape
    from verl_sglang_lora.sglang_contract.target_modules import supported_target_modules

    return {"shape": dataclasses.asdict(request_shape()), "supported": supported_target_modules(),
            "resident_unsupported": resident_reason("auto", 1), "lora_backend": plugin_lora_backend()}


def registration_facts() -> dict[str, bool]:
    """Whether ``import verl`` alone filled both registries in this fresh interpreter."""
    import verl  # noqa: F401 - the import is the thing probed (entry points)

    from verl_sglang_lora.verl_glue.registration import registration_state

    return registration_state()


def resident_release_facts() -> dict[str, Any]:
    """What the server decides per release: the resident path with two scheduler ranks (refused: the client places
    no per-rank sources yet), whether it primes the scheduler after launch, and whether the launch wrapper keeps
    the release's ServerArgs fields (dataclass or msgspec)."""
    from sglang.srt.server_args import ServerArgs

    from verl_sglang_lora.sglang_contract.installed import weight_update_session
    from verl_sglang_lora.sglang_contract.ipc_reducers import needs_priming
    from verl_sglang_lora.verl_glue.server_args import wrap_server_args

    def fields(cls: Any) -> list[str]:  # read off the attributes: the wrapper is a function carrying the class's
        return sorted(getattr(cls, "__dataclass_fields__", None) or getattr(cls, "__struct_fields__", ()))

    wrapped = wrap_server_args(ServerArgs, {"enable_lora": True, "custom_weight_loader": ["x"]})
    return {"unsupported_two_ranks": resident_reason("auto", 2), "primes": needs_priming(),
            "unsupported_quantized_base": resident_reason("auto", 1, base_unsafe="the checkpoint is quantized"),
            "weight_update_session": weight_update_session(),
            "session_structs": session_structs(), "loader_request_flow": loader_request_flow(),
            "wrapper_keeps_fields": fields(wrapped) == fields(ServerArgs),
            # verl 0.9.1's launch_server reads `[f.name for f in dataclasses.fields(ServerArgs)]` (TypeError on a struct)
            "verl_reads_fields": step(lambda: {"same": sorted(f.name for f in dataclasses.fields(wrapped))
                                                == fields(ServerArgs)})}


def resident_reason(mode: str, ranks: int, base_unsafe: str | None = None) -> str | None:
    """Why the resident in-place path does not run on the release on sys.path (None: it runs)."""
    from verl_sglang_lora.runtime.resident.support import unsupported_reason

    return unsupported_reason(mode, ranks, base_unsafe)


class ReleaseWeightUpdater:
    """The scheduler-side weight-update handlers of the release on sys.path, run in this process: SGLang's own
    ``update_weights_from_tensor`` (and on releases with a weight-update session its ``begin_weight_update`` /
    ``end_weight_update`` and the session check), reached through ``call(method, request)`` as the server actor
    reaches them (the answer read with the plugin's ``request_outcome``; a refusal raises with SGLang's message).

    The model runner behind them is a recorder that applies nothing (``runner_calls``; ``refuse_updates`` makes it
    fail): SGLang's model runner needs CUDA and its model-parallel groups. Their TP barrier runs on a one-rank gloo
    group of this process."""

    def __init__(self) -> None:
        import torch.distributed as dist
        from sglang.srt.utils import MultiprocessingSerializer

        if not dist.is_initialized():
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        self.runner_calls: list[str] = []
        self.refuse_updates = False
        runner_calls, this = self.runner_calls, self

        class Runner:  # a model runner's weight updater (>= 0.5.23) and a TP worker (all releases)
            def begin_weight_update(self) -> None:
                runner_calls.append("begin")

            def end_weight_update(self, *, run_post_load: bool) -> None:
                runner_calls.append(f"end:post_load={run_post_load}")

            def update_weights_from_tensor(self, recv_req: Any = None, named_tensors: Any = None,
                                           load_format: Any = None) -> tuple[bool, str]:
                runner_calls.append("update")
                return (False, "the runner refused the update") if this.refuse_updates else (True, "Success")

            def weight_update_runners(self) -> list:
                return [("target", self)]

            def deserialize_own_rank(self, blobs: list) -> Any:  # rank 0's payload, with the release's serializer
                return MultiprocessingSerializer.deserialize(blobs[0])

            weight_updater = property(lambda self: self)
            model_runner = property(lambda self: self)

        worker = Runner()
        try:
            from sglang.srt.managers.scheduler_components.weight_updater import SchedulerWeightUpdaterManager
        except ImportError:  # <= 0.5.12: the Scheduler's mixin methods, on an object with what they read
            from sglang.srt.managers.scheduler_update_weights_mixin import SchedulerUpdateWeightsMixin

            self.handler = types.SimpleNamespace(tp_worker=worker, draft_worker=None, tp_cpu_group=dist.group.WORLD,
                                                 flush_cache=lambda **_: True)
            for name in ("update_weights_from_tensor", "flush_cache_after_weight_update"):
                if hasattr(SchedulerUpdateWeightsMixin, name):
                    setattr(self.handler, name, types.MethodType(getattr(SchedulerUpdateWeightsMixin, name), self.handler))
            self.route = "Scheduler.update_weights_from_tensor (scheduler_update_weights_mixin)"
            return
        # the manager's own __post_init__ reads SGLang's model-parallel state: its fields are set directly
        fields = {"tp_worker": worker, "draft_worker": None, "tp_cpu_group": dist.group.WORLD,
                  "memory_saver_adapter": None, "flush_cache": lambda **_: True, "is_fully_idle": lambda **_: True,
                  "scheduler": types.SimpleNamespace(record_weight_version_change=lambda **_: None),
                  "metrics_collector": None, "offload_tags": set(), "stashed_model_static_state": None,
                  "_session": None}
        self.handler = object.__new__(SchedulerWeightUpdaterManager)
        for name, value in fields.items():
            if name in SchedulerWeightUpdaterManager.__slots__:
                setattr(self.handler, name, value)
        self.route = "SchedulerWeightUpdaterManager (scheduler_components.weight_updater)"

    def session_open(self) -> bool | None:
        """Whether the release's scheduler holds a weight-update session now (None: the release has none)."""
        return getattr(self.handler, "_session", None) is not None if hasattr(self.handler, "begin_weight_update") else None

    async def call(self, method: str, request: Any) -> Any:
        from verl_sglang_lora.sglang_contract.errors import request_outcome

        out = getattr(self.handler, method)(request)
        result = (out.success, out.message)  # what the tokenizer manager returns for these requests
        success, message = request_outcome(result)
        if not success:
            raise RuntimeError(f"{method}: {message}")
        return result


def loader_request_flow() -> dict[str, Any]:
    """The requests the server actor sends for two in-place writes and the close before a base sync on this release
    (``requests.send_loader_request`` through one ``HeldSession``, this release's structs), answered by the
    release's own scheduler-side handlers (``ReleaseWeightUpdater``): in order; when the model runner refuses the
    update; when the scheduler still holds a session (an end that was lost), whose second begin SGLang refuses; and
    an update sent outside any session (SGLang's update check, where the release has sessions). Each run ends with
    whether the scheduler still holds a session and what reached the model runner."""
    from verl_sglang_lora.runtime.resident.requests import detach_request, send_loader_request
    from verl_sglang_lora.sglang_contract.installed import weight_update_session
    from verl_sglang_lora.sglang_contract.update_session import HeldSession, begin_request

    def run(scenario: str) -> dict[str, Any]:
        sent: list[str] = []
        release = ReleaseWeightUpdater()
        release.refuse_updates = scenario == "update_refused"
        if scenario == "left_open" and weight_update_session():
            asyncio.run(release.call("begin_weight_update", begin_request()))
            release.runner_calls.clear()

        async def call(method: str, request: Any) -> Any:
            sent.append(f"{method}:{type(request).__name__}")
            return await release.call(method, request)

        async def writes_then_close() -> None:
            session = HeldSession(False) if scenario == "outside_session" else HeldSession()
            for _ in range(2):
                await send_loader_request(call, detach_request("verl_lora_slot0"), "pkg.loader", session)
            await session.close(call)

        try:
            asyncio.run(writes_then_close())
        except RuntimeError as exc:
            sent.append(f"raised: {str(exc)[:160]}")
        return {"sent": sent, "session_open": release.session_open(), "runner": list(release.runner_calls)}

    return {"route": ReleaseWeightUpdater().route,
            **{name: run(name) for name in ("ok", "update_refused", "left_open", "outside_session")}}


def session_structs() -> dict[str, Any] | None:
    """The weight-update session requests the server actor builds on a release that has them (None where absent):
    built from the release's own classes, with the fields the server sets."""
    from verl_sglang_lora.runtime.resident.requests import update_request
    from verl_sglang_lora.sglang_contract.update_session import begin_request
    from verl_sglang_lora.sglang_contract.installed import io_struct, weight_update_session

    if not weight_update_session():
        return None
    io_struct("EndWeightUpdateReqInput")()
    return {"begin_selector": getattr(begin_request(), "selector", None),
            "update_has_selector": getattr(update_request([], "pkg.loader"), "selector", None) == "target"}


def http_client_session(client: type) -> dict[str, Any]:
    """verl's HTTP client under this release's ``EngineBase``: the abstract methods it lacks (stock verl cannot
    instantiate it where there are any), and the plugin's concrete client (``verl_glue.http_engine``): what its
    session methods send, each body decoded with the release's own request struct."""
    from verl_sglang_lora.sglang_contract.installed import io_struct, weight_update_session
    from verl_sglang_lora.verl_glue.http_engine import concrete_client, missing_methods

    res: dict[str, Any] = {"verl_abstract": missing_methods(client), "verl_instantiable": not inspect.isabstract(client)}
    plugin_cls = concrete_client(client)
    res["plugin_instantiable"] = not inspect.isabstract(plugin_cls)
    if not weight_update_session():
        return res
    sent: list[tuple[str, dict]] = []

    async def capture(endpoint: str, payload: dict | None = None, **_: Any) -> dict:
        sent.append((endpoint, payload or {}))
        return {"success": True, "message": "Success"}

    engine = object.__new__(plugin_cls)
    engine._make_async_request = capture
    asyncio.run(engine.begin_weight_update())
    asyncio.run(engine.end_weight_update())
    structs = {"begin_weight_update": "BeginWeightUpdateReqInput", "end_weight_update": "EndWeightUpdateReqInput"}
    res["sent"] = [{"endpoint": ep, "body": body, "decodes": type(io_struct(structs[ep])(**body)).__name__}
                   for ep, body in sent]
    return res


def stub_inert_modules() -> list[str]:
    """Stub those of INERT_MODULES that cannot be imported on this CPU host; returns the stubbed names."""
    import importlib

    import sglang.srt.entrypoints as entrypoints

    stubbed = []
    for name in INERT_MODULES:
        if isinstance(sys.modules.get(name), _Inert):  # stubbed earlier in this process (still a stub)
            stubbed.append(name)
            continue
        try:
            importlib.import_module(name)
            continue
        except Exception:  # noqa: BLE001
            sys.modules.pop(name, None)
        sys.modules[name] = _Inert(name)
        if name.startswith("sglang.srt.entrypoints."):
            setattr(entrypoints, name.rsplit(".", 1)[1], sys.modules[name])
        stubbed.append(name)
    return stubbed


def stock_field_from_source(adapter_cls: type) -> tuple[str | None, str]:
    src = inspect.getsource(adapter_cls.update_weights)
    m = re.search(r"LoadLoRAAdapterFromTensorsReqInput\((.*?)\)", src, re.S)
    if not m:
        return None, "no LoadLoRAAdapterFromTensorsReqInput(...) call in update_weights"
    fields = re.findall(r"(\w+)\s*=", m.group(1))
    return next((f for f in fields if f.startswith("serialized")), None), " ".join(m.group(0).split())


class _Mesh:
    """``device_mesh["infer_tp"]`` as wrap_lora_params / update_weights read it."""

    def __init__(self, tp: int) -> None:
        import torch

        self.mesh = torch.arange(tp)

    def __getitem__(self, key: str) -> "_Mesh":
        return self

    def get_local_rank(self) -> int:
        return 0


def stock_launch(sg: SGLang, verl_utils: Any, engine: str) -> dict:
    """verl's own LoRA launch args (the ``args.update`` block of SGLangHttpServer.launch_server, read from its
    source and evaluated with a stand-in ``self``) through the release's ServerArgs check."""
    import verl.workers.rollout.sglang_rollout as pkg

    path = os.path.join(os.path.dirname(pkg.__file__), "async_sglang_server.py")
    src = open(path, encoding="utf-8").read()
    m = re.search(r"# update lora-related args\s*\n\s*if (.+?):\s*\n\s*args\.update\(\s*\{(.*?)\}\s*\)", src, re.S)
    if not m:
        raise RuntimeError("LoRA args block not found in async_sglang_server.py")
    gate_src, block = m.group(1).strip(), m.group(2)
    exprs = dict(re.findall(r'"(\w+)":\s*([^\n]+?),\s*\n', block + "\n"))
    flat_rank, block_rank = (RANK, 0) if engine == "fsdp" else (0, RANK)
    model_config = types.SimpleNamespace(lora_rank=flat_rank, lora_alpha=ALPHA, target_modules="all-linear",
                                         lora={"rank": block_rank, "alpha": ALPHA, "merge": False,
                                               "target_modules": list(MEGATRON_DEFAULT)})
    this = types.SimpleNamespace(model_config=model_config, lora_as_adapter=True)
    namespace = {**vars(verl_utils), "self": this}
    out: dict[str, Any] = {"source_gate": gate_src, "source_args": exprs}
    if not eval(gate_src, namespace):  # noqa: S307 - verl's own expression, from its installed source
        out.update(ok=False, launch_args={}, error=f"`if {gate_src}` is False for {engine} LoRA: SGLang starts "
                   "without LoRA and every rollout samples the base policy")
        return out
    args = {k: eval(v, namespace) for k, v in exprs.items()}  # noqa: S307
    out["launch_args"] = args
    try:
        res = sg.server_args_check(args)
    except Exception as exc:  # noqa: BLE001
        out.update(ok=False, error=_err(exc))
        return out
    out.update(res, max_lora_rank=args.get("max_lora_rank"))
    out["ok"] = not res["char_split"]
    if res["char_split"]:
        out["error"] = (f"lora_target_modules={args.get('lora_target_modules')!r} (a bare string) resolved to "
                        f"characters {res['resolved']}")
    return out


def stock_runtime(adapter_cls: type, client_cls: type) -> list[dict[str, Any]]:
    """Three steps of verl's own run that a decode check does not reach, in run order, each run against this release
    (the H200 showed all three on SGLang 0.5.23): the launch's ``dataclasses.fields(ServerArgs)``, building its HTTP
    client under the release's ``EngineBase``, and its base-weight sync outside a weight-update session."""
    import verl.workers.rollout.sglang_rollout as pkg
    from sglang.srt.server_args import ServerArgs

    from verl_sglang_lora.sglang_contract.installed import weight_update_session
    from verl_sglang_lora.verl_glue.http_engine import missing_methods

    src = open(os.path.join(os.path.dirname(pkg.__file__), "async_sglang_server.py"), encoding="utf-8").read()
    out: list[dict[str, Any]] = []
    if "dataclasses.fields(ServerArgs)" in src:
        try:
            dataclasses.fields(ServerArgs)
            out.append({"stage": "launch_fields", "ok": True})
        except TypeError as exc:
            out.append({"stage": "launch_fields", "ok": False,
                        "error": f"launch_server: dataclasses.fields(ServerArgs): {_err(exc)}"})
    missing = missing_methods(client_cls)
    out.append({"stage": "http_client", "ok": not missing})
    if missing:
        out[-1]["error"] = (f"Can't instantiate abstract class {client_cls.__name__} without {', '.join(missing)} "
                            "(SGLang's EngineBase)")
    opens_session = "begin_weight_update" in inspect.getsource(adapter_cls.update_weights)
    out.append({"stage": "base_sync", "ok": opens_session or not weight_update_session()})
    if not out[-1]["ok"]:
        out[-1]["error"] = ("base-weight sync: update_weights_from_tensor must run between begin_weight_update() and "
                            "end_weight_update() (verl never opens one)")
    return out


def stock_path(sg: SGLang) -> dict:

    out: dict[str, Any] = {}
    t = time.perf_counter()
    mod, stubbed = import_verl_sglang_rollout()
    import verl
    import verl.workers.rollout.sglang_rollout.utils as verl_utils
    from verl.workers.rollout.sglang_rollout.http_server_engine import AsyncHttpServerAdapter

    out["verl_version"] = verl.__version__
    out["import_secs"] = round(time.perf_counter() - t, 2)
    out["stubbed_for_import"] = stubbed
    if hasattr(mod, "_to_ipc_device"):  # 0.9.1 moves CPU tensors to the GPU for CUDA IPC; there is none here
        mod._to_ipc_device = lambda tensor: tensor
        out["cpu_substitutions"] = ["sglang_rollout._to_ipc_device -> identity (no GPU on this host)"]
    field, call = stock_field_from_source(mod.ServerAdapter)
    out["field"], out["field_source"] = field, call
    documented = DOCUMENTED_STOCK_FIELD.get(verl.__version__)
    out["field_documented"] = documented
    out["field_matches_docs"] = documented is None or documented == field
    lora_name = getattr(verl_utils, "SGLANG_LORA_NAME", "verl_actor_lora_name")
    tensors = adapter_tensors()

    producers: dict[str, Any] = {"fsdp": fsdp_peft_config()}
    producers["megatron"], out["megatron_producer"] = megatron_peft_config()

    out["launch"] = {engine: step(lambda engine=engine: stock_launch(sg, verl_utils, engine))
                     for engine in producers}
    try:
        out["runtime"] = stock_runtime(mod.ServerAdapter, AsyncHttpServerAdapter)
    except Exception as exc:  # noqa: BLE001 - a failed check, not a lost stock section
        out["runtime"] = [{"stage": "probe", "ok": False, "error": _err(exc)}]

    def wrap(cfg: Any) -> tuple[dict, Any]:
        return mod.ServerAdapter.wrap_lora_params(types.SimpleNamespace(device_mesh=_Mesh(2)), cfg,
                                                  iter(list(tensors.items())))

    def run_producer(engine: str) -> dict:
        res: dict[str, Any] = {"producer": describe_config(producers[engine])}
        try:
            config_json, blobs = wrap(producers[engine])
            res["wrap_lora_params"] = {"ok": True, "with": "the dict verl's engine hands over"}
        except Exception as exc:  # noqa: BLE001
            res["wrap_lora_params"] = {"ok": False, "with": "the dict verl's engine hands over", "error": _err(exc)}
            # what the same code does with the type its signature names (peft.LoraConfig), to reach the request
            from peft import LoraConfig, TaskType

            raw = producers[engine]
            target = raw.get("target_modules")
            obj = LoraConfig(task_type=TaskType.CAUSAL_LM, r=raw.get("r", RANK), lora_alpha=raw.get("lora_alpha", ALPHA),
                             target_modules=sorted(target) if isinstance(target, (set, frozenset)) else target)
            try:
                config_json, blobs = wrap(obj)
            except Exception as exc2:  # noqa: BLE001
                res.update(ok=False, breaks_at="wrap_lora_params",
                           continued_with={"ok": False, "with": "peft.LoraConfig object", "error": _err(exc2)})
                return res
            res["continued_with"] = "peft.LoraConfig object (the type its signature names), to reach the request"
        res["config_dict"] = describe_config(config_json)
        res["config_target_char_split"] = char_split(config_json.get("target_modules"))
        res["blob_type"] = f"list[{type(blobs[0]).__name__}] x {len(blobs)}"
        try:
            req = sg.request_cls(lora_name=lora_name, config_dict=config_json, **{field: blobs})
            res["construct"] = {"ok": True}
        except Exception as exc:  # noqa: BLE001
            res["construct"] = {"ok": False, "error": _err(exc)}
            res["breaks_at"] = "construct"
            res["ok"] = False
            return res
        captured: dict[str, Any] = {}

        async def capture(endpoint: str, payload: dict | None = None, method: str = "POST", **_: Any) -> dict:
            captured.update(endpoint=endpoint, payload=payload)
            return {"success": True}

        # verl's real client method on an instance with only the transport replaced (the class made concrete as the
        # plugin makes it where the release's EngineBase declares more, e.g. begin/end_weight_update on 0.5.23;
        # that stock verl cannot build it there is the "runtime" row's)
        from verl_sglang_lora.verl_glue.http_engine import concrete_client

        client = object.__new__(concrete_client(AsyncHttpServerAdapter))
        client._make_async_request = capture
        asyncio.run(client.load_lora_adapter_from_tensor(req))
        body = captured["payload"]
        res["http_body_keys"] = sorted(body)
        wire_field = next((k for k in body if k.startswith("serialized")), None)
        if wire_field != field:
            res["http_body_field_differs"] = wire_field
        try:
            rt = sg.round_trip(body, wire_field, tensors, None)
            rt.pop("decoded")
            res["decode"] = {"ok": True, **rt}
        except Exception as exc:  # noqa: BLE001
            res["decode"] = {"ok": False, "error": _err(exc)}
            res["breaks_at"] = "decode"
            res["ok"] = False
            return res
        launch = out["launch"][engine]
        if launch.get("ok") is False and "resolved" not in launch:
            res["adapter"] = {"ok": False, "error": "not checked: the launch failed"}
        else:
            launch_for_pool = {"resolved": launch.get("resolved") or [], "max_lora_rank": launch.get("max_lora_rank") or RANK}
            res["adapter"] = step(lambda: sg.adapter_check(config_json, launch_for_pool))
        res["ok"] = res["wrap_lora_params"]["ok"] and res["adapter"].get("ok", False)
        if not res["wrap_lora_params"]["ok"]:
            res["breaks_at"] = "wrap_lora_params"
        elif not res["adapter"].get("ok"):
            res["breaks_at"] = "adapter"
        return res

    out["producers"] = {engine: step(lambda engine=engine: run_producer(engine)) for engine in producers}
    out["ok"] = all(p.get("ok") for p in out["producers"].values()) and all(
        v.get("ok") for v in [*out["launch"].values(), *out["runtime"]])
    return out


# ---- verl: registration and Hydra -------------------------------------------------------------------------------
def verl_probe() -> dict:
    import verl

    from verl_sglang_lora.verl_glue.registration import registration_state

    out: dict[str, Any] = {"verl_version": verl.__version__, "verl_file": verl.__file__}
    out["sglang_pin"] = sglang_pin()
    out["loads_entry_points"] = "verl.plugins" in inspect.getsource(verl)
    out["after_import_verl"] = registration_state()
    import verl_sglang_lora.register  # noqa: F401

    out["after_import_register"] = registration_state()
    code = ("import json, verl\nfrom verl_sglang_lora.verl_glue.registration import registration_state\n"
            "print(json.dumps(registration_state()))\n")
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "verl_sglang_lora.register", "VERL_USE_EXTERNAL_PLUGINS": "none"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    out["via_VERL_USE_EXTERNAL_MODULES"] = (json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0
                                            else {"error": proc.stderr.strip().splitlines()[-1:]})
    model_dir = tiny_qwen3_config_dir()
    lora = {
        "ppo_trainer": ["actor_rollout_ref.model.lora_rank=32", "actor_rollout_ref.model.lora_alpha=32"],
        "ppo_megatron_trainer": ["actor_rollout_ref.model.lora.rank=32", "actor_rollout_ref.model.lora.alpha=32"],
    }
    # the examples' offline-default reward key (reward.custom_reward_function) must exist in every release's tree
    reward = ["reward.custom_reward_function.path=pkg://verl_sglang_lora.tools.offline_reward",
              "reward.custom_reward_function.name=compute_score"]
    out["compose"] = {name: step(lambda name=name: compose(name, [f"actor_rollout_ref.model.path={model_dir}",
                                                                  *lora[name], *reward]))
                      for name in lora}
    want = {"RolloutReplicaRegistry": True, "_ROLLOUT_REGISTRY": True}
    out["registration_ok"] = out["after_import_register"] == want and (
        out["after_import_verl"] == want if out["loads_entry_points"] else True)
    out["ok"] = out["registration_ok"] and all(c.get("ok") for c in out["compose"].values())
    return out


def sglang_pin() -> str | None:
    """The SGLang release verl's own ``[sglang]`` extra pins (from the installed verl's metadata)."""
    from importlib.metadata import requires

    for req in requires("verl") or []:
        m = re.match(r"sglang(\[[^\]]*\])?\s*==\s*([\w.]+)\s*;.*extra\s*==\s*['\"]sglang['\"]", req)
        if m:
            return m.group(2)
    return None


def compose(config_name: str, overrides: list[str]) -> dict:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from verl.utils.config import omega_conf_to_dataclass

    import verl
    from verl_sglang_lora.runtime.lora_plan import lora_plan
    from verl_sglang_lora.runtime.settings import PluginSettings

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            cfg = hydra_compose(config_name=config_name, overrides=[
                "hydra.searchpath=[pkg://verl_sglang_lora.configs]", "+sglang_lora=default", *overrides])
    finally:
        GlobalHydra.instance().clear()
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    model = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    plan = lora_plan(model)
    out = {
        "rollout_name": rollout.name,
        "rollout_type": type(rollout).__name__,
        "model_type": type(model).__name__,
        "model_engine": str(cfg.get("model_engine")),
        "external_lib": cfg.actor_rollout_ref.model.external_lib,
        "ray_env": cfg.ray_kwargs.ray_init.runtime_env.env_vars.get("VERL_USE_EXTERNAL_MODULES"),
        "lora_as_adapter": plan.as_adapter,
        "lora_rank": plan.rank,
        "http_timeout_s": PluginSettings.from_rollout_config(rollout).http_timeout_s,
        "reward_fn": str(cfg.reward.custom_reward_function.path),
    }
    out["ok"] = (out["rollout_name"] == "sglang_lora" and out["external_lib"] == "verl_sglang_lora.register"
                 and out["ray_env"] == "verl_sglang_lora.register" and plan.as_adapter and plan.rank == 32)
    return out


# ---- main -------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("sglang", "verl"))
    ap.add_argument("--stock", action="store_true", help="also probe verl's own request path (sglang mode)")
    args = ap.parse_args(argv)

    real_stdout = os.dup(1)
    os.dup2(2, 1)  # library chatter to stderr; the one JSON line goes to the real stdout
    sys.stdout = sys.stderr
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if repo not in sys.path:
        sys.path.append(repo)  # the plugin, when it is not installed in this interpreter

    t0 = time.perf_counter()
    result: dict[str, Any] = {"mode": args.mode, "python": sys.executable,
                              "pythonpath": os.environ.get("PYTHONPATH", "")}
    try:
        if args.mode == "sglang":
            t = time.perf_counter()
            sg = SGLang()
            result.update(sglang_version=sg.version, sglang_file=sg.file, sglang_import_secs=round(time.perf_counter() - t, 2),
                          supported_target_modules=sg.supported)
            result["cpu_stubs_loaded"] = sorted(
                n for n, m in list(sys.modules.items())
                if isinstance(getattr(m, "__dict__", None), dict) and m.__dict__.get("__vsl_cpu_stub__") is True)
            result["plugin"] = plugin_contract(sg)
            if args.stock:
                result["stock"] = step(lambda: stock_path(sg))
        else:
            os.environ.pop("VERL_USE_EXTERNAL_MODULES", None)  # registration must come from the plugin's own hooks
            result["verl"] = verl_probe()
    except Exception as exc:  # noqa: BLE001
        import traceback

        result["error"] = _err(exc)
        result["traceback"] = traceback.format_exc(limit=-6)
    result["secs"] = round(time.perf_counter() - t0, 2)
    line = json.dumps(result, default=repr, sort_keys=True)
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os.write(real_stdout, (line + "\n").encode())
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
