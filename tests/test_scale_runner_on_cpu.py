"""scripts/device/scale.sh and the scale records: each arm's overrides (recorded by a stand-in ``$PYTHON`` in
place of verl's trainer, as tests/test_examples_on_cpu.py does for the examples) compose in verl's own config with
the plugin's overlay and set the arm's rollout, LoRA and offload, for the FSDP example and the Megatron one, and
for a mixture-of-experts shape an attention-only adapter the plugin's config guards accept; that shape's checkpoint
carries the names transformers and SGLang's own loader read; a verl console log and the memory sampler's CSV
become the record's figures; docs/benchmarks.md shows scale records as a table."""

from __future__ import annotations

import csv
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import load_script
from tests.test_examples_on_cpu import run_device_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "device" / "scale.sh"
records = load_script(ROOT / "scripts" / "records.py", "records")
mem_sampler = records.mem_sampler()
MOE = "qwen3-30b-a3b-8l"
# the MoE shape at a size a CPU test loads: one layer, four experts of two routed, small widths and vocab
MOE_SMALL = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, vocab_size=128)


def step(i: int, gen: float, sync: str = "") -> str:
    return (f"(TaskRunner) step:{i} - timing_s/step:{10.0 + i} - timing_s/gen:{gen} - timing_s/old_log_prob:1.5 - "
            f"timing_s/ref:{1.0 + i} - timing_s/update_actor:4.0 - timing_s/update_weights:0.5{sync} - "
            f"actor/perf/max_memory_allocated_gb:{30.0 + i} - actor/perf/cpu_memory_used_gb:{60.0 - i} - "
            "response_length/mean:256.0 - response_length/clip_ratio:1.0 - perf/throughput:900.0")


TITLES = {1: "ray::WorkerDict.actor_rollout_update_actor", 2: "ray::SGLangLoRARollout.generate",
          3: "sglang::scheduler_TP0", 4: "sglang::detokenizer", 5: "ray::TaskRunner", 6: "bash"}


