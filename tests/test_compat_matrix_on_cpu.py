"""The compatibility matrix on CPU: the plugin's contract against the real code of SGLang 0.5.8 / 0.5.12 / 0.5.18 /
0.5.23, and registration + Hydra composition on verl 0.8.0 / 0.9.0 / 0.9.1.

Each release runs in its own interpreter (``verl_sglang_lora/tools/compat_probe.py`` with the release dir first on PYTHONPATH:
``.cache/sglang/V`` from scripts/sglang_release.sh, ``.cache/verl/V`` from scripts/verl_release_env.sh; verl 0.9.1
is the venv's). All probes start at once and run concurrently. A missing release dir skips its tests, except with
VERL_SGLANG_LORA_REQUIRE_SGLANG=1 (set by scripts/run_cpu_tests.sh), where it fails them.

KNOWN_GAPS are contract checks that fail today against a release's real code (found by this matrix, recorded in
docs/compatibility.md). They are strict xfails: fixing the plugin turns them into XPASS, which fails the run until
the entry is removed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verl_sglang_lora.releases import SGLANG_RELEASES, VENV_VERL, VERL_RELEASES

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "verl_sglang_lora" / "tools" / "compat_probe.py"
TP_SIZES = ("1", "2", "4")
HF_LINEAR = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
PROBE_TIMEOUT_S = 240

# docs/cpu_environment.md, "Per SGLang release"
REQUEST_FIELD = {
    "0.5.8": ("serialized_tensors", False),
    "0.5.12": ("serialized_tensors", False),
    "0.5.18": ("serialized_named_tensors", True),
    "0.5.23": ("serialized_named_tensors", True),
}
# Releases whose LoadLoRAAdapterFromTensorsReqInput declares load_format (the flattened-bucket wire form)
# The ServerArgs field capping the decode CUDA-graph batch (device scripts pass it by this name)
CUDA_GRAPH_FIELD = {"0.5.8": "cuda_graph_max_bs", "0.5.12": "cuda_graph_max_bs",
                    "0.5.18": "cuda_graph_max_bs_decode", "0.5.23": "cuda_graph_max_bs_decode"}
FLATTENED = {"0.5.8": False, "0.5.12": True, "0.5.18": True, "0.5.23": True}

# Contract checks that fail against a release's real code, as strict xfails: a fix turns them into XPASS, which
# fails the run until the entry is removed. Both gaps this matrix found are fixed (tp >= 2 on 0.5.18+: one
# serialization per rank; Megatron's "all-linear" on 0.5.8: sent as the module list) -- it is empty.
KNOWN_GAPS: dict[tuple[str, str, str], str] = {}

LAUNCHES = ("all_linear", "explicit_list", "megatron_default")
ADAPTER_PAIRS = (
    "fsdp_peft_to_dict@all_linear",
    "fsdp_peft_to_dict@explicit_list",
    "megatron_peft_config@megatron_default",
    "megatron_peft_config@all_linear",
)


def _required() -> bool:
    return os.environ.get("VERL_SGLANG_LORA_REQUIRE_SGLANG") == "1"


def _release_dir(kind: str, version: str) -> Path | None:
    if kind == "verl" and version == VENV_VERL:
        return None
    return ROOT / ".cache" / kind / version


class _Run:
    def __init__(self, label: str, args: list[str], pythonpath: Path | None) -> None:
        env = dict(os.environ)
        env.pop("VERL_USE_EXTERNAL_MODULES", None)
        env.pop("PYTHONPATH", None)
        if pythonpath is not None:
            env["PYTHONPATH"] = str(pythonpath)
        self.label, self.t0 = label, time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, str(PROBE), *args], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def result(self) -> dict:
        try:
            out, err = self.proc.communicate(timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return {"crashed": f"{self.label}: probe timed out after {PROBE_TIMEOUT_S}s"}
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if not lines:
            tail = "\n".join(err.strip().splitlines()[-15:])
            return {"crashed": f"{self.label}: probe exit {self.proc.returncode}, no JSON line\n{tail}"}
        data = json.loads(lines[-1])
        data["wall_s"] = round(time.perf_counter() - self.t0, 1)
        return data


@pytest.fixture(scope="module")
def probes() -> dict:
    """Start every probe at once, then collect: {("sglang", V) | ("verl", V): result}."""
    runs: dict[tuple[str, str], _Run | dict] = {}
    for v in SGLANG_RELEASES:
        d = _release_dir("sglang", v)
        runs[("sglang", v)] = _Run(f"sglang {v}", ["sglang"], d) if d.is_dir() else {"missing": str(d)}
    for v in VERL_RELEASES:
        d = _release_dir("verl", v)
        if d is not None and not d.is_dir():
            runs[("verl", v)] = {"missing": str(d)}
        else:
            runs[("verl", v)] = _Run(f"verl {v}", ["verl"], d)
    return {k: (r.result() if isinstance(r, _Run) else r) for k, r in runs.items()}


def _get(probes: dict, kind: str, version: str) -> dict:
    data = probes[(kind, version)]
    if "missing" in data:
        script = "scripts/sglang_release.sh" if kind == "sglang" else "scripts/verl_release_env.sh"
        msg = f"{kind} {version}: {data['missing']} is missing (bash {script} {version})"
        if _required():
            pytest.fail(msg + " and VERL_SGLANG_LORA_REQUIRE_SGLANG=1")
        pytest.skip(msg)
    assert "crashed" not in data, data["crashed"]
    assert "error" not in data, f"{data['error']}\n{data.get('traceback', '')}"
    return data


def _param(version: str, group: str, name: str):
    reason = KNOWN_GAPS.get((version, group, name))
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(version, name, id=f"{version}-{name}", marks=marks)


# ---- SGLang: the plugin's contract ------------------------------------------------------------------------------
@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_probe_ran_against_that_release(probes, version):
    data = _get(probes, "sglang", version)
    assert data["sglang_version"] == version
    assert data["sglang_file"].startswith(str(ROOT / ".cache" / "sglang" / version)), data["sglang_file"]
    field, per_rank = REQUEST_FIELD[version]
    shape = data["plugin"]["request_shape"]
    assert (shape["field"], shape["per_rank"], shape["msgspec"]) == (field, per_rank, per_rank)
    assert shape["has_checksums"] is per_rank


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_cuda_graph_flag_is_the_release_own(probes, version):
    assert _get(probes, "sglang", version)["plugin"]["cuda_graph_flag"].get("field") == CUDA_GRAPH_FIELD[version]


@pytest.mark.parametrize("version, tp", [_param(v, "request", tp) for v in SGLANG_RELEASES for tp in TP_SIZES])
def test_request_is_decoded_and_round_trips(probes, version, tp):
    """build_lora_request -> request_to_json -> JSON -> the release's pydantic decode -> its deserializer."""
    data = _get(probes, "sglang", version)
    res = data["plugin"]["request"][tp]
    assert res["ok"], res.get("error")
    field, per_rank = REQUEST_FIELD[version]
    assert res["field"] == field and res["decoded_type"] == "LoadLoRAAdapterFromTensorsReqInput"
    assert res["tensors_equal"] and res["blobs"] == (int(tp) if per_rank else 1)
    assert res["checksums_sent"] is per_rank
    # one flattened byte tensor per rank where the release takes it, the name->tensor dict elsewhere
    assert res["load_format"] == ("flattened_bucket" if FLATTENED[version] else None)


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_per_tensor_request_still_round_trips(probes, version):
    """flatten=False: the name->tensor dict, decoded and deserialized by the release (0.5.8's only form)."""
    res = _get(probes, "sglang", version)["plugin"]["request_per_tensor"]
    assert res["ok"], res.get("error")
    assert res["tensors_equal"] and res["load_format"] is None


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_scheduler_priming_update_is_empty_on_every_rank(probes, version):
    """ipc_reducers' update_weights_from_tensor: the release decodes it and each rank deserializes []."""
    res = _get(probes, "sglang", version)["plugin"]["empty_tensor_update"]
    assert res["ok"], res.get("error")
    assert res["ranks"] == 2 and res["flush_cache"] is False
    # the fact that makes the priming necessary, read from the release's own tp_worker.py
    patches = _get(probes, "sglang", version)["plugin"]["lora_load_patches_reducers"]
    assert patches["ok"], patches.get("error")
    assert patches["patches"] is (version not in ("0.5.8", "0.5.12"))


