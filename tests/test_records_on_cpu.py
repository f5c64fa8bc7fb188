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