def write_samples(path: Path, samples: list[tuple[dict[int, float], float]], titles: dict[int, str] = TITLES) -> Path:
    """mem_sampler.py's CSV of a run, one sample per (nvidia-smi's pid -> MiB, whole-GPU MiB), rows by its own code."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=mem_sampler.FIELDS)
        writer.writeheader()
        for i, (gpu, total) in enumerate(samples):
            rss = dict.fromkeys(titles, 100.0)
            writer.writerows(mem_sampler.sample_rows(float(i), 1, titles, rss, gpu, total))
    return path


def test_a_console_log_becomes_the_scale_figures() -> None:
    sync = " - sglang_lora/sync_total_ms:{} - sglang_lora/sync_bytes:349175808.0"
    log = "\n".join([step(1, 20.0, sync.format(300.0)), step(2, 8.0, sync.format(12.0)),
                     step(3, 4.0, sync.format(10.0)), step(4, 16.0, sync.format(14.0))])
    f = records.scale_figures(log, "qwen3-8b", "adapter", "fsdp", 64, "csgmv")
    assert (f["shape"], f["arm"], f["trainer"], f["lora_backend"], f["steps"], f["measured_steps"]) == \
        ("qwen3-8b", "adapter", "fsdp", "csgmv", 4, 3)
    assert f["step_s_p50"] == 13.0  # steps 2..4: 12, 13, 14 (step 1 left out)
    assert f["parts_s"] == {"gen": 8.0, "old_log_prob": 1.5, "ref": 4.0, "update_actor": 4.0, "update_weights": 0.5}
    assert f["sync_ms_p50"] == 12.0 and f["adapter_bytes_per_sync"] == 349175808.0
    # no samples: no driver figures, verl's allocator peak kept beside them
    assert f["peak_gpu_gib"] == {"trainer": None, "sglang": None} and f["trainer_allocated_peak_gib"] == 34.0
    assert f["host_rss_gib"] == 59.0 and f["gpu_samples"] == 0 and "not PyTorch's allocator peak" in f["peak_gpu_gib_measured"]
    assert f["rollout_tokens_per_s"] == 256.0 * 64 / 8.0  # median of 256*64/{8, 4, 16}
    assert f["response_clip_ratio_min"] == 1.0 and f["base_tokens_per_s"] is None and f["tracebacks"] == 0
    none = records.scale_figures("\n".join(step(i, 5.0) for i in (1, 2)), "qwen3-8b", "no_lora", "fsdp", 64, "")
    assert none["sync_ms_p50"] is None and none["adapter_bytes_per_sync"] is None
    assert none["lora_backend"] is None and none["measured_steps"] == 1
    empty = records.scale_figures("", "qwen3-8b", "merge", "fsdp", 64)
    assert empty["steps"] == 0 and empty["step_s_p50"] is None and empty["rollout_tokens_per_s"] is None


def test_the_memory_samples_become_each_roles_gpu_peak(tmp_path: Path) -> None:
    # rollout: SGLang's scheduler holds the model and the KV cache; training: SGLang has released them
    csv_path = write_samples(tmp_path / "mem.csv", [
        ({1: 20480.0, 2: 512.0, 3: 40960.0}, 62000.0),
        ({1: 30720.0, 2: 512.0, 3: 2048.0, 4: 0.0}, 34000.0),
        ({1: 10240.0, 3: 40448.0}, 51000.0),
    ])
    peaks = mem_sampler.gpu_peaks(mem_sampler.read_samples(csv_path))
    # a role's peak is its processes summed within one sample: scheduler + server actor at the first sample
    assert peaks["roles"] == {"trainer": 30720.0, "sglang": 40960.0 + 512.0}
    assert peaks["series"]["sglang_scheduler"] == 40960.0 and peaks["series"]["taskrunner"] == 0.0
    assert peaks["gpu_total"] == 62000.0 and peaks["samples"] == 3
    f = records.scale_figures("\n".join(step(i, 5.0) for i in (1, 2)), MOE, "adapter", "fsdp", 64, "csgmv", csv_path)
    assert f["peak_gpu_gib"] == {"trainer": 30.0, "sglang": 40.5} and f["trainer_allocated_peak_gib"] == 32.0
    assert f["gpu_used_peak_gib"] == round(62000 / 1024, 3) and f["gpu_samples"] == 3
    assert f["gpu_process_peak_gib"]["server_actor"] == 0.5
    # nvidia-smi listing none of the run's pids (another PID namespace): no role figure, the whole GPU's kept
    other = write_samples(tmp_path / "other.csv", [({99999: 50000.0}, 60000.0)])
    g = records.scale_figures("", MOE, "adapter", "fsdp", 64, "", other)
    assert g["peak_gpu_gib"] == {"trainer": None, "sglang": None} and g["gpu_used_peak_gib"] == round(60000 / 1024, 3)
    assert g["gpu_process_peak_gib"] == {}


def test_scale_records_render_as_a_table_and_none_renders_nothing(tmp_path: Path) -> None:
    samples = write_samples(tmp_path / "mem.csv", [({1: 20480.0, 3: 40960.0}, 62000.0)])
    f = records.scale_figures("\n".join(step(i, 5.0) for i in (1, 2)), "qwen3-8b", "merge", "megatron", 64, "", samples)
    rec = {"kind": "scale", "date": "2026-01-01", "commit": "c0", "gpu": "G", "versions": {}, "command": "x",
           "figures": f}
    page = records.render_benchmarks({"scale": [rec]})
    assert "## One-GPU scale runs" in page and "| qwen3-8b | megatron | merge | - | - | 2 | 12 | 5 |" in page
    # update_weights, sync ms, adapter MB, trainer and SGLang GPU GiB, allocated, host
    assert "| 0.5 | - | - | 20 | 40 | 32 | 59 |" in page
    rec["figures"] = {**f, "adapter_bytes_per_sync": 349175808.0}
    assert "| 0.5 | - | 349.2 | 20 | 40 |" in records.render_benchmarks({"scale": [rec]})
    assert "One-GPU scale" not in records.render_benchmarks({})


def test_scale_script_parses() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


def run_scale(tmp_path: Path, shape: str, **env_extra: str) -> tuple[Path, Path, Path]:
    """scale.sh with the stand-in trainer, on an existing checkpoint folder of the shape (its config.json only):
    (the checkpoint folder, the logs folder, the records folder)."""
    from verl_sglang_lora.tools.benchmarks import shape_config

    scale_dir, logs, out = tmp_path / "scale", tmp_path / "logs", tmp_path / "out"
    model = scale_dir / shape
    shape_config(shape).save_pretrained(model)  # an existing checkpoint is reused (no weights written here)
    (model / "model.safetensors.index.json").write_text("{}")
    run_device_script(SCRIPT, tmp_path, {"SCALE_DIR": str(scale_dir), "SCALE_LOGS": str(logs), "OUT": str(out),
                                         "SHAPE": shape, **env_extra},
                      ("MODEL_PATH", "DATA", "LORA_BACKEND", "TRAINER", "ARMS", "ATTN_BACKEND"))
    return model, logs, out / "results"


def composed(logs: Path, name: str, tree: str):
    from verl_sglang_lora.tools.doctor import compose_config

    argv = json.loads((logs / f"{name}.log").read_text().strip().splitlines()[-1])
    names = [a.split("=", 1)[1] for a in argv if a.startswith("--config-name=")]
    assert names in ([], [tree])
    return compose_config(tree, [a for a in argv if not a.startswith("--")])


def test_each_arm_passes_its_overrides_and_they_compose(tmp_path: Path) -> None:
    pytest.importorskip("verl")
    model, logs, results = run_scale(tmp_path, "qwen3-8b")
    cfg_json = json.loads((model / "config.json").read_text())
    assert cfg_json["eos_token_id"] == 2 and (model / "tokenizer.json").exists()  # the offline tokenizer beside it
    scale_dir = model.parent
    want = {"adapter": ("sglang_lora", 32, False, False), "merge": ("sglang_lora", 32, True, False),
            "no_lora": ("sglang", 0, False, True)}
    for arm, (name, rank, merge, offload) in want.items():
        cfg = composed(logs, f"scale_fsdp_qwen3-8b_{arm}", "ppo_trainer")
        a = cfg.actor_rollout_ref
        assert (a.rollout.name, a.model.lora_rank, bool(a.model.lora.merge)) == (name, rank, merge), arm
        assert (a.actor.fsdp_config.param_offload, a.actor.fsdp_config.optimizer_offload) == (offload, offload), arm
        assert a.ref.fsdp_config.param_offload and a.rollout.ignore_eos and a.rollout.gpu_memory_utilization == 0.5
        assert a.model.target_modules == "all-linear"  # a dense shape: the example's own targets
        assert (cfg.data.max_response_length, cfg.data.train_batch_size, a.rollout.n) == (256, 16, 4), arm
        assert cfg.trainer.total_training_steps == 5 and a.model.path == str(model)
        assert cfg.data.train_files == str(scale_dir / "offline" / "testset" / "train.parquet")
        assert cfg.reward.custom_reward_function.name == "compute_score"
        assert (logs / f"scale_fsdp_qwen3-8b_{arm}_mem.csv").exists()  # the sampler ran beside the arm
    recs = json.loads((results / "scale.json").read_text())
    assert [r["figures"]["arm"] for r in recs] == ["adapter", "merge", "no_lora"]
    assert recs[0]["figures"]["lora_backend"] and recs[1]["figures"]["lora_backend"] is None
    assert all(r["figures"]["responses"] == 64 and r["commit"] == "c0" for r in recs)
    assert all(r["figures"]["trainer"] == "fsdp" and r["command"].startswith("TRAINER=fsdp SHAPE=qwen3-8b") for r in recs)
    # after each arm, whatever it left of Ray (and SGLang under it) is stopped before the next
    called = (tmp_path / "calls.log").read_text().splitlines()
    assert sum(line.endswith("-m ray.scripts.scripts stop --force") for line in called) == 3


def test_a_moe_shape_trains_attention_only_and_the_guards_accept_it(tmp_path: Path) -> None:
    pytest.importorskip("verl")
    from verl_sglang_lora.verl_glue.config_guards import config_problems

    model, logs, results = run_scale(tmp_path, MOE)  # default arms on an MoE shape: the adapter arm alone
    cfg = composed(logs, f"scale_fsdp_{MOE}_adapter", "ppo_trainer")
    a = cfg.actor_rollout_ref
    assert list(a.model.target_modules) == ["q_proj", "k_proj", "v_proj", "o_proj"] and a.rollout.name == "sglang_lora"
    assert json.loads((model / "config.json").read_text())["num_local_experts"] == 128
    assert config_problems(a.rollout, a.model) == []
    a.model.target_modules = "all-linear"  # the example's own targets on this shape: refused before any worker
    assert any("mixture-of-experts" in p for p in config_problems(a.rollout, a.model))
    (rec,) = json.loads((results / "scale.json").read_text())
    assert (rec["figures"]["shape"], rec["figures"]["arm"]) == (MOE, "adapter")
    assert "target_modules=[q_proj,k_proj,v_proj,o_proj]" in rec["command"]
    assert rec["figures"]["lora_targets"] == "attention"


def test_expert_lora_on_the_moe_shape_adds_the_experts_and_the_guards_accept_it(tmp_path: Path) -> None:
    """EXPERT_LORA=1: the fused experts' target_parameters beside the attention targets, at the example's rollout TP
    1; the installed SGLang's guards serve it; the record says what the adapter targets."""
    pytest.importorskip("verl")
    from verl_sglang_lora.verl_glue.config_guards import config_problems

    _, logs, results = run_scale(tmp_path, MOE, EXPERT_LORA="1")
    cfg = composed(logs, f"scale_fsdp_{MOE}_adapter_experts", "ppo_trainer")
    a = cfg.actor_rollout_ref
    assert list(a.model.target_parameters) == ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    assert list(a.model.target_modules) == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert a.rollout.tensor_model_parallel_size == 1 and config_problems(a.rollout, a.model) == []
    (rec,) = json.loads((results / "scale.json").read_text())
    assert rec["figures"]["lora_targets"] == "attention+experts" and "EXPERT_LORA=1" in rec["command"]


