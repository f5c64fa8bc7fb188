"""On CPU, against the real installed SGLang ``ServerArgs``, verl's config trees and Ray: group
overrides win at launch, each verl replica is its actor engine, frozen models never get a sync, the frozen engines'
exact ServerArgs and command line, ``model_url`` across processes, teardown, and the run-time refusals. A running
SGLang needs a GPU (scripts/device/topology_run.sh); here a stand-in answers ``/health``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("hydra")

from tests.conftest import sglang_or_skip  # noqa: E402
from verl_sglang_lora.tools.doctor import compose_config  # noqa: E402
from verl_sglang_lora.topology import load_topology  # noqa: E402
from verl_sglang_lora.topology.frozen import engine_env, engine_server_args, frozen_engines  # noqa: E402
from verl_sglang_lora.topology.host import HOST_NAME, TopologyHost  # noqa: E402
from verl_sglang_lora.topology.launch import replica_launch_overrides  # noqa: E402
from verl_sglang_lora.topology.processes import guarded_command  # noqa: E402
from verl_sglang_lora.topology.replicas import replica_engine  # noqa: E402
from verl_sglang_lora.topology import router  # noqa: E402
from verl_sglang_lora.topology.serve import serve_command  # noqa: E402
from verl_sglang_lora.topology.sync_guard import (  # noqa: E402
    VERL_SERVER_PREFIX,
    FrozenModelSyncError,
    check_frozen_launch,
    check_sync_target,
)
from verl_sglang_lora.verl_glue.config_guards import config_problems  # noqa: E402
from verl_sglang_lora.verl_glue.server_args import apply_overrides, wrap_server_args  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SETTING = "actor_rollout_ref.rollout.engine_kwargs.sglang_lora.topology"
FSDP_LORA = ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=16",
             "actor_rollout_ref.actor.strategy=fsdp2"]
LORA_ARGS = {"enable_lora": True, "max_lora_rank": 8, "lora_target_modules": ["q_proj", "v_proj"],
             "max_loras_per_batch": 2}
TWO_GROUPS = """
sglang:
  - name: actor
    update_weights: true
    server_groups:
      - {worker_type: regular, num_gpus: 2, overrides: {mem_fraction_static: 0.4}}
      - {worker_type: regular, num_gpus: 2, overrides: {mem_fraction_static: 0.3, context_length: 128}}
"""
JUDGE = """
sglang:
  - name: actor
    update_weights: true
    server_groups: [{worker_type: regular, num_gpus: 1}]
  - name: judge
    update_weights: false
    server_groups:
      - worker_type: regular
        num_gpus: 1
        overrides: {mem_fraction_static: 0.15, context_length: 128, disable_cuda_graph: true}
"""
# a stand-in engine: answers /health on the port of its ServerArgs (a real SGLang needs a GPU)
FAKE_ENGINE = textwrap.dedent("""
    import http.server, json, sys
    port = json.loads(sys.argv[1])["port"]
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404); self.end_headers()
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def fake_command(args: dict) -> list[str]:
    return [sys.executable, "-c", FAKE_ENGINE, json.dumps(args)]


def write(tmp_path: Path, text: str, name: str = "topology.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def run_cfg(model: Path, topo: Path | str, *extra: str, gpus: int = 1, tp: int = 1):
    return compose_config("ppo_trainer", [
        f"actor_rollout_ref.model.path={model}", *FSDP_LORA, f"trainer.n_gpus_per_node={gpus}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}", f"{SETTING}={topo}", *extra])


def rollout_dataclass(cfg):
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)


def topology_lines(cfg) -> list[str]:
    problems = config_problems(cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.model)
    return [p for p in problems if "topology" in p or "data_parallel_size" in p]


def wait_gone(pids: list[int], timeout: float = 20.0) -> list[int]:
    deadline = time.time() + timeout
    alive = list(pids)
    while alive and time.time() < deadline:
        alive = [p for p in alive if _alive(p)]
        time.sleep(0.2)
    return alive


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


