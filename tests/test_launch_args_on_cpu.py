"""LoRA launch args against SGLang's own ServerArgs LoRA check and target-module normalizer."""

from __future__ import annotations

import dataclasses
import os
from types import SimpleNamespace

import pytest

from tests.conftest import sglang_or_skip
from verl_sglang_lora.runtime.lora_plan import lora_plan
from verl_sglang_lora.sglang_contract.launch_args import lora_launch_args
from verl_sglang_lora.sglang_contract.lora_backends import plugin_lora_backend
from verl_sglang_lora.sglang_contract.target_modules import LoRAConfigError, sglang_target_modules
from verl_sglang_lora.verl_glue.server_args import apply_lora_args, wrap_server_args


def _server_args_cls():
    return sglang_or_skip("sglang.srt.server_args").ServerArgs


def _run_sglang_lora_check(overrides: dict):
    """Run the installed SGLang's ``ServerArgs.check_lora_server_args`` on ServerArgs' own defaults + overrides.

    ServerArgs.__post_init__ probes the GPU, so the object is built from the dataclass defaults; the LoRA
    check itself is SGLang's real method.
    """
    cls = _server_args_cls()
    defaults = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
        else:
            defaults[f.name] = None
    ns = SimpleNamespace(**{**defaults, **overrides})
    cls.check_lora_server_args(ns)
    return ns


def test_all_linear_becomes_sglang_sentinel_and_passes_its_check():
    args = lora_launch_args(lora_plan({"lora_rank": 32, "target_modules": "all-linear", "lora": {}}))
    assert args["lora_target_modules"] == ["all"] and args["max_lora_rank"] == 32
    ns = _run_sglang_lora_check(args)
    assert ns.lora_target_modules == {"all"}


def test_the_bug_this_prevents_is_real_in_installed_sglang():
    """A bare string reaches SGLang's set() and is torn into characters (seed layer 1)."""
    ns = _run_sglang_lora_check({"enable_lora": True, "max_lora_rank": 32, "lora_target_modules": "all-linear"})
    assert "i" in ns.lora_target_modules and "all" not in ns.lora_target_modules


def test_explicit_list_is_kept_as_list_and_checked_by_sglang():
    modules = ["q_proj", "k_proj", "v_proj", "o_proj"]
    args = lora_launch_args(lora_plan({"lora_rank": 8, "target_modules": modules, "lora": {}}))
    assert args["lora_target_modules"] == modules
    assert _run_sglang_lora_check(args).lora_target_modules == set(modules)


def test_megatron_module_names_map_to_hf_names_sglang_supports():
    out = sglang_target_modules(["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"])
    assert out == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    get_normalized_target_modules = sglang_or_skip("sglang.srt.lora.utils").get_normalized_target_modules
    assert get_normalized_target_modules(out) == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}


def test_peft_style_wildcard_paths_use_the_last_segment():
    assert sglang_target_modules(["*.layers.0.*.linear_qkv", "model.layers.1.mlp.down_proj"], supported=None) == [
        "q_proj", "k_proj", "v_proj", "down_proj"]


@pytest.mark.parametrize("bad", [".*proj", "q_proj", "model.layers.0.self_attn.q_proj"])
def test_regex_string_refused_naming_the_setting(bad):
    with pytest.raises(LoRAConfigError, match=r"actor_rollout_ref\.model\.target_modules.*all-linear"):
        sglang_target_modules(bad)


def test_module_sglang_cannot_serve_is_refused():
    sglang_or_skip("sglang.srt.server_args")
    with pytest.raises(LoRAConfigError, match="cannot serve as LoRA targets"):
        sglang_target_modules(["q_proj", "conv1d"])


def test_max_rank_below_lora_rank_refused():
    with pytest.raises(LoRAConfigError, match="max_lora_rank"):
        lora_launch_args(lora_plan({"lora_rank": 32, "lora": {}}), max_lora_rank=16)


def test_merge_mode_and_no_lora_launch_without_lora():
    assert lora_launch_args(lora_plan({"lora_rank": 32, "lora": {"merge": True}})) == {}
    assert lora_launch_args(lora_plan({"lora_rank": 0, "lora": {}})) == {}


def test_server_args_wrapper_keeps_dataclass_fields_and_overrides_verl_lora_keys():
    cls = _server_args_cls()
    wrapped = wrap_server_args(cls, {"enable_lora": True, "max_lora_rank": 8, "lora_target_modules": ["all"]})
    # verl 0.9.1 calls dataclasses.fields(ServerArgs) inside launch_server
    assert [f.name for f in dataclasses.fields(wrapped)] == [f.name for f in dataclasses.fields(cls)]
    declared = set(cls.__dataclass_fields__)
    # whatever verl put (the 0.8/0.9.0 bare string) is replaced
    final = apply_lora_args({"model_path": "m", "lora_target_modules": "all-linear", "enable_lora": True}, {"enable_lora": True, "max_lora_rank": 8, "lora_target_modules": ["all"]}, declared)
    assert final["lora_target_modules"] == ["all"]
    # merge mode strips verl's LoRA keys entirely
    assert "enable_lora" not in apply_lora_args({"model_path": "m", "enable_lora": True}, {}, declared)
    with pytest.raises(TypeError, match="does not declare"):
        apply_lora_args({}, {"no_such_field": 1}, declared)