def test_the_megatron_branch_runs_the_megatron_example_with_its_own_offload_keys(tmp_path: Path) -> None:
    pytest.importorskip("verl")
    site = tmp_path / "mcore_site"
    (site / "megatron" / "bridge").mkdir(parents=True)  # an installed stack: scale.sh installs none
    model, logs, results = run_scale(tmp_path, "qwen3-8b", TRAINER="megatron", ARMS="adapter no_lora",
                                     MCORE_SITE=str(site))
    for arm, (name, rank, offload) in {"adapter": ("sglang_lora", 32, False), "no_lora": ("sglang", 0, True)}.items():
        cfg = composed(logs, f"scale_megatron_qwen3-8b_{arm}", "ppo_megatron_trainer")
        a = cfg.actor_rollout_ref
        assert (a.rollout.name, a.model.lora.rank) == (name, rank), arm
        assert (a.actor.megatron.param_offload, a.actor.megatron.optimizer_offload) == (offload, offload), arm
        assert a.ref.megatron.param_offload and a.rollout.ignore_eos and a.rollout.gpu_memory_utilization == 0.5
        assert a.actor.megatron.override_transformer_config.attention_backend == "unfused"  # megatron_env.sh
        assert (cfg.data.max_response_length, cfg.data.train_batch_size, a.rollout.n) == (256, 16, 4), arm
        assert cfg.trainer.total_training_steps == 5 and a.model.path == str(model)
    recs = json.loads((results / "scale.json").read_text())
    assert [(r["figures"]["trainer"], r["figures"]["arm"]) for r in recs] == [("megatron", "adapter"), ("megatron", "no_lora")]
    assert recs[0]["command"].startswith("TRAINER=megatron SHAPE=qwen3-8b") and "TE attention unfused" in recs[0]["command"]
    assert "bash examples/run_qwen3_lora_megatron.sh" in recs[0]["command"]