# ---- item 2: group overrides at launch -------------------------------------------------------------------------
def test_group_overrides_win_over_verls_args_and_the_lora_keys_stay_the_plugins(tiny_qwen3):
    sa = sglang_or_skip("sglang.srt.server_args")
    overrides = {"mem_fraction_static": 0.33, "context_length": 128, "max_running_requests": 48}
    make = wrap_server_args(sa.ServerArgs, LORA_ARGS, overrides=overrides)
    # what verl's launch_server passes (+ device=cpu so the real ServerArgs validates on this host)
    built = make(model_path=str(tiny_qwen3), device="cpu", mem_fraction_static=0.5, context_length=256,
                 max_running_requests=None, enable_lora=False, tp_size=1)
    assert (built.mem_fraction_static, built.context_length, built.max_running_requests) == (0.33, 128, 48)
    assert built.enable_lora is True and built.max_lora_rank == 8  # the LoRA contract is still the plugin's
    relaunch = wrap_server_args(sa.ServerArgs, LORA_ARGS, True, {"mem_fraction_static": 0.33, "load_format": "dummy"})
    assert relaunch(model_path=str(tiny_qwen3), device="cpu").load_format == "auto"  # a relaunch reads the checkpoint


def test_overrides_merge_refuses_lora_keys_and_unknown_fields():
    declared = {"mem_fraction_static", "enable_lora", "custom_weight_loader"}
    assert apply_overrides({"mem_fraction_static": 0.5, "x": 1}, {"mem_fraction_static": 0.2}, declared) == \
        {"mem_fraction_static": 0.2, "x": 1}
    with pytest.raises(ValueError, match="LoRA launch arguments"):
        apply_overrides({}, {"enable_lora": False}, declared)
    with pytest.raises(TypeError, match="not fields of the installed SGLang ServerArgs"):
        apply_overrides({}, {"mem_fraction_statc": 0.2}, declared)


def test_each_verl_replica_launches_with_its_groups_overrides(tiny_qwen3, tmp_path):
    cfg = run_cfg(tiny_qwen3, write(tmp_path, TWO_GROUPS), gpus=4)
    rollout = rollout_dataclass(cfg)  # the RolloutConfig the server actor holds
    model = {"path": str(tiny_qwen3)}
    got = [asyncio.run(replica_launch_overrides(rollout, model, r, 0)) for r in range(4)]
    assert got == [{"mem_fraction_static": 0.4}] * 2 + [{"mem_fraction_static": 0.3, "context_length": 128}] * 2
    with pytest.raises(ValueError, match=r"sglang\[0\].server_groups: verl started rollout replica 4 but the actor's "
                                         r"groups place 4 engine"):
        asyncio.run(replica_launch_overrides(rollout, model, 4, 0))
    assert asyncio.run(replica_launch_overrides({"engine_kwargs": {"sglang_lora": {"topology": ""}}}, model, 0, 0)) == {}


# ---- the sync guard --------------------------------------------------------------------------------------------
def test_a_frozen_model_never_receives_a_sync(tiny_qwen3, tmp_path):
    topo = load_topology(write(tmp_path, JUDGE), actor_model_path=str(tiny_qwen3))
    check_sync_target(topo, "actor")
    with pytest.raises(FrozenModelSyncError, match=r"`judge`, which is frozen \(update_weights: false\)"):
        check_sync_target(topo, "judge")
    with pytest.raises(FrozenModelSyncError, match="not a model of the topology"):
        check_sync_target(topo, "critic")
    # every verl replica (the only servers verl's sync client reaches) is an engine of the synced actor
    assert replica_engine(topo, 0).model == "actor"
    # frozen engines: no in-place weight path, and never under a name verl's sync resolves
    (spec,) = frozen_engines(topo)
    assert "custom_weight_loader" not in engine_server_args(spec, 30000)
    assert not HOST_NAME.startswith(VERL_SERVER_PREFIX)
    with pytest.raises(FrozenModelSyncError, match="custom_weight_loader"):
        check_frozen_launch("judge", {"custom_weight_loader": ["x.y"]})
    with pytest.raises(FrozenModelSyncError, match="a name verl's weight sync resolves"):
        check_frozen_launch("judge", {}, actor_name="sglang_server_0_0")


