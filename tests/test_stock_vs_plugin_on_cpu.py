"""scripts/device/stock_vs_plugin.sh and its records: the stock run and the plugin run pass the example the same
seed, rank and settings but the rollout name, and both compose in verl's own config with the plugin's overlay (the
trainer replaced by a stand-in ``$PYTHON``, as tests/test_examples_on_cpu.py does), for FSDP and Megatron; a verl
console log with the memory sampler's and the LoRA sampler's CSVs becomes per-step figures; lora_sampler.py finds an
HTTP server by the listening sockets of a process titled as verl's server actor and counts the adapters its
/v1/models lists (the body built by SGLang's own protocol classes); docs/benchmarks.md renders the records."""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import load_script
from tests.test_examples_on_cpu import run_device_script
from tests.test_scale_runner_on_cpu import composed

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "device" / "stock_vs_plugin.sh"
records = load_script(ROOT / "scripts" / "records.py", "records")
mem_sampler = records.mem_sampler()
lora_sampler = records.device_script("lora_sampler")

PREFIX = "\x1b[36m(TaskRunnerV1 pid=1766)\x1b[0m "
STOCK_STEP = (PREFIX + "step:{s} - global_seqlen/min:3568.0 - critic/score/mean:{r} - "
              "training/rollout_probs_diff_mean:3.59e-06 - timing_s/gen:2.1 - timing_s/update_actor:1.4 - "
              "timing_s/update_weights:{w} - timing_s/step:{t} - actor/perf/cpu_memory_used_gb:21.5")
PLUGIN_STEP = (PREFIX + "step:{s} - global_seqlen/min:3568.0 - critic/score/mean:{r} - "
               "sglang_lora/base_policy_samples:{base} - sglang_lora/samples:64.0 - "
               "sglang_lora/served_effect_verdict:{verdict} - sglang_lora/served_version_max:{sv} - "
               "sglang_lora/served_version_min:{sv} - sglang_lora/staleness_max:0.0 - sglang_lora/sync_inplace:{s}.0 - "
               "sglang_lora/resident_fallbacks:0.0 - "
               "sglang_lora/sync_total_ms:{ms} - sglang_lora/sync_version:{v} - sglang_lora/resume_kv_ms:1.5 - "
               "sglang_lora/canary_ms:{s}0.0 - timing_s/update_weights:{w} - timing_s/step:{t}")
TITLES = {11: "ray::WorkerDict.actor_rollout_update_actor", 12: "ray::SGLangHttpServer.generate",
          13: "sglang::scheduler_TP0", 14: "sglang::detokenizer", 15: "ray::TaskRunner"}


def write_mem(path: Path, samples: list[tuple[int, dict[int, float], dict[int, float]]]) -> Path:
    """mem_sampler.py's CSV, rows by its own code: one sample per (step, pid -> GPU MiB, pid -> RSS MiB)."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=mem_sampler.FIELDS)
        writer.writeheader()
        for i, (step, gpu, rss) in enumerate(samples):
            writer.writerows(mem_sampler.sample_rows(float(i), step, TITLES, rss, gpu, sum(gpu.values())))
    return path


def write_lora(path: Path, rows: list[tuple[int, list[str] | None]]) -> Path:
    """lora_sampler.py's CSV: one row per (step, adapter names /v1/models listed, or None where it did not answer)."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=lora_sampler.FIELDS)
        writer.writeheader()
        for i, (step, names) in enumerate(rows):
            writer.writerow({"t_s": float(i), "step": step, "adapters": "" if names is None else len(names),
                             "names": "" if names is None else "|".join(names)})
    return path


