"""The SGLang topology YAML against the real installed SGLang ``ServerArgs`` and verl's
config trees: every refusal names the key path inside the YAML and the fix; a valid LoRA actor + frozen judge
yields the expected placement, and the doctor prints it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import sglang_or_skip  # noqa: E402

pytest.importorskip("verl")
pytest.importorskip("hydra")

from verl_sglang_lora.runtime.settings import PluginSettings  # noqa: E402
from verl_sglang_lora.tools.cli import main  # noqa: E402
from verl_sglang_lora.tools.doctor import compose_config  # noqa: E402
from verl_sglang_lora.topology import (  # noqa: E402
    TopologyError,
    fields_of,
    installed_server_args_fields,
    plan_placement,
    server_args_fields_from_source,
    topology_from_config,
)

ACTOR_PATH = "/ckpt/qwen3-0.6b"
JUDGE_PATH = "/ckpt/judge-1.7b"
FSDP_LORA = ["actor_rollout_ref.model.lora_rank=32", "actor_rollout_ref.model.lora_alpha=32",
             "actor_rollout_ref.actor.strategy=fsdp2"]

VALID = f"""
sglang:
  - name: actor
    update_weights: true
    server_groups:
      - worker_type: regular
        num_gpus: 4
        num_gpus_per_engine: 2
        overrides:
          mem_fraction_static: 0.5
  - name: judge
    model_path: {JUDGE_PATH}
    update_weights: false
    num_gpus_per_engine: 1
    server_groups:
      - worker_type: regular
        num_gpus: 2
        overrides:
          mem_fraction_static: 0.2
          context_length: 4096
"""


@pytest.fixture(scope="module")
def server_args_fields() -> frozenset[str]:
    """The real installed ServerArgs' declared fields (imported; source-read where SGLang cannot import)."""
    return installed_server_args_fields()


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "topology.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def cfg_for(path: Path | str, *extra: str, tp: int = 2, gpus: int = 4, model: str = ACTOR_PATH):
    return compose_config("ppo_trainer", [
        f"actor_rollout_ref.model.path={model}", *FSDP_LORA,
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}", f"trainer.n_gpus_per_node={gpus}",
        f"actor_rollout_ref.rollout.engine_kwargs.sglang_lora.topology={path}", *extra])


def refusal(tmp_path, fields, text: str, **kw) -> str:
    with pytest.raises(TopologyError) as exc:
        topology_from_config(cfg_for(write(tmp_path, text), **kw), fields)
    return str(exc.value)


def actor_group(tp: int = 2, second_group_tp: int | None = None) -> str:
    groups = f"[{{worker_type: regular, num_gpus: 2, num_gpus_per_engine: {tp}}}"
    if second_group_tp is None:
        groups = f"[{{worker_type: regular, num_gpus: 4, num_gpus_per_engine: {tp}}}"
    else:
        groups += f", {{worker_type: regular, num_gpus: 2, num_gpus_per_engine: {second_group_tp}}}"
    return f"sglang:\n  - name: actor\n    update_weights: true\n    server_groups: {groups}]\n"


# ---- the installed ServerArgs -------------------------------------------------------------------------------
def test_server_args_fields_are_the_installed_ones(server_args_fields):
    sa = sglang_or_skip("sglang.srt.server_args")
    assert server_args_fields == fields_of(sa.ServerArgs)
    assert {"tp_size", "mem_fraction_static", "lora_target_modules", "context_length"} <= server_args_fields
    # the doctor reads them from the source (no SGLang import in-process): the same set
    assert server_args_fields_from_source() == server_args_fields


RELEASES = sorted(p.name for p in (Path(__file__).resolve().parents[1] / ".cache" / "sglang").glob("0.*"))