# ---- the MoE shape's checkpoint -----------------------------------------------------------------------------------
def test_the_moe_shape_is_qwen3_30b_a3b_with_fewer_layers() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from verl_sglang_lora.tools import benchmarks

    cfg = benchmarks.shape_config(MOE)
    assert type(cfg).__name__ == "Qwen3MoeConfig" and cfg.architectures == ["Qwen3MoeForCausalLM"]
    # Qwen3-30B-A3B's published config.json, but for its 48 layers
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (2048, 32, 4, 128)
    assert (cfg.num_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size) == (128, 8, 768)
    assert (cfg.vocab_size, cfg.tie_word_embeddings, cfg.norm_topk_prob, cfg.mlp_only_layers) == (151936, False, True, [])
    assert cfg.num_hidden_layers == 8 and MOE not in benchmarks.DENSE_SHAPES
    with torch.device("meta"):
        state = transformers.AutoModelForCausalLM.from_config(cfg).state_dict()
    assert sum(t.numel() for t in state.values()) == 5_607_297_024  # the figure in the shape's comment
    with torch.device("meta"):
        full = transformers.AutoModelForCausalLM.from_config(benchmarks.shape_config(MOE, {"num_hidden_layers": 48}))
    assert round(sum(p.numel() for p in full.parameters()) / 1e9, 2) == 30.53  # Qwen3-30B-A3B's own count
    names = benchmarks.checkpoint_names(state)
    assert sum(torch.Size(dims).numel() for _, dims in names) == 5_607_297_024
    assert len([n for n, _ in names if ".mlp.experts." in n]) == 8 * 128 * 3


