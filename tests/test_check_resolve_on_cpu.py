"""constraints/check_resolve.py's verdict, offline: pip's dry-run report is replaced by the set it would choose, and the
--no-deps package's declared requirements are the installed verl 0.9.1's own metadata (the venv's)."""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
# the pairs whose verl goes in --no-deps (constraints/requires/), each with its own torch
PAIRS = {"0.5.18": "2.13.0", "0.5.23": "2.14.1"}


def _checker() -> ModuleType:
    return load_script(ROOT / "constraints" / "check_resolve.py", "_vsl_check_resolve")


def _pair(sglang: str) -> Path:
    return ROOT / "constraints" / f"verl0.9.1-sglang{sglang}.txt"


def _judge(monkeypatch: pytest.MonkeyPatch, chosen: dict[str, str], pair: Path) -> dict:
    cr = _checker()
    if md.version("verl") != cr.pins(pair)[1]["verl"]:
        pytest.skip("the venv's verl is not the pair's")

    def fake_pip(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        report = Path(cmd[cmd.index("--report") + 1])
        report.write_text(json.dumps({"install": [{"metadata": {"name": n, "version": v}} for n, v in chosen.items()]}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(cr.subprocess, "run", fake_pip)
    monkeypatch.setattr(cr, "declared_requirements", lambda python, name, version: md.requires(name))
    return cr.check("python3.12", pair)


@pytest.mark.parametrize("sglang", sorted(PAIRS))
def test_the_pinned_set_passes_with_only_the_declared_override(monkeypatch: pytest.MonkeyPatch, sglang: str) -> None:
    resolved, _ = _checker().pins(_pair(sglang))
    result = _judge(monkeypatch, {**resolved, "accelerate": "1.0.0"}, _pair(sglang))
    assert result["ok"] and not result["pins_off"] and result["beyond_pins"] == ["accelerate"]
    assert [u.split(" requires ")[1].split(";")[0] for u in result["no_deps_unmet"]] == [
        "transformers!=5.6.0,<5.11,>=5.5.3"]
    assert result["no_deps_unmet"] == result["unmet_declared"]


@pytest.mark.parametrize("sglang", sorted(PAIRS))
def test_a_requirement_the_file_does_not_declare_fails(monkeypatch: pytest.MonkeyPatch, sglang: str) -> None:
    resolved, _ = _checker().pins(_pair(sglang))
    result = _judge(monkeypatch, {**resolved, "numpy": "1.26.4"}, _pair(sglang))  # verl 0.9.1 declares numpy>=2.0.0
    assert not result["ok"]
    assert any("numpy>=2.0.0" in u for u in result["no_deps_unmet"])


@pytest.mark.parametrize("sglang", sorted(PAIRS))
def test_a_pin_pip_would_not_choose_fails(monkeypatch: pytest.MonkeyPatch, sglang: str) -> None:
    resolved, _ = _checker().pins(_pair(sglang))
    result = _judge(monkeypatch, {**resolved, "torch": "2.11.0"}, _pair(sglang))
    assert not result["ok"] and result["pins_off"] == {"torch": {"pinned": PAIRS[sglang], "chosen": "2.11.0"}}
