"""`verl-sglang-lora doctor` against the real installed verl config trees, registries and SGLang sources, on a
tiny real Qwen3 checkpoint: good settings pass; the settings that used to fail on the GPU (regex target modules,
max_lora_rank below the rank, the LoRA rank in the block the engine does not read) fail here, naming the setting."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("hydra")

from verl_sglang_lora.tools.cli import main  # noqa: E402
from verl_sglang_lora.tools.doctor import (  # noqa: E402
    FAIL,
    OK,
    OVERLAY_GROUP,
    OVERLAY_SEARCHPATH,
    WARN,
    matrix_cell,
    overlay_overrides,
    request_shape_from_source,
    sglang_source_root,
)

# FSDP2: with verl's default FSDP1 the doctor fails LoRA adapter mode (verl 0.9.1 hands over an empty adapter; see
# tests/test_bad_lora_settings_on_cpu.py::test_doctor_fails_fsdp1_with_lora_adapter)
FSDP_LORA = ["actor_rollout_ref.model.lora_rank=32", "actor_rollout_ref.model.lora_alpha=32",
             "actor_rollout_ref.actor.strategy=fsdp2"]
MEGATRON_LORA = ["actor_rollout_ref.model.lora.rank=32", "actor_rollout_ref.model.lora.alpha=32"]


def rows(report: str) -> dict[str, list[tuple[str, str]]]:
    """check name -> [(status, detail)] from the printed table."""
    out: dict[str, list[tuple[str, str]]] = {}
    for line in report.splitlines():
        parts = [p.strip() for p in line.split(" | ", 2)]
        if len(parts) == 3 and parts[1] in (OK, WARN, FAIL):
            out.setdefault(parts[0], []).append((parts[1], parts[2]))
    return out


def doctor(capsys, *args: str) -> tuple[int, str]:
    code = main(["doctor", *args])
    return code, capsys.readouterr().out


def status(table: dict, name: str) -> str:
    assert name in table, f"no {name!r} row in {sorted(table)}"
    return table[name][0][0]


def test_good_fsdp_config_passes(tiny_qwen3, capsys):
    code, out = doctor(capsys, f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP_LORA)
    table = rows(out)
    assert code == 0, out
    for name in ("version verl", "version sglang", "version torch", "version ray", "version transformers",
                 "version peft", "entry point", "registration (fresh interpreter)", "config compose", "overlay",
                 "rollout config", "lora", "fsdp version", "plugin settings", "verl guards", "tp vs heads",
                 "max_lora_rank", "launch args", "model", "target modules", "memory tags"):
        assert status(table, name) == OK, out
    assert status(table, "compat matrix") in (OK, WARN)  # WARN only where CI installs an untested pair
    assert "adapter (hot-swapped)" in table["lora"][0][1]
    assert '"lora_target_modules": ["all"]' in table["launch args"][0][1]
    assert '"max_lora_rank": 32' in table["launch args"][0][1]
    # the LoRA kernel backend the launch gets: the plugin's default for the installed SGLang (lora_backends.py)
    from verl_sglang_lora.sglang_contract.lora_backends import plugin_lora_backend

    default = plugin_lora_backend()
    if default:  # None only where SGLang is not importable here
        assert f'"lora_backend": "{default}"' in table["launch args"][0][1]
    assert "q_proj" in table["target modules"][0][1] and ".base_layer.weight ->" in table["target modules"][0][1]
    assert "['kv_cache']" in table["memory tags"][0][1] and "sleep_level=1" in table["memory tags"][0][1]
    # request shape: imported where SGLang imports, read from its source on a CPU host that cannot import it
    assert status(table, "request shape") in (OK, WARN)
    assert "serialized_" in table["request shape"][0][1]
    assert out.rstrip().endswith("0 FAIL")


def test_good_megatron_config_passes_as_a_subprocess(tiny_qwen3):
    proc = subprocess.run(
        [sys.executable, "-m", "verl_sglang_lora", "doctor", "--config-name", "ppo_megatron_trainer",
         f"actor_rollout_ref.model.path={tiny_qwen3}", *MEGATRON_LORA],
        capture_output=True, text=True, timeout=300,
    )
    table = rows(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "engine=megatron rank=32" in table["lora"][0][1]
    # Megatron's linear_qkv/linear_fc1/... become the HF names SGLang serves, found in the checkpoint
    assert '"lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]' in (
        table["launch args"][0][1]
    )
    assert status(table, "target modules") == OK
    # this CPU venv has no Megatron stack: named, with the fix, before any GPU is taken (a WARN: doctor may run on
    # another machine than the training one)
    assert status(table, "megatron stack") == WARN
    assert "megatron-bridge" in table["megatron stack"][0][1] and "transformer-engine-torch" in table["megatron stack"][0][1]
    # verl's default attention backend (flash) without flash-attn: named, and the backend that needs neither offered
    assert "flash-attn" in table["megatron stack"][0][1]
    assert "attention_backend=unfused" in proc.stdout.split("How to fix:")[1]


def test_megatron_stack_offers_no_backend_switch_when_the_backend_needs_nothing_missing(tiny_qwen3, capsys):
    code, out = doctor(capsys, "--config-name", "ppo_megatron_trainer", f"actor_rollout_ref.model.path={tiny_qwen3}",
                       *MEGATRON_LORA, "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend=unfused")
    table = rows(out)
    assert code == 0, out
    assert status(table, "megatron stack") == WARN and "flash-attn" not in table["megatron stack"][0][1]
    assert "attention_backend=unfused" not in out.split("How to fix:")[1]


def test_regex_target_modules_fail_naming_the_setting(tiny_qwen3, capsys):
    code, out = doctor(
        capsys, f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP_LORA,
        'actor_rollout_ref.model.target_modules=".*proj"',
    )
    assert code != 0
    failed = [d for entries in rows(out).values() for s, d in entries if s == FAIL]
    assert any("actor_rollout_ref.model.target_modules" in d and "regex" in d for d in failed), out
    assert "How to fix:" in out and "[FAIL] launch args: actor_rollout_ref.model.target_modules" in out


def test_max_lora_rank_below_rank_fails_naming_the_setting(tiny_qwen3, capsys):
    code, out = doctor(
        capsys, f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP_LORA,
        "actor_rollout_ref.rollout.engine_kwargs.sglang_lora.max_lora_rank=8",
    )
    table = rows(out)
    assert code != 0
    assert status(table, "max_lora_rank") == FAIL
    assert "engine_kwargs.sglang_lora.max_lora_rank=8" in table["max_lora_rank"][0][1]
    assert "[FAIL] max_lora_rank:" in out and ">= 32" in out


def test_rank_in_the_block_the_engine_does_not_read_fails(tiny_qwen3, capsys):
    """FSDP reads the flat lora_rank; model.lora.rank alone trains nothing while the rollout expects an adapter."""
    code, out = doctor(capsys, f"actor_rollout_ref.model.path={tiny_qwen3}", "actor_rollout_ref.model.lora.rank=32")
    table = rows(out)
    assert code != 0 and status(table, "lora") == FAIL
    assert "actor_rollout_ref.model.lora_rank=0" in table["lora"][0][1]


def test_unknown_plugin_setting_fails(tiny_qwen3, capsys):
    code, out = doctor(
        capsys, f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP_LORA,
        "+actor_rollout_ref.rollout.engine_kwargs.sglang_lora.bucket_megabytes=4",
    )
    table = rows(out)
    assert code != 0
    assert status(table, "plugin settings") == FAIL and "bucket_megabytes" in table["plugin settings"][0][1]


def test_target_module_the_checkpoint_lacks_fails(tiny_qwen3, capsys):
    """q_a_proj is a LoRA target SGLang serves (DeepSeek MLA) but Qwen3 has no such module."""
    code, out = doctor(
        capsys, f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP_LORA,
        "actor_rollout_ref.model.target_modules=[q_proj,gate_up_proj,q_a_proj]",
    )
    table = rows(out)
    assert code != 0 and status(table, "launch args") == OK
    assert status(table, "target modules") == FAIL and "['q_a_proj']" in table["target modules"][0][1]
    assert "[FAIL] target modules: set actor_rollout_ref.model.target_modules" in out


def test_overlay_given_twice_is_not_duplicated():
    user = [OVERLAY_SEARCHPATH, OVERLAY_GROUP, "actor_rollout_ref.model.lora_rank=8"]
    assert overlay_overrides(user) == user
    assert overlay_overrides(["a=1"]) == [OVERLAY_SEARCHPATH, OVERLAY_GROUP, "a=1"]


def test_matrix_cells():
    assert matrix_cell("0.9.1", "0.5.12")[0] == OK and "own [sglang] pin" in matrix_cell("0.9.1", "0.5.12")[1]
    assert matrix_cell("0.9.0", "0.5.18.dev0")[0] == OK
    status_, text = matrix_cell("0.7.0", "0.5.12")
    assert status_ == WARN and "untested" in text
    assert matrix_cell(None, "0.5.12")[0] == FAIL


OLD_STRUCT = """
from dataclasses import dataclass, field
@dataclass
class BaseReq:
    rid: Optional[str] = field(default=None, kw_only=True)