def test_a_stock_run_becomes_per_step_figures_without_version_tags(tmp_path: Path) -> None:
    log = "\n".join(["(raylet) Started a Ray worker"] + [
        STOCK_STEP.format(s=s, r=r, w=w, t=t) for s, r, w, t in ((1, 0.02, 0.9, 12.0), (2, 0.3, 0.41, 6.0),
                                                               (3, 0.85, 0.45, 6.5))])
    rss = dict.fromkeys(TITLES, 512.0)
    mem = write_mem(tmp_path / "mem.csv", [
        (1, {11: 8192.0, 12: 600.0, 13: 20480.0}, rss),   # rollout: SGLang's model and KV cache
        (1, {11: 12288.0, 12: 600.0, 13: 2048.0}, {**rss, 11: 4096.0}),  # training: SGLang released its cache
        (2, {11: 8192.0, 12: 600.0, 13: 21504.0}, rss),
        # step 3: no sample
    ])
    lora = write_lora(tmp_path / "lora.csv", [(1, None), (1, ["verl_actor_lora_name"]), (2, []),
                                              (2, ["verl_actor_lora_name"]), (3, ["verl_actor_lora_name"])])
    f = records.stock_vs_plugin_figures(log, "stock", "fsdp", mem, lora)
    assert (f["path"], f["trainer"], f["steps"]) == ("stock", "fsdp", 3)
    assert f["step_s"] == [12.0, 6.0, 6.5] and f["rewards"] == [0.02, 0.3, 0.85]
    assert f["sync_ms"] == [900.0, 410.0, 450.0] and "timing_s/update_weights" in f["sync_ms_from"]
    # a step's SGLang figure: scheduler + detokenizer + server actor within one sample, the step's largest sample
    assert f["sglang_gpu_gib"] == [round(21080 / 1024, 3), round(22104 / 1024, 3), None]
    assert f["trainer_gpu_gib"] == [12.0, 8.0, None]
    assert f["gpu_peak_mib_by_process"]["trainer"] == 12288.0  # per process title, over the run
    assert f["host_rss_gib"] == [round((4096 + 4 * 512) / 1024, 3), 2.5, None]
    # the unload-then-load of step 2 left a sample with none registered; the step's figure is its most
    assert f["lora_slots_used"] == [1, 1, 1] and f["lora_adapter_names"][0] == ["verl_actor_lora_name"]
    assert "pool slots" in f["lora_slots_from"] and "0.5.12" in f["lora_slots_from"]
    assert f["plugin_sync_ms"] is None and f["served_effect_verdict"] is None and f["version_tags"] is None
    assert f["plugin_resume_kv_ms"] is None and f["plugin_canary_ms"] is None and f["plugin_sync_inplace"] is None
    assert "fixed name" in f["version_tags_absent"] and f["gpu_samples"] == 3 and f["first_error"] is None


def test_a_plugin_run_keeps_its_sync_time_verdicts_and_version_tags(tmp_path: Path) -> None:
    log = "\n".join(PLUGIN_STEP.format(s=s, r=0.1 * s, base=base, verdict=verdict, sv=s - 1, ms=ms, v=s, w=w, t=5.0)
                    for s, base, verdict, ms, w in ((1, 64.0, 0.0, 45.5, 0.2), (2, 0.0, 1.0, 9.1, 0.05),
                                                    (3, 0.0, -1.0, 8.7, 0.04)))
    log += "\nTraceback (most recent call last):\n(TaskRunnerV1 pid=1766) RuntimeError: the served effect failed\n"
    lora = write_lora(tmp_path / "lora.csv", [(1, ["verl_lora_v1"]), (2, ["verl_lora_v1", "verl_lora_v2"]),
                                              (3, ["verl_lora_v2", "verl_lora_v3"])])
    f = records.stock_vs_plugin_figures(log, "plugin", "megatron", tmp_path / "absent.csv", lora)
    assert f["plugin_sync_ms"] == [45.5, 9.1, 8.7] and f["sync_ms"] == [200.0, 50.0, 40.0]
    # what verl's update_weights timer holds after the sync: the KV resume, then the flush and the canary
    assert f["plugin_resume_kv_ms"] == [1.5, 1.5, 1.5] and f["plugin_canary_ms"] == [10.0, 20.0, 30.0]
    assert f["plugin_sync_inplace"] == [1.0, 2.0, 3.0] and f["plugin_resident_fallbacks"] == [0.0, 0.0, 0.0]
    assert f["served_effect_verdict"] == [0.0, 1.0, -1.0] and f["version_tags_absent"] is None
    assert f["version_tags"]["sync_version"] == [1.0, 2.0, 3.0]
    assert f["version_tags"]["served_version_min"] == [0.0, 1.0, 2.0]
    assert f["version_tags"]["base_policy_samples"] == [64.0, 0.0, 0.0]
    assert f["lora_slots_used"] == [1, 2, 2] and f["lora_adapter_names"][2] == ["verl_lora_v2", "verl_lora_v3"]
    # no memory samples: every memory figure is None per step, not missing
    assert f["sglang_gpu_gib"] == [None] * 3 and f["host_rss_gib"] == [None] * 3 and f["gpu_samples"] == 0
    assert f["tracebacks"] == 1 and f["first_error"] == "RuntimeError: the served effect failed"