@pytest.fixture(scope="module")
def moe_checkpoint(tmp_path_factory) -> Path:
    """The MoE shape at MOE_SMALL, every tensor random (which value lands where is then checkable)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from safetensors.torch import load_file, save_file

    from verl_sglang_lora.tools import benchmarks

    out = benchmarks.write_checkpoint(MOE, tmp_path_factory.mktemp("moe") / "m", shard_bytes=64 << 10, live=True,
                                      overrides=MOE_SMALL)
    gen = torch.Generator().manual_seed(1)
    for shard in out.glob("*.safetensors"):
        tensors = {n: torch.randn(t.shape, generator=gen).to(torch.bfloat16) for n, t in load_file(str(shard)).items()}
        save_file(tensors, str(shard), metadata={"format": "pt"})
    return out


def checkpoint(out: Path) -> dict:
    from safetensors.torch import load_file

    tensors = {}
    for shard in sorted(out.glob("*.safetensors")):
        tensors.update(load_file(str(shard)))
    return tensors


def test_the_moe_checkpoint_names_each_expert_and_transformers_loads_it(moe_checkpoint: Path) -> None:
    import torch
    import transformers

    ckpt = checkpoint(moe_checkpoint)
    index = json.loads((moe_checkpoint / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(ckpt) and len(set(index["weight_map"].values())) > 1  # sharded
    assert "model.layers.0.mlp.experts.3.up_proj.weight" in ckpt and "model.layers.0.mlp.gate.weight" in ckpt
    assert not any(n.endswith(("experts.gate_up_proj", "experts.down_proj")) for n in ckpt)
    model, info = transformers.AutoModelForCausalLM.from_pretrained(moe_checkpoint, output_loading_info=True,
                                                                    dtype=torch.bfloat16)
    assert type(model).__name__ == "Qwen3MoeForCausalLM"
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    experts = model.model.layers[0].mlp.experts
    i = MOE_SMALL["moe_intermediate_size"]
    for e in range(MOE_SMALL["num_experts"]):
        p = f"model.layers.0.mlp.experts.{e}"
        assert torch.equal(experts.gate_up_proj[e, :i], ckpt[f"{p}.gate_proj.weight"])
        assert torch.equal(experts.gate_up_proj[e, i:], ckpt[f"{p}.up_proj.weight"])
        assert torch.equal(experts.down_proj[e], ckpt[f"{p}.down_proj.weight"])
    assert torch.equal(model.model.layers[0].self_attn.k_proj.weight, ckpt["model.layers.0.self_attn.k_proj.weight"])


# SGLang's own model class built on the CPU (one process, gloo, a stand-in for the one GPU kernel module its CPU
# rotary embedding imports) and its load_weights run on the checkpoint; every parameter starts as NaN
SGLANG_LOAD = r"""
import json, sys, types
from pathlib import Path
import torch, transformers
from safetensors.torch import load_file
stub = types.ModuleType("vllm._custom_ops"); stub.rotary_embedding = None
sys.modules.setdefault("vllm", types.ModuleType("vllm")); sys.modules.setdefault("vllm._custom_ops", stub)
from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
from sglang.srt.layers.dp_attention import initialize_dp_attention
from sglang.srt.layers.moe import initialize_moe_config
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
model, port = Path(sys.argv[1]), sys.argv[2]
args = ServerArgs(model_path=str(model), device="cpu")
set_global_server_args_for_scheduler(args)
init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                             distributed_init_method=f"tcp://127.0.0.1:{port}")
initialize_model_parallel(1)
cfg = transformers.AutoConfig.from_pretrained(model)
initialize_dp_attention(args, types.SimpleNamespace(hidden_size=cfg.hidden_size, dtype=torch.bfloat16))
initialize_moe_config(args)
from sglang.srt.models.qwen3_moe import Qwen3MoeForCausalLM
torch.set_default_dtype(torch.bfloat16)
m = Qwen3MoeForCausalLM(cfg)
for p in m.parameters():
    p.data.fill_(float("nan"))