@dataclass
class LoadLoRAAdapterFromTensorsReqInput(BaseReq):
    lora_name: str
    config_dict: Dict[str, Any]
    serialized_tensors: str
    pinned: bool = False
"""
NEW_STRUCT = """
import msgspec
class BaseReq(msgspec.Struct, tag=True, kw_only=True):
    rid: Optional[str] = None
class LoadLoRAAdapterFromTensorsReqInput(BaseReq, kw_only=True):
    lora_name: str
    config_dict: Dict[str, Any]
    serialized_named_tensors: Annotated[List[bytes], Base64Bytes()]
    expected_checksums: Optional[Dict[str, str]] = None
"""


@pytest.mark.parametrize(
    "source, field, per_rank, is_msgspec, checksums",
    [
        (OLD_STRUCT, "serialized_tensors", False, False, False),
        (NEW_STRUCT, "serialized_named_tensors", True, True, True),
    ],
)
def test_request_shape_read_from_source_for_both_struct_styles(
    tmp_path, source, field, per_rank, is_msgspec, checksums
):
    (tmp_path / "srt" / "managers").mkdir(parents=True)
    (tmp_path / "srt" / "managers" / "io_struct.py").write_text(textwrap.dedent(source))
    shape = request_shape_from_source(tmp_path)
    assert (shape.field, shape.per_rank, shape.msgspec, shape.has_checksums) == (field, per_rank, is_msgspec, checksums)
    assert "rid" in shape.declared and "lora_name" in shape.declared


def test_source_reading_agrees_with_the_imported_struct():
    """Where SGLang imports, reading its source gives the shape of the real struct (checked in a subprocess, so
    this test process never imports SGLang)."""
    root = sglang_source_root()
    if root is None:
        pytest.skip("SGLang not installed")
    code = (
        "import dataclasses, json\n"
        "from verl_sglang_lora.sglang_contract.lora_request import request_shape\n"
        "print(json.dumps(dataclasses.asdict(request_shape())))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.skip(f"SGLang not importable here: {proc.stderr.strip().splitlines()[-1:]}")
    imported = json.loads(proc.stdout.strip().splitlines()[-1])
    from_source = dataclasses.asdict(request_shape_from_source(root))
    assert {**from_source, "declared": sorted(from_source["declared"])} == {
        **imported, "declared": sorted(imported["declared"])
    }


def test_help_is_instant_and_imports_nothing_heavy():
    code = (
        "import sys\nfrom verl_sglang_lora.tools.cli import main\n"
        "try:\n    main(['doctor', '--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "print(sorted(m for m in ('verl', 'torch', 'hydra', 'sglang', 'ray') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "--config-name" in proc.stdout and "--ray" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    script = Path(sys.executable).parent / "verl-sglang-lora"
    if script.exists():  # the console script of an installed package
        out = subprocess.run([str(script), "doctor", "--help"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "Hydra overrides" in out.stdout


def test_a_cudnn_older_than_torch_was_built_for_fails_with_the_pin(tiny_qwen3, capsys, monkeypatch):
    """The H200 case (torch 2.14.1 built for cuDNN 9.24 over the host's 9.19): torch's own check raises, the doctor
    fails the row naming the wheel to install. torch's check is stood in for here: a CPU torch has no cuDNN."""
    import torch

    from verl_sglang_lora.runtime import cuda_libs

    code, out = doctor(capsys, f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP_LORA)
    assert "cuDNN" not in rows(out)  # a CPU torch: nothing to check
    message = ("cuDNN version incompatibility: PyTorch was compiled  against (9, 24, 0) but found runtime version "
               "(9, 19, 0). PyTorch already comes bundled with cuDNN.")

    def version() -> int:
        raise RuntimeError(message)

    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "version", version)
    monkeypatch.setattr(cuda_libs, "torch_cudnn_pin", lambda: "nvidia-cudnn-cu13==9.24.0.43")
    code, out = doctor(capsys, f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP_LORA)
    table = rows(out)
    assert code != 0 and status(table, "cuDNN") == FAIL
    detail, fix = table["cuDNN"][0][1], out
    assert "compiled against (9, 24, 0)" in detail and "pip install nvidia-cudnn-cu13==9.24.0.43" in fix
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 92400)
    code, out = doctor(capsys, f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP_LORA)
    assert status(rows(out), "cuDNN") == OK and "cuDNN 92400" in rows(out)["cuDNN"][0][1]