# ---- item 3: the frozen engine's launch, without a GPU --------------------------------------------------------
def test_frozen_engine_server_args_and_command_line(tiny_qwen3, tmp_path):
    sa = sglang_or_skip("sglang.srt.server_args")
    topo = load_topology(write(tmp_path, JUDGE), actor_model_path=str(tiny_qwen3))
    (spec,) = frozen_engines(topo)
    assert (spec.model, spec.gpus, spec.tp, spec.model_path) == ("judge", (0,), 1, str(tiny_qwen3))
    args = engine_server_args(spec, 31234)
    built = sa.ServerArgs(**args, device="cpu")  # the real installed ServerArgs takes them as they are
    assert (built.mem_fraction_static, built.context_length, built.disable_cuda_graph) == (0.15, 128, True)
    assert (built.port, built.tp_size, built.base_gpu_id, built.model_path) == (31234, 1, 0, str(tiny_qwen3))
    cmd = serve_command(args)
    assert cmd[:3] == [sys.executable, "-m", "verl_sglang_lora.topology.serve"] and json.loads(cmd[3]) == args
    wrapped = guarded_command(cmd)
    assert wrapped[1:5] == ["-m", "verl_sglang_lora.topology.processes", str(os.getpid()), "--"] and wrapped[5:] == cmd
    env = engine_env({"SGLANG_GRPC_PORT": "5"}, ["3"])
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and env["SGLANG_GRPC_PORT"] == "5"  # a user's pin is kept
    assert engine_env({}, ["1", "2"]) == {"CUDA_VISIBLE_DEVICES": "1,2"}  # none added: 0.5.23 would start gRPC


def test_router_command_and_its_absence(monkeypatch):
    cmd = router.router_command(["http://127.0.0.1:1", "http://127.0.0.1:2"], "127.0.0.1", 9)
    assert cmd[1:3] == ["-m", "sglang_router.launch_router"]
    assert cmd[cmd.index("--worker-urls") + 1:cmd.index("--host")] == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert router.router_installed() == (__import__("importlib").util.find_spec("sglang_router") is not None)


# ---- the run-time check (config_guards): accepted or refused with the reason -----------------------------------
def test_a_matching_topology_is_accepted_by_the_run(tiny_qwen3, tmp_path):
    assert topology_lines(run_cfg(tiny_qwen3, write(tmp_path, JUDGE))) == []
    assert topology_lines(run_cfg(tiny_qwen3, write(tmp_path, TWO_GROUPS), gpus=4)) == []


def test_the_proof_yaml_is_accepted_with_the_proof_settings(tiny_qwen3):
    """examples/topology_judge.yaml, as scripts/device/topology_run.sh runs it (one GPU, TP 1, util 0.5)."""
    example = ROOT / "examples" / "topology_judge.yaml"
    cfg = run_cfg(tiny_qwen3, example, "actor_rollout_ref.rollout.gpu_memory_utilization=0.5")
    assert topology_lines(cfg) == []
    topo = load_topology(example, actor_model_path=str(tiny_qwen3))
    assert [m.name for m in topo.models if not m.update_weights] == ["judge"]
    assert replica_engine(topo, 0).overrides == {"mem_fraction_static": 0.4, "max_running_requests": 48}
    assert "judge_reward.py" in (ROOT / "scripts" / "device" / "topology_run.sh").read_text()