def rec(path: str, figures: dict, commit: str = "c0") -> dict:
    return {"kind": "stock_vs_plugin", "date": "2026-01-01", "commit": commit, "gpu": "G",
            "versions": {"sglang": "0.5.18", "verl": "0.9.1"}, "command": "x", "figures": figures}


def test_records_render_one_row_per_run_and_none_says_so(tmp_path: Path) -> None:
    stock_log = "\n".join(STOCK_STEP.format(s=s, r=r, w=0.5, t=6.0) for s, r in ((1, 0.5), (2, 0.9), (3, 0.7)))
    mem = write_mem(tmp_path / "mem.csv", [(1, {13: 10240.0}, {13: 1024.0}), (3, {13: 11264.0}, {13: 2048.0})])
    lora = write_lora(tmp_path / "lora.csv", [(1, ["verl_actor_lora_name"]), (3, ["verl_actor_lora_name"])])
    stock = records.stock_vs_plugin_figures(stock_log, "stock", "fsdp", mem, lora)
    plugin_log = "\n".join(PLUGIN_STEP.format(s=s, r=0.2, base=0.0, verdict=v, sv=s - 1, ms=9.0, v=s, w=0.02, t=4.0)
                           for s, v in ((1, 0.0), (2, -1.0)))
    plugin = records.stock_vs_plugin_figures(plugin_log, "plugin", "fsdp")
    stopped = records.stock_vs_plugin_figures("ValueError: max_lora_rank\n", "stock", "megatron")
    page = records.render_benchmarks({"stock_vs_plugin": [rec("stock", stock), rec("plugin", plugin),
                                                          rec("stock", stopped)]})
    assert "## verl's stock LoRA path vs the plugin" in page and "stock_vs_plugin.png" in page
    # stock: step 1 s, step s p50, sync ms, no plugin sync; SGLang GiB first/last/peak; adapters held first/last/max; RSS
    # first/last; mean reward; first step >= 0.8; no verdict; no tags
    assert ("| stock | fsdp | 3 | 6 | 6 | 500 | - | - | 10 / 11 / 11 | 1 / 1 / 1 | 1 / 2 | 0.7 | 2 | - | none (stock) | 0 |"
            in page)
    # 2 of 2 syncs in place, 0 fallbacks; base-policy samples summed over the steps
    assert "| plugin | fsdp | 2 | 4 | 4 | 20 | 9 | 2/2 / 0 | - / - / - | - / - / - | - / - | 0.2 | - | 1 | sync version 1 " \
           "-> 2, staleness max 0, base-policy samples 0 | 0 |" in page
    assert "- stock, fsdp (`c0`): `x`" in page  # each run's own command under the table
    assert "- stock, fsdp (`c0`): sglang_scheduler 11264\n" in page  # which of the processes holds what
    assert "megatron stock (0 tracebacks; first error: `ValueError: max_lora_rank`)" in page
    empty = records.render_benchmarks({})
    assert "stock LoRA path vs the plugin" not in empty  # no records, no section


def test_plot_takes_the_newest_run_of_each_trainer_and_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    plot = load_script(ROOT / "scripts" / "plot_stock_vs_plugin.py", "plot_stock_vs_plugin")
    runs = [rec("stock", {"path": "stock", "trainer": "fsdp", "steps": 2}, "old"),
            rec("plugin", {"path": "plugin", "trainer": "fsdp", "steps": 2}),
            rec("stock", {"path": "stock", "trainer": "fsdp", "steps": 2}, "new"),
            rec("stock", {"path": "stock", "trainer": "megatron", "steps": 0})]
    newest = records.newest_runs({"stock_vs_plugin": runs}, "stock_vs_plugin", plot.KEY)
    assert [(r["figures"]["path"], r["commit"]) for r in newest] == [("stock", "new"), ("plugin", "c0")]
    assert plot.points([None, 2.5, None, 3.0]) == ([2, 4], [2.5, 3.0])
    pytest.importorskip("matplotlib")
    for r, gib in zip(newest, ([10.0, None, 11.0], [9.0, 9.0, 9.0])):
        r["figures"].update(sglang_gpu_gib=gib, sync_ms=[900.0, 410.0, None])
    monkeypatch.setattr(plot, "load", lambda _results: {"stock_vs_plugin": runs})
    png = tmp_path / "svp.png"
    assert plot.main(["--out", str(png)]) == 0 and png.read_bytes()[:4] == b"\x89PNG"
    monkeypatch.setattr(plot, "load", lambda _results: {})
    with pytest.raises(SystemExit, match="no stock_vs_plugin records"):
        plot.main(["--out", str(png)])