def test_launch_flags_parse_with_sglangs_own_cli():
    """The flags the GPU tests and benchmarks start SGLang with, parsed by the installed SGLang's argparse."""
    import argparse

    from verl_sglang_lora.tools.sglang_launcher import lora_cli_args

    cls = _server_args_cls()
    parser = argparse.ArgumentParser()
    cls.add_cli_args(parser)
    args = lora_launch_args(lora_plan({"lora_rank": 32, "target_modules": ["q_proj", "v_proj"], "lora": {}}))
    ns = parser.parse_args(["--model-path", "m", *lora_cli_args(args)])
    assert (ns.enable_lora, ns.max_lora_rank, ns.lora_target_modules, ns.max_loras_per_batch) == (True, 32, ["q_proj", "v_proj"], 2)


def test_relaunch_reads_the_checkpoint_only_where_verl_asked_for_dummy_weights():
    from verl_sglang_lora.verl_glue.server_args import checkpoint_weights

    assert checkpoint_weights({"model_path": "m", "load_format": "dummy"}) == {"model_path": "m", "load_format": "auto"}
    # a format the user chose is the checkpoint's already
    assert checkpoint_weights({"model_path": "m", "load_format": "safetensors"})["load_format"] == "safetensors"
    cls = _server_args_cls()
    assert "load_format" in cls.__dataclass_fields__  # the key exists in the installed SGLang's ServerArgs


def _run_sglang_deprecated_args_check(port: int):
    """SGLang's own ``_handle_deprecated_args`` (where 0.5.12 derives and range-checks the gRPC port)."""
    cls = _server_args_cls()
    if not hasattr(cls, "_handle_deprecated_args"):
        pytest.skip("this SGLang has no _handle_deprecated_args")
    defaults = {f.name: f.default if f.default is not dataclasses.MISSING else
                f.default_factory() if f.default_factory is not dataclasses.MISSING else None
                for f in dataclasses.fields(cls)}
    ns = SimpleNamespace(**{**defaults, "port": port})
    cls._handle_deprecated_args(ns)
    return ns


def test_server_ports_pass_sglangs_grpc_check_without_the_variable(monkeypatch):
    """The H200 benchmark launch on port 58989 failed 0.5.12's derived-gRPC-port check; the plugin's ports pass it
    with SGLANG_GRPC_PORT unset (setting it would start 0.5.23's native gRPC server)."""
    from verl_sglang_lora.sglang_contract.ports import GRPC_PORT_OFFSET, server_port

    monkeypatch.delenv("SGLANG_GRPC_PORT", raising=False)
    probe = _run_sglang_deprecated_args_check(30000)
    if getattr(probe, "grpc_port", None) is None:
        pytest.skip("this SGLang derives no gRPC port")
    with pytest.raises(ValueError, match="SGLANG_GRPC_PORT"):
        _run_sglang_deprecated_args_check(58989)
    for _ in range(20):
        port = server_port()
        assert _run_sglang_deprecated_args_check(port).grpc_port == port + GRPC_PORT_OFFSET


def test_benchmark_server_leaves_the_grpc_variable_to_the_user(monkeypatch):
    import subprocess

    from verl_sglang_lora.tools import sglang_launcher

    seen = {}
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, env=None: seen.update(cmd=cmd, env=env))
    monkeypatch.delenv("SGLANG_GRPC_PORT", raising=False)
    proc = sglang_launcher.SGLangProcess("m", {"enable_lora": True}, mem_fraction=0.5)
    assert seen["env"] is None and "SGLANG_GRPC_PORT" not in os.environ  # inherits the caller's env untouched
    assert seen["cmd"][seen["cmd"].index("--port") + 1] == str(proc.port) and proc.port + 10000 <= 65535