# None: the path runs; else a word of the reason it does not (the answer docs/compatibility.md gives)
RESIDENT = {"0.5.8": None, "0.5.12": None, "0.5.18": None, "0.5.23": None}
# 0.5.23 takes tensor updates only inside begin/end_weight_update: the server opens one per loader call, and keeps
# the in-place path off on a quantized base (the session's end re-processes the base weights)
SESSION = {"0.5.8": False, "0.5.12": False, "0.5.18": False, "0.5.23": True}
# whether the server primes the scheduler after launch: not where a tensor update outside a weight-update session is
# refused (0.5.23), whose adapter load applies the torch patch itself
PRIMES = {"0.5.8": True, "0.5.12": True, "0.5.18": True, "0.5.23": False}


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_resident_support_per_release(probes, version):
    """Read from that release's own code: whether the resident in-place path applies, whether the server primes the
    scheduler, and that the launch wrapper keeps the release's ServerArgs fields."""
    res = _get(probes, "sglang", version)["plugin"]["resident"]
    assert res["ok"], res.get("error")
    assert (res["unsupported"] is None) if RESIDENT[version] is None else (RESIDENT[version] in res["unsupported"])
    assert "scheduler ranks" in res["unsupported_two_ranks"]  # TP x DP > 1: no per-rank sources yet
    assert res["primes"] is PRIMES[version]
    assert res["wrapper_keeps_fields"] is True
    # verl 0.9.1 calls dataclasses.fields() on the (wrapped) ServerArgs: on 0.5.23's msgspec struct its stock launch
    # raises TypeError; through the plugin's wrapper it reads the struct's own field names
    assert res["verl_reads_fields"].get("same") is True, res["verl_reads_fields"]
    assert res["weight_update_session"] is SESSION[version]
    # the loader's requests answered by the release's own scheduler-side handlers (the model runner a recorder)
    flow = res["loader_request_flow"]
    update = "update_weights_from_tensor:UpdateWeightsFromTensorReqInput"
    refused = "raised: update_weights_from_tensor: the runner refused the update"
    if SESSION[version]:  # one session held across both writes, closed on demand and after any refusal
        begin, end = "begin_weight_update:BeginWeightUpdateReqInput", "end_weight_update:EndWeightUpdateReqInput"
        assert flow["route"].startswith("SchedulerWeightUpdaterManager")
        assert flow["ok"] == {"sent": [begin, update, update, end], "session_open": False,
                              "runner": ["begin", "update", "update", "end:post_load=False"]}
        assert flow["update_refused"] == {"sent": [begin, update, end, refused], "session_open": False,
                                          "runner": ["begin", "update", "end:post_load=True"]}
        # SGLang refuses a second begin while its session is open: the plugin ends that one and begins again
        assert flow["left_open"] == {"sent": [begin, end, begin, update, update, end], "session_open": False,
                                     "runner": ["end:post_load=True", "begin", "update", "update", "end:post_load=False"]}
        # SGLang's update check: outside a session the update is refused before it reaches the model runner
        assert flow["outside_session"]["sent"][0] == update and flow["outside_session"]["runner"] == []
        assert "must run between begin_weight_update() and end_weight_update()" in flow["outside_session"]["sent"][1]
    else:  # no session to open: the update alone, accepted outside any session
        assert flow["route"].startswith("Scheduler" if version in ("0.5.8", "0.5.12") else "SchedulerWeightUpdater")
        for scenario in ("ok", "left_open", "outside_session"):
            assert flow[scenario] == {"sent": [update, update], "session_open": None, "runner": ["update", "update"]}
        assert flow["update_refused"] == {"sent": [update, refused], "session_open": None, "runner": ["update"]}
    if SESSION[version]:
        assert "weight-update session" in res["unsupported_quantized_base"]
        assert res["session_structs"] == {"begin_selector": "target", "update_has_selector": True}
    else:
        assert res["unsupported_quantized_base"] is None and res["session_structs"] is None


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_verl_http_client_is_made_concrete_for_the_release(probes, version):
    """verl 0.9.1's HTTP client under the release's real EngineBase: abstract where the release declares the
    weight-update session (stock verl's first sync raises TypeError there, seen on the H200), concrete through the
    plugin, whose begin/end bodies decode with the release's own structs."""
    res = _get(probes, "sglang", version)["plugin"]["http_client"]
    assert res["ok"], res.get("error")
    assert res["plugin_instantiable"] is True
    if SESSION[version]:
        assert res["verl_instantiable"] is False
        assert res["verl_abstract"] == ["begin_weight_update", "end_weight_update"]
        assert res["sent"] == [
            {"endpoint": "begin_weight_update", "body": {"selector": "all"}, "decodes": "BeginWeightUpdateReqInput"},
            {"endpoint": "end_weight_update", "body": {}, "decodes": "EndWeightUpdateReqInput"}]
    else:
        assert res["verl_instantiable"] is True and res["verl_abstract"] == [] and "sent" not in res


