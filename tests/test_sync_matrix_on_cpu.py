"""The sync-matrix benchmark's own logic on CPU (the engine runs only on a GPU): engine arguments, per-path rows
(percentiles, penalty against the steady state, GB/s), a failing path kept as a row with its error, the JSON rows the
H200 file needs, and the table."""

from __future__ import annotations

import pytest

from tests.conftest import sglang_or_skip  # noqa: E402

from verl_sglang_lora.benchmarks import engine_args, parse
from verl_sglang_lora.tools.sync_matrix import PathTimes, flat_rows, guard, print_table


def test_engine_args_parse_types_and_refuse_garbage() -> None:
    got = engine_args(["attention_backend=triton", "cuda-graph-max-bs=8", "enable_x=true"], cuda_graph=True)
    assert got == {"disable_cuda_graph": False, "attention_backend": "triton", "cuda_graph_max_bs": 8,
                   "enable_x": True}
    assert engine_args([], cuda_graph=False) == {"disable_cuda_graph": True}
    with pytest.raises(SystemExit, match="key=value"):
        engine_args(["triton"], cuda_graph=True)


def test_cli_defaults_are_the_issue_matrix() -> None:
    args = parse(["--shape", "qwen3-8b"])
    assert args.shape == ["qwen3-8b"] and args.rank is None and args.iters == 30 and not args.no_cuda_graph


def test_path_row_percentiles_penalty_and_bandwidth() -> None:
    t = PathTimes(sync=[float(x) for x in range(1, 21)], first=[50.0] * 20)
    row = t.row(control_ms=40.0, nbytes=40_000_000)
    assert row["n"] == 20 and row["p50_ms"] == 11.0 and row["p95_ms"] == 19.0 and row["max_ms"] == 20.0
    assert row["first_request_ms"] == 50.0 and row["first_batch_penalty_ms"] == 10.0
    assert row["GBps"] == round(40_000_000 / 11.0 / 1e6, 2)


def test_a_failing_path_is_a_row_with_its_error_and_stops_only_itself() -> None:
    t = PathTimes()
    calls = []

    def boom() -> None:
        calls.append(1)
        raise TypeError("LoadLoRAAdapterFromTensorsReqInput.__init__() got an unexpected keyword argument "
                        "'serialized_named_tensors'")

    guard(t, boom)
    guard(t, boom)  # not run again once the path failed
    assert calls == [1] and t.error.startswith("TypeError: LoadLoRAAdapterFromTensorsReqInput")
    assert t.row(1.0, 1)["error"] == t.error


def test_rows_carry_the_fields_the_h200_file_needs(capsys) -> None:
    results = [{"shape": "qwen3-0.6b", "sglang": "0.5.12", "ranks": [{"rank": 32, "rows": [
        {"rank": 32, "path": "inplace", "p50_ms": 4.0, "p95_ms": 4.9, "max_ms": 5.4, "first_batch_penalty_ms": 0.1,
         "GBps": 10.0, "speedup_vs_versioned": 12.0, "speedup_vs_disk": 22.0, "correct": True},
        {"rank": 32, "path": "verl_stock", "error": "TypeError: ..."}]}]}]
    rows = flat_rows(results)
    for key in ("shape", "rank", "path", "p50_ms", "p95_ms", "first_batch_penalty_ms", "correct"):
        assert key in rows[0]
    assert rows[0]["transport"] == "engine" and rows[1]["error"].startswith("TypeError")
    print_table(rows)
    out = capsys.readouterr().out
    assert "| qwen3-0.6b | 32 | inplace | 4.0 | 4.9 | 5.4 | 0.1 | 10.0 | 12.0 | 22.0 | True |" in out
    assert "| qwen3-0.6b | 32 | verl_stock | fails: TypeError: ... |" in out


def test_each_rank_gets_its_own_engine_at_that_max_rank(monkeypatch, tmp_path) -> None:
    """As the plugin launches SGLang (max_lora_rank = the adapter's rank); a launch that fails is that rank's rows."""
    sglang_or_skip("sglang")
    from verl_sglang_lora.tools import benchmarks, sync_matrix

    launched, stopped = [], []

    class Bench:
        def __init__(self, model_dir, max_rank, mem, extra) -> None:
            if max_rank == 128:
                raise RuntimeError("CUDA out of memory")
            launched.append(max_rank)

        def stop(self) -> None:
            stopped.append(1)

    monkeypatch.setattr(sync_matrix, "EngineBench", Bench)
    monkeypatch.setattr(sync_matrix, "run_rank", lambda bench, r, *a: {"rank": r, "rows": [{"rank": r, "path": "inplace",
                                                                                         "p50_ms": 1.0, "correct": True}]})
    monkeypatch.setattr(benchmarks, "write_checkpoint", lambda shape, out, live: out)
    monkeypatch.setattr(sync_matrix.tempfile, "mkdtemp", lambda **kw: str(tmp_path))
    rows = flat_rows([sync_matrix.run_shape("qwen3-0.6b", [8, 32, 128], 1, 0, 0.5, {})])
    assert launched == [8, 32] and len(stopped) == 2
    assert [(r["rank"], r["max_lora_rank"]) for r in rows if r["path"] == "inplace"] == [(8, 8), (32, 32), (128, 128)]
    failed = [r for r in rows if r["rank"] == 128]
    assert {r["path"] for r in failed} == set(sync_matrix.PATHS)
    assert all(r["error"].startswith("engine launch (max_lora_rank=128) failed: RuntimeError: CUDA out of memory")
               for r in failed)