@pytest.mark.parametrize("backend", [None, "triton"])
def test_gpu_test_server_takes_the_lora_backend_from_the_environment(monkeypatch, backend):
    """``SGLANG_LORA_BACKEND`` runs tests/gpu under one LoRA backend; the flag parses with SGLang's own CLI and names
    one of the backends it declares."""
    import argparse
    import subprocess

    from verl_sglang_lora.tools import sglang_launcher

    seen = {}
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, env=None: seen.update(cmd=cmd))
    if backend:
        monkeypatch.setenv("SGLANG_LORA_BACKEND", backend)
    else:
        monkeypatch.delenv("SGLANG_LORA_BACKEND", raising=False)
    sglang_launcher.SGLangProcess("m", lora_launch_args(lora_plan({"lora_rank": 8, "target_modules": "all-linear",
                                                                   "lora": {}})), mem_fraction=0.5)
    parser = argparse.ArgumentParser()
    _server_args_cls().add_cli_args(parser)
    ns = parser.parse_args(seen["cmd"][3:])  # after "python -m sglang.launch_server"
    # the plugin's default (the fastest the release declares) where the environment names none
    assert ns.lora_backend == (backend or plugin_lora_backend() or parser.get_default("lora_backend"))
    assert seen["cmd"].count("--lora-backend") <= 1
    assert ns.sampling_backend == "pytorch"  # not flashinfer: its kernels would compile in the first test


def test_the_plugin_launches_the_fastest_declared_backend_and_a_users_choice_wins():
    """Adapter mode launches with the first of FASTEST_FIRST the installed SGLang declares; a backend named in
    engine_kwargs.sglang (it reaches ServerArgs as verl's argument) is kept; merge mode sets none."""
    from verl_sglang_lora.sglang_contract.lora_backends import FASTEST_FIRST, declared_lora_backends

    declared, _ = declared_lora_backends()
    assert plugin_lora_backend(["csgmv", "triton", "triton_v2"]) == "triton_v2"
    assert plugin_lora_backend(["csgmv", "triton"]) == "triton"
    assert plugin_lora_backend(["csgmv"]) is None
    expected = next(b for b in FASTEST_FIRST if b in declared)
    plan = lora_plan({"lora_rank": 8, "target_modules": "all-linear", "lora": {}})
    assert "lora_backend" not in lora_launch_args(plan)  # SGLang's own default where none is given
    args = lora_launch_args(plan, lora_backend=plugin_lora_backend())
    assert args["lora_backend"] == expected
    fields = set(_server_args_cls().__dataclass_fields__)
    assert apply_lora_args({"model_path": "m"}, args, fields)["lora_backend"] == expected
    assert apply_lora_args({"model_path": "m", "lora_backend": "csgmv"}, args, fields)["lora_backend"] == "csgmv"
    assert apply_lora_args({"model_path": "m", "lora_backend": None}, args, fields)["lora_backend"] == expected
    # the default fitted to the final arguments: triton where SGLang 0.5.23 refuses triton_v2 (DP attention over more
    # than one rank, two-batch overlap, PD multiplexing); what SGLang itself refuses: test_lora_throughput_on_cpu
    v2 = {**args, "lora_backend": "triton_v2"}
    for final, backend in (({"attn_dp_size": 2}, "triton"), ({"enable_dp_attention": True, "dp_size": 2}, "triton"),
                           ({"enable_dp_attention": True, "dp_size": 1}, "triton_v2"),
                           ({"enable_two_batch_overlap": True}, "triton"), ({"enable_pdmux": True}, "triton"),
                           ({}, "triton_v2")):
        assert apply_lora_args({"model_path": "m", **final}, v2, fields)["lora_backend"] == backend, final
    assert lora_launch_args(lora_plan({"lora_rank": 8, "lora": {"merge": True}}), lora_backend=expected) == {}
    # SGLang's own LoRA check accepts the launch as rendered
    _run_sglang_lora_check({k: v for k, v in args.items() if k != "custom_weight_loader"})


def test_expert_lora_launch_adds_sglangs_moe_modules_and_passes_its_check():
    """target_parameters on the fused experts: SGLang's MoE LoRA modules of the same names join the attention
    targets, one A/B per expert (not the shared-outer format), through SGLang's own LoRA check and CLI."""
    import argparse

    from verl_sglang_lora.tools.sglang_launcher import lora_cli_args

    plan = lora_plan({"lora_rank": 8, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "lora": {},
                      "target_parameters": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]})
    args = lora_launch_args(plan, resident=True)
    assert args["lora_target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj", "down_proj", "gate_up_proj"]
    assert args["experts_shared_outer_loras"] is False
    assert _run_sglang_lora_check(args).lora_target_modules == set(args["lora_target_modules"])
    parser = argparse.ArgumentParser()
    _server_args_cls().add_cli_args(parser)
    ns = parser.parse_args(["--model-path", "m", *lora_cli_args(args)])
    assert ns.lora_target_modules == args["lora_target_modules"] and ns.experts_shared_outer_loras is False
    dense = lora_launch_args(lora_plan({"lora_rank": 8, "target_modules": ["q_proj"], "lora": {}}))
    assert "experts_shared_outer_loras" not in dense