SERVER = """
import json, socket, sys, threading
from http.server import BaseHTTPRequestHandler, HTTPServer
import setproctitle
from sglang.srt.entrypoints.openai.protocol import ModelCard, ModelList

setproctitle.setproctitle("ray::SGLangHttpServer.generate")  # the title Ray gives verl's server actor
names = sys.argv[1:]
body = ModelList(data=[ModelCard(id="model", root="model", max_model_len=128)] + [
    ModelCard(id=n, root=n, parent="model") for n in names]).model_dump_json().encode()

class Models(BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/v1/models"
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(body if ok else b"{}")

    def log_message(self, *args):
        pass

other = socket.socket()  # a second listening socket that speaks no HTTP (as Ray's own ports of the actor)
other.bind(("127.0.0.1", 0))
other.listen()
threading.Thread(target=lambda: [other.accept()[0].close() for _ in iter(int, 1)], daemon=True).start()
server = HTTPServer(("0.0.0.0", 0), Models)
print(server.server_address[1], other.getsockname()[1], flush=True)
server.serve_forever()
"""


def test_the_sampler_finds_the_server_actors_port_and_counts_its_adapters(tmp_path: Path) -> None:
    pytest.importorskip("setproctitle")
    pytest.importorskip("sglang.srt.entrypoints.openai.protocol")
    (tmp_path / "server.py").write_text(SERVER)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "server.py"), "verl_lora_v3", "verl_lora_v4"],
                            stdout=subprocess.PIPE, text=True)
    try:
        http_port, other_port = map(int, proc.stdout.readline().split())
        ports = lora_sampler.listening_ports(proc.pid)
        assert ("127.0.0.1", http_port) in ports and ("127.0.0.1", other_port) in ports
        assert lora_sampler.registered_adapters("127.0.0.1", other_port, timeout=1.0) is None
        titles = lora_sampler.process_titles()
        assert titles[proc.pid] == "ray::SGLangHttpServer.generate"
        assert lora_sampler.find_server({proc.pid: titles[proc.pid]}) == ("127.0.0.1", http_port)
        assert lora_sampler.find_server({proc.pid: "python server.py"}) is None  # not a server actor's title
        # the sampler as the device script runs it, beside a run whose log has finished one step
        log = tmp_path / "run.log"
        log.write_text(STOCK_STEP.format(s=1, r=0.1, w=0.5, t=6.0) + "\n")
        run = subprocess.Popen(["sleep", "3"])
        out = tmp_path / "lora.csv"
        subprocess.run([sys.executable, str(ROOT / "scripts" / "device" / "lora_sampler.py"), "sample", "--log",
                        str(log), "--csv", str(out), "--interval", "0.5", "--until-pid", str(run.pid)],
                       check=True, timeout=60)
        run.wait()
        rows = lora_sampler.read_samples(out)
        assert rows and all(r["step"] == "2" for r in rows)
        assert {(r["adapters"], r["names"]) for r in rows} == {("2", "verl_lora_v3|verl_lora_v4")}
        assert lora_sampler.per_step(rows) == {2: {"adapters": 2, "names": ["verl_lora_v3", "verl_lora_v4"]}}
    finally:
        proc.kill()
        proc.wait()


def run_svp(tmp_path: Path, **env_extra: str) -> tuple[Path, Path]:
    """stock_vs_plugin.sh with the stand-in trainer: (the run logs folder, the records folder)."""
    logs, out = tmp_path / "logs", tmp_path / "out"
    run_device_script(SCRIPT, tmp_path, {"SVP_LOGS": str(logs), "SVP_ASSETS": str(tmp_path / "assets"),
                                         "OUT": str(out), **env_extra},
                      ("MODEL_PATH", "DATA", "STEPS", "LR", "N", "TRAINER", "SEED", "PATHS", "MEM"))
    return logs, out / "results"