@pytest.mark.parametrize("yaml_text, extra, gpus, needle", [
    (JUDGE.replace("mem_fraction_static: 0.15, ", ""), (), 1,
     "sglang[1].server_groups[0].overrides.mem_fraction_static: unset: a frozen model shares the trainer's GPUs"),
    (JUDGE.replace("0.15", "0.6"), (), 1, "on GPU 0 the SGLang engines' mem_fraction_static add up to 1.1"),
    (JUDGE.replace("num_gpus: 1}]", "num_gpus: 1}]").replace("        num_gpus: 1\n", "        num_gpus: 2\n"),
     (), 1, "the frozen models need 2 GPU(s) but run on the first node's 1"),
    (JUDGE, ("actor_rollout_ref.rollout.data_parallel_size=2",), 1,
     "actor_rollout_ref.rollout.data_parallel_size=2 with actor_rollout_ref.rollout.engine_kwargs.sglang_lora.topology"),
    (JUDGE, ("actor_rollout_ref.rollout.engine_kwargs.sglang_lora.server_max_restarts=1",), 1,
     "server_max_restarts=1 with frozen models in actor_rollout_ref.rollout.engine_kwargs.sglang_lora.topology: a "
     "restarted server actor takes the frozen engines down with it"),
    (JUDGE.replace("disable_cuda_graph: true", "base_gpu_id: 1"), (), 1,
     "sglang[1].server_groups[0].overrides.base_gpu_id: this ServerArgs field places the engine"),
    (TWO_GROUPS, (), 8, "the actor's groups hold 4 GPU(s), not whole nodes of actor_rollout_ref.rollout.n_gpus_per_node=8"),
    (JUDGE.replace("server_groups: [{worker_type: regular, num_gpus: 1}]",
                   "server_groups: [{worker_type: regular, num_gpus: 1, num_gpus_per_engine: 2}]"), (), 1,
     "sglang[0].server_groups[0].num_gpus"),
])
def test_the_run_refuses_with_the_key_and_the_fix(tiny_qwen3, tmp_path, yaml_text, extra, gpus, needle):
    lines = topology_lines(run_cfg(tiny_qwen3, write(tmp_path, yaml_text), *extra, gpus=gpus))
    assert any(needle in ln and "Fix:" in ln for ln in lines), lines


def test_several_engines_of_a_frozen_model_need_the_router(tiny_qwen3, tmp_path, monkeypatch):
    two = JUDGE.replace("num_gpus: 1}]", "num_gpus: 2}]").replace("        num_gpus: 1\n", "        num_gpus: 2\n")
    monkeypatch.setattr(router, "router_installed", lambda: False)
    from verl_sglang_lora.topology import run_checks

    monkeypatch.setattr(run_checks, "router_installed", lambda: False)
    lines = topology_lines(run_cfg(tiny_qwen3, write(tmp_path, two), gpus=2))
    assert any("`judge` has 2 engines and sglang-router is not installed" in ln and "pip install sglang-router" in ln
               for ln in lines), lines
    monkeypatch.setattr(run_checks, "router_installed", lambda: True)
    assert topology_lines(run_cfg(tiny_qwen3, write(tmp_path, two), gpus=2)) == []
    topo = load_topology(write(tmp_path, two), actor_model_path=str(tiny_qwen3), trainer_gpus=2)
    from verl_sglang_lora.topology import host as host_mod

    monkeypatch.setattr(host_mod, "router_installed", lambda: False)
    with pytest.raises(RuntimeError, match="no single address. Fix: pip install sglang-router"):
        TopologyHost(topo, 1, command=fake_command)


# ---- the host: launch, readiness, teardown (stand-in engines) -------------------------------------------------
def test_host_starts_an_engine_when_its_gpus_are_reported_and_stops_it(tiny_qwen3, tmp_path):
    topo = load_topology(write(tmp_path, JUDGE), actor_model_path=str(tiny_qwen3))
    host = TopologyHost(topo, 1, command=fake_command)
    try:
        assert host.url("judge")["state"] == {"judge/group0/engine0": "waiting for GPUs"}
        assert "no frozen model named `critic`" in host.url("critic")["error"]
        assert host.report_devices(0, ["7"]) == ["judge/group0/engine0"]
        (row,) = host.describe()
        assert row["devices"] == ["7"] and row["server_args"]["mem_fraction_static"] == 0.15
        deadline = time.time() + 30
        while not host.gpus_ready([0])["ready"] and time.time() < deadline:
            time.sleep(0.2)
        assert host.url("judge")["url"] == row["url"]
    finally:
        pids = host.pids()
        host.shutdown()
    assert wait_gone(pids) == []