def test_exit_code_tells_a_config_problem_from_an_incomplete_environment() -> None:
    from verl_sglang_lora.tools.doctor import FAIL, OK, WARN, Check, exit_code

    ok = Check("lora", OK, "rank 8")
    missing = Check("version sglang", FAIL, "not installed")
    bad_config = Check("verl guards", FAIL, "regex target_modules")
    assert exit_code([ok, Check("overlay", WARN, "")]) == 0
    assert exit_code([ok, missing, Check("compat matrix", FAIL, "")]) == 3
    assert exit_code([ok, missing, bad_config]) == 1


def test_target_modules_are_checked_without_sglang_installed(tiny_qwen3, monkeypatch) -> None:
    """Where SGLang is not installed (a CPU host before the GPU stack), the model's target modules are checked
    against the dense projections every SGLang release serves, not reported missing."""
    from verl_sglang_lora.runtime.lora_plan import LoRAPlan
    from verl_sglang_lora.tools.doctor import OK, Doctor

    d = Doctor([])
    monkeypatch.setattr(Doctor, "supported_modules", lambda self: None)
    from omegaconf import OmegaConf

    d.check_model(OmegaConf.create({"path": str(tiny_qwen3)}), LoRAPlan(8, 8, "all-linear", False), ["all"])
    rows = {c.name: c for c in d.checks}
    assert rows["target modules"].status == OK, rows["target modules"]
    assert "q_proj" in rows["target modules"].detail and "down_proj" in rows["target modules"].detail


