"""Check that an SGLang release's CPU-testable surface imports and works here.

Usage:  PYTHONPATH=.cache/sglang/VERSION .venv/bin/python scripts/cpu_env/sglang_probe.py \
            [--expect VERSION] [--out FILE]

Imports the four modules the CPU tests drive, describes LoadLoRAAdapterFromTensorsReqInput,
runs the real LoRA server-arg check on a tiny local Qwen3 config (no weights, no network)
and round-trips a tensor through MultiprocessingSerializer.  Prints one JSON object; exits
non-zero if any of that fails.  Used by scripts/sglang_release.sh and setup_cpu_env.sh.
"""
import argparse
import dataclasses
import importlib
import json
import logging
import os
import re
import sys
import tempfile
import time
import traceback
import warnings

MODULES = (
    "sglang.srt.managers.io_struct",
    "sglang.srt.server_args",
    "sglang.srt.lora.utils",
    "sglang.srt.utils",
)
REQS = (
    "LoadLoRAAdapterFromTensorsReqInput",
    "UpdateWeightsFromTensorReqInput",
    "ReleaseMemoryOccupationReqInput",
    "ResumeMemoryOccupationReqInput",
    "GenerateReqInput",
)


def fmt_type(t):
    if isinstance(t, type):
        return t.__name__
    return re.sub(r" object at 0x[0-9a-f]+>", ">", str(t).replace("typing.", ""))


def struct_info(cls):
    try:
        import msgspec

        if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
            return "msgspec", {f.name: fmt_type(f.type) for f in msgspec.structs.fields(cls)}
    except ImportError:
        pass
    if dataclasses.is_dataclass(cls):
        import typing

        try:
            hints = typing.get_type_hints(cls)
        except Exception:
            hints = {}
        return "dataclass", {f.name: fmt_type(hints.get(f.name, f.type)) for f in dataclasses.fields(cls)}
    return type(cls).__name__, {}


def tiny_model_dir():
    from transformers import Qwen3Config

    d = tempfile.mkdtemp(prefix="vsl_tiny_qwen3_")
    cfg = Qwen3Config(
        vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
    )
    cfg.architectures = ["Qwen3ForCausalLM"]
    cfg.save_pretrained(d)
    return d


def lora_check(model_dir, target_modules):
    """Run SGLang's own LoRA server-arg validation on CPU; return (route, resolved)."""
    from sglang.srt.server_args import ServerArgs

    sa = ServerArgs(model_path=model_dir, device="cpu", enable_lora=True,
                    max_lora_rank=8, lora_target_modules=target_modules)
    if hasattr(sa, "check_lora_server_args"):  # <= 0.5.18: method, mutates the fields
        sa.check_lora_server_args()
        return "ServerArgs(...).check_lora_server_args()", sa.lora_target_modules
    # >= 0.5.23: resolution hooks; fields stay as given, resolved values in the view
    from sglang.srt.arg_groups.lora_hook import check_lora_server_args
    from sglang.srt.arg_groups.overrides import resolving_view

    check_lora_server_args(sa)
    return ("sglang.srt.arg_groups.lora_hook.check_lora_server_args(ServerArgs(...)); "
            "resolving_view(sa).lora_target_modules"), resolving_view(sa).lora_target_modules


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect")
    ap.add_argument("--out")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)
    res, ok = {"python": sys.executable}, True
    t0 = time.time()
    res["imports"] = {}
    for m in MODULES:
        t = time.time()
        try:
            importlib.import_module(m)
            res["imports"][m] = "ok (%.1fs)" % (time.time() - t)
        except BaseException as e:  # noqa: BLE001
            ok = False
            res["imports"][m] = f"FAIL {type(e).__name__}: {e}"
            res.setdefault("tracebacks", {})[m] = traceback.format_exc(limit=-8)
    import sglang

    res["sglang_version"], res["sglang_file"] = sglang.__version__, sglang.__file__
    if args.expect and sglang.__version__ != args.expect:
        ok = False
        res["error"] = f"expected sglang {args.expect}, imported {sglang.__version__}"
    res["cpu_stubs_loaded"] = sorted(
        n for n, m in list(sys.modules.items())
        if isinstance(getattr(m, "__dict__", None), dict) and m.__dict__.get("__vsl_cpu_stub__") is True)
    try:
        import _vsl_cpu_shim

        res["torchvision_schema_shim_used"] = _vsl_cpu_shim._LIB is not None
    except ImportError:
        res["torchvision_schema_shim_used"] = None
    if ok:
        try:
            io = importlib.import_module("sglang.srt.managers.io_struct")
            for n in REQS:
                kind, fields = struct_info(getattr(io, n))
                if n == "GenerateReqInput":
                    fields = {k: v for k, v in fields.items() if "lora" in k}
                res[n] = {"kind": kind, "fields": fields}
            lu = importlib.import_module("sglang.srt.lora.utils")
            norm = lu.get_normalized_target_modules
            res["normalizer"] = "sglang.srt.lora.utils.get_normalized_target_modules"
            res["normalized(q,k,v,o,gate,up,down)"] = sorted(norm(
                ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
            sa_mod = importlib.import_module("sglang.srt.server_args")
            res["SUPPORTED_LORA_TARGET_MODULES"] = sorted(getattr(sa_mod, "SUPPORTED_LORA_TARGET_MODULES", []))
            d = tiny_model_dir()
            t = time.time()
            for tm in (["all"], "q_proj"):
                route, resolved = lora_check(d, tm)
                res["lora_check_route"] = route
                res[f"lora_check({tm!r})"] = sorted(resolved) if resolved else resolved
            res["lora_check_secs"] = round(time.time() - t, 2)
            import torch

            from sglang.srt.utils import MultiprocessingSerializer

            x = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
            back = MultiprocessingSerializer.deserialize(MultiprocessingSerializer.serialize(x, output_str=True))
            res["serializer_roundtrip_cpu"] = bool(torch.equal(back["w"], x["w"]))
            ok = ok and res["serializer_roundtrip_cpu"]
        except BaseException as e:  # noqa: BLE001
            ok = False
            res["error"] = f"{type(e).__name__}: {e}"
            res["traceback"] = traceback.format_exc(limit=-8)
    res["ok"], res["secs"] = ok, round(time.time() - t0, 1)
    text = json.dumps(res, indent=1, default=str)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