def test_stock_then_plugin_run_the_example_with_one_seed_and_rank(tmp_path: Path) -> None:
    pytest.importorskip("verl")
    logs, results = run_svp(tmp_path, SEED="3")
    for path, name in (("stock", "sglang"), ("plugin", "sglang_lora")):
        cfg = composed(logs, f"svp_fsdp_{path}_s3", "ppo_trainer")
        a = cfg.actor_rollout_ref
        assert (a.rollout.name, a.model.lora_rank, bool(a.model.lora.merge)) == (name, 32, False), path
        assert (cfg.data.seed, a.rollout.seed) == (3, 3) and a.rollout.gpu_memory_utilization == 0.5
        assert cfg.trainer.total_training_steps == 50 and a.actor.optim.lr == pytest.approx(2e-4)
        assert cfg.reward.custom_reward_function.path == "pkg://verl_sglang_lora.tools.offline_reward"
        assert a.model.path == str(tmp_path / "assets" / path / "model")
        assert a.rollout.engine_kwargs.sglang.attention_backend == "triton"  # SGLANG_GPU_ARGS, both runs
        assert (logs / f"svp_fsdp_{path}_s3_mem.csv").exists() and (logs / f"svp_fsdp_{path}_s3_lora.csv").exists()
    recs = json.loads((results / "stock_vs_plugin.json").read_text())
    assert [(r["figures"]["path"], r["figures"]["trainer"]) for r in recs] == [("stock", "fsdp"), ("plugin", "fsdp")]
    assert recs[0]["command"].startswith("TRAINER=fsdp STEPS=50 SEED=3 LR=2e-4 MEM=0.5 bash scripts/device/"
                                         "stock_vs_plugin.sh: LORA_RANK=32 bash examples/run_qwen3_lora_fsdp.sh "
                                         "actor_rollout_ref.rollout.name=sglang data.seed=3")
    assert "rollout.name=sglang " not in recs[1]["command"] and recs[1]["commit"] == "c0"
    # Ray (and SGLang under it) stopped after each run, before the next one starts
    called = (tmp_path / "calls.log").read_text().splitlines()
    assert sum(line.endswith("-m ray.scripts.scripts stop --force") for line in called) == 2
    assert (results.parent / "stock_vs_plugin_logs.tgz").exists()


def test_megatron_runs_both_paths_through_its_example_for_four_steps(tmp_path: Path) -> None:
    pytest.importorskip("verl")
    site = tmp_path / "mcore_site"
    (site / "megatron" / "bridge").mkdir(parents=True)  # an installed stack: nothing to install
    logs, results = run_svp(tmp_path, TRAINER="megatron", MCORE_SITE=str(site))
    for path, name in (("stock", "sglang"), ("plugin", "sglang_lora")):
        cfg = composed(logs, f"svp_megatron_{path}_s1", "ppo_megatron_trainer")
        a = cfg.actor_rollout_ref
        assert (a.rollout.name, a.model.lora.rank, cfg.data.seed) == (name, 32, 1), path
        assert cfg.trainer.total_training_steps == 4
    recs = json.loads((results / "stock_vs_plugin.json").read_text())
    assert [(r["figures"]["path"], r["figures"]["trainer"]) for r in recs] == [("stock", "megatron"),
                                                                             ("plugin", "megatron")]


def test_an_unknown_path_or_trainer_stops_before_any_run(tmp_path: Path) -> None:
    for env_extra, says in (({"PATHS": "stock fast"}, "PATHS: stock and/or plugin"),
                            ({"TRAINER": "deepspeed"}, "TRAINER=deepspeed"),
                            ({"VSL_COMMIT": ""}, "set VSL_COMMIT=<sha>")):
        env = {**os.environ, "OUT": str(tmp_path / "out"), "SVP_LOGS": str(tmp_path / "logs"), "PYTHON": "false",
               "VSL_COMMIT": "c0", **env_extra}
        proc = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and says in proc.stderr
        assert not (tmp_path / "logs").exists()