@pytest.mark.parametrize("version, launch", [_param(v, "launch_args", n) for v in SGLANG_RELEASES for n in LAUNCHES])
def test_launch_args_pass_the_release_server_args_check(probes, version, launch):
    data = _get(probes, "sglang", version)
    res = data["plugin"]["launch_args"][launch]
    assert res["ok"], res.get("error")
    resolved = set(res["resolved"])
    assert not res["char_split"]
    if launch == "all_linear":
        assert res["launch_args"]["lora_target_modules"] == ["all"]
        if version == "0.5.8":  # expands `all` right in the check, to SGLang's own module list
            assert HF_LINEAR <= resolved <= set(data["supported_target_modules"]), resolved
        else:
            assert resolved == {"all"}
    else:
        assert resolved == HF_LINEAR


@pytest.mark.parametrize(
    "version, pair", [_param(v, "adapter_config", p) for v in SGLANG_RELEASES for p in ADAPTER_PAIRS]
)
def test_adapter_config_is_accepted_by_the_release(probes, version, pair):
    """normalize_peft_config -> the release's LoRAConfig, get_normalized_target_modules, LoRAMemoryPool.can_support."""
    data = _get(probes, "sglang", version)
    assert all(r["ok"] for r in data["plugin"]["adapter_config_normalization"].values())
    res = data["plugin"]["adapter_config"][pair]
    assert res["ok"], res.get("error")
    assert res["peft_type_ok"] and res["can_support"] and not res["char_split"]
    assert res["r"] == 8 and res["lora_alpha"] == 16