ckpt = {}
for f in sorted(model.glob("*.safetensors")):
    ckpt.update(load_file(str(f)))
m.load_weights(iter(ckpt.items()))
params = dict(m.named_parameters())
torch.save({n: p.detach().clone() for n, p in params.items()}, sys.argv[3])
print(json.dumps({"params": sorted(params), "unloaded": sorted(n for n, p in params.items() if torch.isnan(p.float()).any())}))
"""


def test_sglangs_own_qwen3_moe_loader_fills_every_parameter_from_the_checkpoint(moe_checkpoint: Path, tmp_path: Path) -> None:
    pytest.importorskip("sglang")
    import torch

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    loaded = tmp_path / "loaded.pt"
    proc = subprocess.run([sys.executable, "-c", SGLANG_LOAD, str(moe_checkpoint), str(port), str(loaded)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "model.layers.0.mlp.experts.w13_weight" in got["params"] and got["unloaded"] == []
    params, ckpt = torch.load(loaded), checkpoint(moe_checkpoint)
    w13, w2 = params["model.layers.0.mlp.experts.w13_weight"], params["model.layers.0.mlp.experts.w2_weight"]
    i = MOE_SMALL["moe_intermediate_size"]
    for e in range(MOE_SMALL["num_experts"]):
        p = f"model.layers.0.mlp.experts.{e}"
        assert torch.equal(w13[e, :i], ckpt[f"{p}.gate_proj.weight"]) and torch.equal(w13[e, i:], ckpt[f"{p}.up_proj.weight"])
        assert torch.equal(w2[e], ckpt[f"{p}.down_proj.weight"])
    attn = "model.layers.0.self_attn"
    qkv = torch.cat([ckpt[f"{attn}.{x}_proj.weight"] for x in "qkv"])
    assert torch.equal(params[f"{attn}.qkv_proj.weight"], qkv)
    assert torch.equal(params["model.layers.0.mlp.gate.weight"], ckpt["model.layers.0.mlp.gate.weight"])
