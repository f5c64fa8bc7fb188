"""Results are records: every docs/results/*.json entry carries where and how it was measured, and the generated
docs (docs/validation.md, docs/benchmarks.md) are current with them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
records = load_script(ROOT / "scripts" / "records.py", "records")
KEYS = {"kind", "date", "commit", "gpu", "versions", "command", "figures"}


def test_every_record_says_where_and_how_it_was_measured() -> None:
    files = sorted((ROOT / "docs" / "results").glob("*.json"))
    assert files, "no records"
    for path in files:
        for record in json.loads(path.read_text()):
            assert KEYS <= set(record), (path.name, sorted(KEYS - set(record)))
            assert record["kind"] == path.stem and record["command"] and record["commit"]
            assert {"verl", "sglang", "torch"} <= set(record["versions"])


def test_generated_docs_are_current() -> None:
    for name, text in records.rendered().items():
        assert (ROOT / "docs" / name).read_text() == text, f"docs/{name}: run python scripts/records.py render"


def test_a_console_log_becomes_per_step_series(tmp_path) -> None:
    log = "\n".join([
        "(TaskRunner) step:1 - critic/score/mean:0.25 - sglang_lora/sync_inplace:0.0 - sglang_lora/sync_total_ms:30.1",
        "(TaskRunner) step:2 - critic/score/mean:0.5 - sglang_lora/sync_inplace:1.0 - sglang_lora/sync_total_ms:9.5",
        "Traceback (most recent call last):",
    ])
    figures = records.e2e_figures(log)
    assert figures["steps"] == 2 and figures["tracebacks"] == 1
    assert figures["series"]["critic/score/mean"] == [0.25, 0.5]
    assert figures["series"]["sglang_lora/sync_inplace"] == [0.0, 1.0]
    assert figures["series"]["sglang_lora/staleness_max"] == [None, None]
    record = records.make_record("e2e", "bash examples/run_qwen3_lora_fsdp.sh", figures)
    path = records.append(record, tmp_path)
    assert json.loads(path.read_text())[0]["figures"]["steps"] == 2 and KEYS <= set(record)


def test_a_learning_run_becomes_a_reward_curve_and_the_band_pools_the_seed_spread() -> None:
    log = "\n".join(f"(TaskRunner) step:{i} - critic/score/mean:{r} - timing_s/step:2.0" for i, r in
                    enumerate([0.02, 0.3, 0.9], start=1))
    f = records.learning_figures(log, "merge", "fsdp", 2)
    assert (f["arm"], f["trainer"], f["seed"], f["steps"]) == ("merge", "fsdp", 2, 3)
    assert f["rewards"] == [0.02, 0.3, 0.9] and f["sync_ms"] == [None, None, None]
    # two seeds 0.2 apart at every step: pooled s = 0.1 * sqrt(2), the band is [min - 2s, max + 2s]
    lo, hi = records.band([[0.1, 0.5], [0.3, 0.7]])
    s = (4 * 0.01 / 2) ** 0.5
    assert [round(x, 9) for x in lo] == [round(0.1 - 2 * s, 9), round(0.5 - 2 * s, 9)]
    assert [round(x, 9) for x in hi] == [round(0.3 + 2 * s, 9), round(0.7 + 2 * s, 9)]


def test_the_learning_page_names_adapter_steps_outside_the_merge_band() -> None:
    def rec(arm: str, seed: int, rewards: list[float]) -> dict:
        return {"commit": "c0", "gpu": "G", "figures": {"arm": arm, "trainer": "fsdp", "seed": seed, "steps": len(rewards),
                                                         "rewards": rewards, "tracebacks": 0}}
    page = records.render_learning({"learning": [rec("merge", 1, [0.0, 0.5, 0.9]), rec("merge", 2, [0.0, 0.5, 0.9]),
                                                 rec("adapter", 1, [0.0, 0.5, 0.9]), rec("adapter", 2, [0.0, 0.1, 0.9]),
                                                 rec("adapter", 3, [0.2, 0.1, 0.9])]})
    assert "adapter seed 1: 3 of 3 steps inside the merge band." in page
    assert "adapter seed 2: 2 of 3 steps inside the merge band; below it at steps [2]." in page
    # a curve ahead of the merge arm is outside too, and said to be above
    assert "adapter seed 3: 1 of 3 steps inside the merge band; above it at steps [1]; below it at steps [2]." in page


def test_a_scale_run_with_memory_samples_becomes_a_record_with_the_scale_schema(tmp_path) -> None:
    log = tmp_path / "run.log"
    log.write_text("\n".join(f"(TaskRunner) step:{i} - timing_s/step:9.0 - timing_s/gen:3.0 - "
                             "actor/perf/max_memory_allocated_gb:21.5 - response_length/mean:256.0" for i in (1, 2, 3)))
    samples = tmp_path / "mem.csv"
    samples.write_text("t_s,step,series,procs,rss_mib,gpu_mib\n"
                       "0.0,1,sglang_scheduler,1,3000.0,40960.0\n0.0,1,trainer,1,9000.0,25600.0\n"
                       "0.0,1,gpu_total,,,67000.0\n1.0,1,trainer,1,9000.0,30720.0\n1.0,1,gpu_total,,,31000.0\n")
    assert records.main(["scale", str(log), "--shape", "qwen3-30b-a3b-8l", "--arm", "adapter", "--trainer", "fsdp",
                         "--responses", "64", "--lora-backend", "csgmv", "--mem-samples", str(samples),
                         "--command", "SHAPE=qwen3-30b-a3b-8l bash scripts/device/scale.sh", "--out", str(tmp_path)]) == 0
    (record,) = json.loads((tmp_path / "scale.json").read_text())
    f = record["figures"]
    assert KEYS <= set(record) and "sglang" in record["versions"]
    assert {"shape", "trainer", "arm", "lora_backend", "steps", "step_s_p50", "parts_s", "sync_ms_p50", "peak_gpu_gib",
            "host_rss_gib", "rollout_tokens_per_s", "base_tokens_per_s"} <= set(f)
    assert f["peak_gpu_gib"] == {"trainer": 30.0, "sglang": 40.0} and f["trainer_allocated_peak_gib"] == 21.5
    assert "driver" in f["peak_gpu_gib_measured"] and f["shape"] == "qwen3-30b-a3b-8l"


def test_first_error_is_the_cause_not_the_actor_that_died_of_it() -> None:
    # the shape of a Ray-prefixed verl log in which SGLang's launch failed inside the rollout actor
    log = ("\x1b[36m(TaskRunnerV1 pid=22393)\x1b[0m WARNING: flashinfer.comm is not available\n"
           "\x1b[36m(SGLangLoRARollout pid=25199)\x1b[0m Traceback (most recent call last):\n"
           "\x1b[36m(SGLangLoRARollout pid=25199)\x1b[0m     raise RuntimeError(msg)\n"
           "\x1b[36m(SGLangLoRARollout pid=25199)\x1b[0m RuntimeError: Not enough memory. Please try to increase "
           "--mem-fraction-static.\n"
           "Traceback (most recent call last):\n"
           "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n")
    assert records.first_error(log) == ("RuntimeError: Not enough memory. Please try to increase "
                                        "--mem-fraction-static.")
    assert records.first_error("step:1 - critic/score/mean:0.02\nUserWarning: something\n") is None
    assert records.first_error("WARNING: ImportError: no flash-attn, falling back\n") is None  # not a failure
    assert records.first_error("(WorkerDict pid=7, ip=10.0.0.2) [rank0]: torch.OutOfMemoryError: CUDA out of "
                               "memory\n") == "torch.OutOfMemoryError: CUDA out of memory"
    assert records.first_error("(TaskRunner pid=3) AssertionError\n") == "AssertionError"


def test_throughput_records_render_the_tools_own_table() -> None:
    from verl_sglang_lora.tools import lora_throughput as lt

    rows = [lt.make_row("triton", 64, 256, [1.0], [1.25], True),
            lt.make_row("csgmv", 64, 256, [1.0], [1.0], False)]  # as fast as base: the adapter was not applied
    record = {"kind": "lora_throughput", "date": "2026-12-07", "commit": "c0", "gpu": "GPU", "versions": {},
              "command": "python -m verl_sglang_lora.tools.lora_throughput",
              "figures": lt.report(rows, {"shape": "qwen3-8b", "rank": 32, "batch": 64, "gen_len": 256})}
    text = records.render_benchmarks({"lora_throughput": [record]})
    assert lt.format_table(rows, 256) in text  # with each step's cost, from the run's gen_len
    assert "A and B matrices are 174.6 MB (bf16)" in text
    assert "fastest at batch 64: triton" in text  # the backend that ignored the adapter is not named
    # a record of one batch size whose rows name none (before rows carried their size) renders with the run's size
    old = {**record, "figures": {**record["figures"], "rows": [{k: v for k, v in r.items() if k != "batch"}
                                                               for r in rows]}}
    assert lt.format_table(rows, 256) in records.render_benchmarks({"lora_throughput": [old]})


def test_a_tests_gpu_run_stopped_by_its_timeout_makes_no_record(tmp_path, capsys) -> None:
    # a timeout leaves pytest's progress dots as the last line, with no count: recording it would read as a result
    stopped = records.main(["text", "gpu_tests", "....", "--command", "python -m pytest tests/gpu -q",
                            "--out", str(tmp_path)])
    assert stopped == 1 and "not pytest's closing line" in capsys.readouterr().err
    assert not (tmp_path / "gpu_tests.json").exists()
    finished = records.main(["text", "gpu_tests", "7 passed, 1 warning in 163.58s (0:02:43)", "--command",
                             "python -m pytest tests/gpu -q", "--out", str(tmp_path)])
    assert finished == 0 and json.loads((tmp_path / "gpu_tests.json").read_text())[0]["figures"]["summary"].startswith("7")