def test_known_gaps_name_real_checks():
    groups = {"request": TP_SIZES, "launch_args": LAUNCHES, "adapter_config": ADAPTER_PAIRS}
    for version, group, name in KNOWN_GAPS:
        assert version in SGLANG_RELEASES and name in groups[group], (version, group, name)


# ---- verl: registration and the Hydra overlay -------------------------------------------------------------------
@pytest.mark.parametrize("version", VERL_RELEASES)
def test_both_registries_see_sglang_lora(probes, version):
    data = _get(probes, "verl", version)["verl"]
    assert data["verl_version"] == version
    both = {"RolloutReplicaRegistry": True, "_ROLLOUT_REGISTRY": True}
    assert data["after_import_register"] == both
    assert data["via_VERL_USE_EXTERNAL_MODULES"] == both  # the overlay's hook for Ray workers, every release
    if version == "0.8.0":  # no verl.plugins entry-point loop: only the explicit imports register
        assert data["loads_entry_points"] is False
        assert data["after_import_verl"] == {"RolloutReplicaRegistry": False, "_ROLLOUT_REGISTRY": False}
    else:  # the entry point alone registers on `import verl`
        assert data["loads_entry_points"] is True
        assert data["after_import_verl"] == both


@pytest.mark.parametrize("version", VERL_RELEASES)
@pytest.mark.parametrize("config_name, engine", [("ppo_trainer", "dp"), ("ppo_megatron_trainer", "megatron")])
def test_overlay_composes(probes, version, config_name, engine):
    data = _get(probes, "verl", version)["verl"]
    res = data["compose"][config_name]
    assert res["ok"], res
    assert res["model_engine"] == engine and res["rollout_type"] == "RolloutConfig"
    assert res["lora_as_adapter"] and res["lora_rank"] == 32
    assert res["reward_fn"] == "pkg://verl_sglang_lora.tools.offline_reward"  # the examples' offline reward key