def test_a_dead_engine_is_an_error_not_a_wait(tiny_qwen3, tmp_path):
    topo = load_topology(write(tmp_path, JUDGE), actor_model_path=str(tiny_qwen3))
    host = TopologyHost(topo, 1, command=lambda args: [sys.executable, "-c", "raise SystemExit(3)"])
    host.report_devices(0, ["0"])
    deadline = time.time() + 20
    while host.gpus_ready([0])["error"] is None and time.time() < deadline:
        time.sleep(0.2)
    assert "judge/group0/engine0 exited with code 3" in host.url("judge")["error"]


def test_engines_are_torn_down_when_the_host_process_exits(tiny_qwen3, tmp_path):
    """atexit on a normal exit; the die-with-parent wrapper when the host is killed (Ray ends actors that way)."""
    topo_path = write(tmp_path, JUDGE)
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from tests.test_topology_launch_on_cpu import fake_command
        from verl_sglang_lora.topology import load_topology
        from verl_sglang_lora.topology.host import TopologyHost
        host = TopologyHost(load_topology({str(topo_path)!r}, actor_model_path={str(tiny_qwen3)!r}), 1,
                            command=fake_command)
        host.report_devices(0, ["0"])
        print(host.pids()[0], flush=True)
        if sys.argv[1] == "hang":
            time.sleep(600)
    """)
    for mode in ("exit", "hang"):
        proc = subprocess.Popen([sys.executable, "-c", script, mode], stdout=subprocess.PIPE, text=True)
        pid = int(proc.stdout.readline())
        if mode == "hang":
            assert _alive(pid)
            proc.kill()  # SIGKILL: no atexit runs
        proc.wait(timeout=60)
        assert wait_gone([pid]) == [], mode


# ---- model_url across processes (Ray) ------------------------------------------------------------------------
def test_model_url_from_another_process_of_the_job(tiny_qwen3, tmp_path):
    ray = pytest.importorskip("ray")
    topo = load_topology(write(tmp_path, JUDGE), actor_model_path=str(tiny_qwen3))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        @ray.remote(num_cpus=0)
        class Replica:  # in a run a server actor creates the host and keeps no handle of its own to it
            def start_host(self) -> list[str]:
                from verl_sglang_lora.topology.registry import ensure_host
                return ray.get(ensure_host(topo, 1, command=fake_command).report_devices.remote(0, ["0"]))

        replica = Replica.remote()
        assert ray.get(replica.start_host.remote()) == ["judge/group0/engine0"]
        time.sleep(2)  # the bug this guards: Ray ended the host (and its engines) once the launch's handle was gone
        from verl_sglang_lora.topology.registry import host_namespace
        host = ray.get_actor(HOST_NAME, namespace=host_namespace())

        @ray.remote(num_cpus=0)
        def ask(name: str) -> tuple[int, str]:
            from verl_sglang_lora.topology import model_url
            try:
                return os.getpid(), model_url(name, timeout=60)
            except Exception as exc:  # noqa: BLE001 - the message is the test
                return os.getpid(), f"{type(exc).__name__}: {exc}"

        pid, url = ray.get(ask.remote("judge"))
        assert pid != os.getpid() and url.startswith("http://127.0.0.1:")
        import urllib.request

        assert urllib.request.urlopen(f"{url}/health", timeout=5).status == 200
        _, err = ray.get(ask.remote("critic"))
        assert "no frozen model named `critic`" in err and "frozen models: ['judge']" in err
        pids = ray.get(host.pids.remote())
        ray.kill(host)  # the run ends: Ray ends the host actor, its engines go with it
        assert wait_gone(pids) == []
        _, err = ray.get(ask.remote("judge2"))
        assert "no SGLang topology host in this Ray job (actor `sglang_lora_" in err and f"/{HOST_NAME}`" in err
    finally:
        ray.shutdown()


def test_model_url_outside_a_ray_job_says_how_to_reach_it():
    out = subprocess.run([sys.executable, "-c", "from verl_sglang_lora.topology import model_url; model_url('judge')"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "called outside the run's Ray job" in out.stderr


@contextlib.contextmanager
def stand_in_judge(logprobs: list, seen: list | None = None):
    """examples/judge_reward.py loaded fresh, and a stand-in judge answering SGLang's /generate shape with these input
    log-probs; its /server_info answers 500, as the actor's in-process server did on the H200. Yields (module, url)."""
    import http.server
    import importlib.util
    import threading

    class Judge(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if seen is not None:
                seen.append((self.path, body))
            data = json.dumps({"text": "x", "meta_info": {"input_token_logprobs": logprobs}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.send_error(500, "Internal Server Error")

        def log_message(self, *a):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spec = importlib.util.spec_from_file_location("judge_reward", ROOT / "examples" / "judge_reward.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_the_proof_reward_asks_the_judge_by_name_and_scores_its_logprobs(monkeypatch):
    import math

    seen, asked = [], []
    with stand_in_judge([[None, 1, None], [-1.0, 2, None], [-3.0, 3, None]], seen) as (module, url):
        monkeypatch.setattr(module, "model_url", lambda name: asked.append(name) or url)
        monkeypatch.delenv("VSL_TOPOLOGY_EVIDENCE_DIR", raising=False)
        result = module.compute_score("gsm8k", "42", "42")
    assert asked == ["judge"]
    path, body = seen[0]
    assert path == "/generate" and body["text"] == "Answer: 42" and body["return_logprob"] is True
    assert result == {"score": math.exp(-2.0), "judge_mean_logprob": -2.0}


def test_the_proof_reward_records_unreadable_server_args_instead_of_failing(monkeypatch, tmp_path):
    """The GPU run's reward died on its evidence (verl 0.9.1's in-process /server_info answers 500): a failure to read
    a server's arguments is written into the evidence, the reward still scores."""
    import ray

    with stand_in_judge([[None, 1, None], [-1.0, 2, None]]) as (module, url):
        monkeypatch.setattr(module, "model_url", lambda name: url)
        monkeypatch.setattr(ray, "get_actor", lambda name: (_ for _ in ()).throw(ValueError(name)))  # no replicas
        monkeypatch.setenv("VSL_TOPOLOGY_EVIDENCE_DIR", str(tmp_path))
        result = module.compute_score("gsm8k", "42", "42")
    assert result["judge_mean_logprob"] == -1.0
    [evidence] = [json.loads(p.read_text()) for p in tmp_path.glob("evidence_*.json")]
    assert evidence["actor_replicas"] == {}
    assert len(evidence["errors"]) == 1 and "/server_info: HTTPError: HTTP Error 500" in evidence["errors"][0]


def test_a_replica_reports_the_server_args_its_sglang_runs_with(tiny_qwen3):
    """What ``SGLangLoRARollout.launched_server_args`` answers: the fields of the real installed ServerArgs the
    replica's tokenizer manager holds; a name that is not a field is an error naming it."""
    from types import SimpleNamespace

    from verl_sglang_lora.verl_glue.server_args import running_server_args

    sa = sglang_or_skip("sglang.srt.server_args")
    args = sa.ServerArgs(model_path=str(tiny_qwen3), device="cpu", mem_fraction_static=0.4, max_running_requests=48)
    tm = SimpleNamespace(server_args=args)
    got = running_server_args(tm, ["mem_fraction_static", "max_running_requests", "tp_size"])
    assert got == {"mem_fraction_static": 0.4, "max_running_requests": 48, "tp_size": 1}
    with pytest.raises(KeyError, match="no_such_field"):
        running_server_args(tm, ["no_such_field"])
    with pytest.raises(RuntimeError, match="not launched"):
        running_server_args(None, ["tp_size"])