def test_an_untested_combination_is_said_with_the_tested_sets() -> None:
    """A plain install can land on a stack no GPU run used (e.g. torch 2.14 and transformers 5.10 beside verl 0.9.1 and
    SGLang 0.5.12): doctor says so, naming the tested sets and the install command; a tested set is OK."""
    from verl_sglang_lora.tools.doctor import OK, WARN, tested_set_row

    status, detail, fix = tested_set_row({"verl": "0.9.1", "sglang": "0.5.12", "torch": "2.11.0",
                                          "transformers": "5.9.0"})
    assert status == OK and detail.startswith("verl0.9.1-sglang0.5.12")
    status, detail, fix = tested_set_row({"verl": "0.9.1", "sglang": "0.5.12", "torch": "2.14.1",
                                          "transformers": "5.10.4"})
    assert status == WARN and detail.startswith("untested combination: verl 0.9.1, sglang 0.5.12, torch 2.14.1")
    assert "verl0.9.1-sglang0.5.23: verl 0.9.1, sglang 0.5.23, torch 2.14.1, transformers 5.19.0" in detail
    assert "constraints/verl0.9.1-sglang0.5.12.txt" in fix


def test_doctor_shows_the_users_lora_backend_and_the_default_fitted_to_the_launch(tiny_qwen3, capsys):
    """A backend set in engine_kwargs.sglang is what the launch gets; DP attention over two ranks moves the plugin's
    triton_v2 default to triton (SGLang 0.5.23 refuses the pair), shown before any worker starts."""
    from verl_sglang_lora.sglang_contract.lora_backends import launch_backend, plugin_lora_backend

    _, out = doctor(capsys, f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP_LORA,
                    "+actor_rollout_ref.rollout.engine_kwargs.sglang.lora_backend=csgmv")
    assert '"lora_backend": "csgmv"' in rows(out)["launch args"][0][1]
    dp = {"enable_dp_attention": True, "dp_size": 2}
    _, out = doctor(capsys, f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP_LORA,
                    *(f"+actor_rollout_ref.rollout.engine_kwargs.sglang.{k}={v}" for k, v in dp.items()))
    default = plugin_lora_backend()
    if default:
        assert f'"lora_backend": "{launch_backend(default, dp)}"' in rows(out)["launch args"][0][1]