@pytest.mark.parametrize("version", RELEASES)
def test_source_reader_equals_each_releases_own_server_args(version):
    """The doctor's no-import reader against the release's imported ServerArgs (a dataclass through 0.5.18, 0.5.23's
    msgspec struct collected from its namespaces), each release dir first on the path of a fresh interpreter."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    release = root / ".cache" / "sglang" / version
    code = ("import json; from sglang.srt.server_args import ServerArgs; "
            "from verl_sglang_lora.topology.schema import fields_of; print(json.dumps(sorted(fields_of(ServerArgs))))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(release), str(root)])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = frozenset(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert len(imported) > 100
    assert server_args_fields_from_source(release / "sglang") == imported


def test_a_layout_the_reader_does_not_know_is_an_error(tmp_path: Path):
    (tmp_path / "srt").mkdir()
    (tmp_path / "srt" / "server_args.py").write_text("class ServerArgs:\n    def __post_init__(self):\n        pass\n")
    with pytest.raises(LookupError, match="declares no field"):  # never an empty set, which refuses every override
        server_args_fields_from_source(tmp_path)


def test_fields_of_a_msgspec_struct():
    msgspec = pytest.importorskip("msgspec")

    class Args(msgspec.Struct):
        tp_size: int = 1
        model_path: str = ""

    assert fields_of(Args) == {"tp_size", "model_path"}


# ---- the valid two-model topology and its placement ----------------------------------------------------------
def test_valid_actor_and_frozen_judge_placement(tmp_path, server_args_fields):
    topo = topology_from_config(cfg_for(write(tmp_path, VALID)), server_args_fields)
    assert [m.name for m in topo.models] == ["actor", "judge"]
    assert topo.actor.name == "actor" and topo.actor.model_path == ACTOR_PATH and topo.actor.update_weights
    judge = topo.model("judge")
    assert judge.model_path == JUDGE_PATH and not judge.update_weights and not judge.is_actor
    assert topo.warnings == ()
    rows = [(r.model, r.group, r.engine, r.gpus, r.tp, r.role) for r in plan_placement(topo)]
    assert rows == [
        ("actor", 0, 0, (0, 1), 2, "actor (update_weights)"),
        ("actor", 0, 1, (2, 3), 2, "actor (update_weights)"),
        ("judge", 0, 0, (0,), 1, "frozen"),
        ("judge", 0, 1, (1,), 1, "frozen"),
    ]
    assert plan_placement(topo)[2].overrides == {"mem_fraction_static": 0.2, "context_length": 4096}


def test_settings_accept_the_topology_key(tmp_path):
    cfg = cfg_for(write(tmp_path, VALID))
    assert PluginSettings.from_rollout_config(cfg.actor_rollout_ref.rollout).topology.endswith("topology.yaml")
    base = compose_config("ppo_trainer", FSDP_LORA)  # the overlay's default: empty, no topology
    assert PluginSettings.from_rollout_config(base.actor_rollout_ref.rollout).topology == ""
    assert topology_from_config(base) is None


def test_update_weights_inferred_from_the_model_path_with_a_warning(tmp_path, server_args_fields):
    text = f"""
    sglang:
      - name: policy
        server_groups: [{{worker_type: regular, num_gpus: 4, num_gpus_per_engine: 2}}]
      - name: ref
        model_path: {JUDGE_PATH}
        server_groups: [{{worker_type: regular, num_gpus: 1, num_gpus_per_engine: 1}}]
    """
    topo = topology_from_config(cfg_for(write(tmp_path, text)), server_args_fields)
    assert topo.actor.name == "policy" and topo.actor.update_weights and topo.actor.update_weights_inferred
    assert not topo.model("ref").update_weights
    assert any("sglang[0].update_weights is unset: inferred true" in w and "equals" in w for w in topo.warnings)
    assert any("sglang[1].update_weights is unset: inferred false" in w and "set `update_weights: false`" in w
               for w in topo.warnings)


# ---- refusals: each names the key path in the YAML and the fix -----------------------------------------------
def test_unknown_override_field_suggests_the_closest_serverargs_field(tmp_path, server_args_fields):
    text = VALID.replace("context_length: 4096", "tp_sizee: 2")
    msg = refusal(tmp_path, server_args_fields, text)
    assert "sglang[1].server_groups[0].overrides.tp_sizee: not a field of the installed SGLang's ServerArgs" in msg
    assert "Fix: rename it: did you mean `tp_size`?" in msg
    assert "nothing was launched" in msg


def test_tp_size_override_is_refused_for_num_gpus_per_engine(tmp_path, server_args_fields):
    msg = refusal(tmp_path, server_args_fields, VALID.replace("context_length: 4096", "tp_size: 2"))
    assert "sglang[1].server_groups[0].overrides.tp_size:" in msg
    assert "Fix: delete overrides.tp_size and set num_gpus_per_engine" in msg


def test_gpu_count_that_does_not_divide(tmp_path, server_args_fields):
    text = VALID.replace("num_gpus: 2\n", "num_gpus: 3\n").replace("num_gpus_per_engine: 1", "num_gpus_per_engine: 2")
    msg = refusal(tmp_path, server_args_fields, text)
    assert "sglang[1].server_groups[0].num_gpus: 3 GPUs do not divide into engines of 2 GPUs " \
           "(from sglang[1].num_gpus_per_engine)" in msg
    assert "Fix: make num_gpus a multiple of 2 (e.g. 2)" in msg


def test_groups_disagreeing_on_the_model_path(tmp_path, server_args_fields):
    text = textwrap.dedent(VALID) + "      - worker_type: regular\n        num_gpus: 1\n" \
        "        overrides:\n          model_path: /ckpt/other\n"
    msg = refusal(tmp_path, server_args_fields, text)
    assert "sglang[1].server_groups[1].overrides.model_path: the groups of model `judge` disagree on the model " \
           "path" in msg
    assert "Fix: all groups of one model serve one checkpoint" in msg


@pytest.mark.parametrize("key,value,fix", [
    ("lora_target_modules", "[q_proj]", "set actor_rollout_ref.model.target_modules"),
    ("enable_lora", "false", "the plugin enables LoRA from actor_rollout_ref.model.lora_rank"),
    ("max_lora_rank", "64", "set actor_rollout_ref.rollout.engine_kwargs.sglang_lora.max_lora_rank instead"),
    ("max_loras_per_batch", "8", "delete the override: the plugin sizes the pool"),
    ("custom_weight_loader", "[x.y]", "delete the override: the plugin sets it for the resident in-place sync"),
])
def test_overrides_that_break_the_lora_contract_on_the_actor(tmp_path, server_args_fields, key, value, fix):
    text = VALID.replace("mem_fraction_static: 0.5", f"{key}: {value}")
    msg = refusal(tmp_path, server_args_fields, text)
    assert f"sglang[0].server_groups[0].overrides.{key}: the plugin sets this ServerArgs field" in msg
    assert f"Fix: {fix}" in msg


def test_lora_fields_on_a_frozen_model_are_its_own(tmp_path, server_args_fields):
    text = VALID.replace("context_length: 4096", "max_loras_per_batch: 4")
    assert topology_from_config(cfg_for(write(tmp_path, text)), server_args_fields).model("judge")


def test_actor_without_update_weights(tmp_path, server_args_fields):
    msg = refusal(tmp_path, server_args_fields, VALID.replace("update_weights: true", "update_weights: false"))
    assert "sglang[0].update_weights: the actor `actor` would not receive the trainer's weights" in msg
    assert "Fix: set `update_weights: true` on the actor" in msg


def test_no_actor_at_all(tmp_path, server_args_fields):
    text = VALID.replace("name: actor", "name: policy").replace("update_weights: true", "update_weights: false")
    msg = refusal(tmp_path, server_args_fields, text)
    assert "sglang: no model is the trained actor" in msg and "Fix: name the model verl trains `actor`" in msg


def test_second_model_with_update_weights(tmp_path, server_args_fields):
    msg = refusal(tmp_path, server_args_fields, VALID.replace("update_weights: false", "update_weights: true"))
    assert "sglang[1].update_weights: only the actor `actor` receives the trainer's weights" in msg
    assert "Fix: set `update_weights: false` (frozen)" in msg


@pytest.mark.parametrize("wtype,why", [
    ("prefill", "PD disaggregation"), ("decode", "PD disaggregation"), ("encoder", "EPD encoder"),
    ("placeholder", "GPUs are reserved by verl's resource pools"),
])
def test_worker_types_the_plugin_cannot_run(tmp_path, server_args_fields, wtype, why):
    text = VALID.replace("worker_type: regular\n        num_gpus: 2", f"worker_type: {wtype}\n        num_gpus: 2")
    msg = refusal(tmp_path, server_args_fields, text)
    assert f"sglang[1].server_groups[0].worker_type: `{wtype}` cannot run with the plugin yet: {why}" in msg
    assert "Fix: use `worker_type: regular`" in msg


def test_actor_groups_with_different_tp_are_refused_because_verl_builds_one_replica_shape(tmp_path,
                                                                                        server_args_fields):
    text = actor_group(tp=2, second_group_tp=1)
    msg = refusal(tmp_path, server_args_fields, text)
    assert "sglang[0].server_groups: the actor's groups differ in TP size" in msg
    assert "every rollout replica from one RolloutConfig" in msg
    assert "Fix: give all of the actor's groups one num_gpus_per_engine" in msg


def test_actor_tp_differs_from_rollout_tp(tmp_path, server_args_fields):
    msg = refusal(tmp_path, server_args_fields, actor_group(tp=4), tp=2)
    assert "sglang[0].server_groups[0].num_gpus_per_engine: the actor's TP size 4 differs from " \
           "actor_rollout_ref.rollout.tensor_model_parallel_size=2" in msg
    assert "Fix: set actor_rollout_ref.rollout.tensor_model_parallel_size=4" in msg


def test_total_gpus_vs_trainer(tmp_path, server_args_fields):
    msg = refusal(tmp_path, server_args_fields, VALID, gpus=8)
    assert "sglang[0].server_groups: the actor's groups hold 4 GPU(s) but verl puts its rollout replicas on all " \
           "trainer.n_gpus_per_node x trainer.nnodes = 8 GPU(s)" in msg
    assert "Fix: make the actor's num_gpus add up to 8" in msg
    text = VALID.replace("num_gpus: 2\n", "num_gpus: 6\n")
    msg = refusal(tmp_path, server_args_fields, text)
    assert "sglang[1].server_groups: the frozen models up to `judge` need 6 GPU(s), more than the 4" in msg
    assert "Fix: lower the frozen models' num_gpus to at most 4" in msg


def test_unknown_model_and_group_keys(tmp_path, server_args_fields):
    text = VALID.replace("update_weights: false", "update_weight: false").replace(
        "num_gpus: 2\n", "num_gpu: 2\n")
    msg = refusal(tmp_path, server_args_fields, text)
    assert "sglang[1].update_weight: unknown model key. Fix: rename it: did you mean `update_weights`?" in msg
    assert "sglang[1].server_groups[0].num_gpu: unknown server-group key. Fix: rename it: did you mean " \
           "`num_gpus`?" in msg
    assert "sglang[1].server_groups[0].num_gpus: must be a positive integer" in msg


def test_missing_file_and_missing_top_level_key(tmp_path, server_args_fields):
    with pytest.raises(TopologyError) as exc:
        topology_from_config(cfg_for(tmp_path / "nope.yaml"), server_args_fields)
    assert "is not a file. Fix: point actor_rollout_ref.rollout.engine_kwargs.sglang_lora.topology at" in str(exc.value)
    msg = refusal(tmp_path, server_args_fields, "models:\n  - name: actor\n")
    assert "sglang: the YAML must have a top-level `sglang:` key" in msg


# ---- the doctor ------------------------------------------------------------------------------------------------
def doctor(capsys, *args: str) -> tuple[int, str]:
    code = main(["doctor", *args])
    return code, capsys.readouterr().out


def test_doctor_prints_the_planned_placement(tiny_qwen3, tmp_path, capsys):
    topo = write(tmp_path, VALID)
    code, out = doctor(capsys, f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP_LORA,
                       "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "trainer.n_gpus_per_node=4",
                       f"actor_rollout_ref.rollout.engine_kwargs.sglang_lora.topology={topo}")
    topology_rows = [ln for ln in out.splitlines() if ln.startswith("topology ")]
    assert any("| OK " in ln and "actor [actor]: 2 engine(s) on GPU(s) 0,1,2,3, TP 2" in ln for ln in topology_rows), out
    # the run's own launch checks, before any GPU: this YAML's judge has two engines and no sglang-router here
    launch = [ln for ln in topology_rows if ln.startswith("topology launch")]
    assert launch and all("| FAIL" in ln for ln in launch) and any("sglang-router" in ln for ln in launch), out
    assert "Planned SGLang placement" in out
    table = out.split("Planned SGLang placement", 1)[1]
    assert "judge | 0     | regular | frozen" in table and '{"context_length": 4096, "mem_fraction_static": 0.2}' in table
    assert "actor | 0     | regular | actor (update_weights) | 1      | 2-3" in table


def test_doctor_fails_a_bad_topology_naming_the_key(tiny_qwen3, tmp_path, capsys):
    topo = write(tmp_path, VALID.replace("context_length: 4096", "tp_sizee: 2"))
    code, out = doctor(capsys, f"actor_rollout_ref.model.path={tiny_qwen3}", *FSDP_LORA,
                       "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "trainer.n_gpus_per_node=4",
                       f"actor_rollout_ref.rollout.engine_kwargs.sglang_lora.topology={topo}")
    assert code == 1
    assert "sglang[1].server_groups[0].overrides.tp_sizee: not a field of the installed SGLang's ServerArgs" in out
    assert "did you mean `tp_size`?" in out and "Planned SGLang placement" not in out


def test_a_run_accepts_a_matching_topology_and_refuses_a_mismatch_with_the_reason(tiny_qwen3, tmp_path):
    """The setting is no longer refused as such (items 2-3 launch it); a YAML that does not fit this run's rollout
    config is, each line with the YAML key path and the fix (tests/test_topology_launch_on_cpu.py has the rest)."""
    from verl_sglang_lora.verl_glue.config_guards import config_problems

    assert VALID.count("num_gpus: 2\n") == 1
    topo = write(tmp_path, VALID.replace("num_gpus: 2\n", "num_gpus: 1\n"))  # one judge engine: no router needed
    model = {"path": str(tiny_qwen3), "lora_rank": 8, "lora_alpha": 16}
    rollout = {"name": "sglang_lora", "mode": "async", "tensor_model_parallel_size": 2, "n_gpus_per_node": 4,
               "gpu_memory_utilization": 0.5, "engine_kwargs": {"sglang_lora": {"topology": str(topo)}}}
    assert [p for p in config_problems(rollout, model) if "topology" in p] == []
    problems = config_problems({**rollout, "tensor_model_parallel_size": 1}, model)
    assert any(p.startswith(f"actor_rollout_ref.rollout.engine_kwargs.sglang_lora.topology={topo}: sglang[0]") and
               "differs from actor_rollout_ref.rollout.tensor_model_parallel_size=1" in p and "Fix:" in p
               for p in problems), problems
