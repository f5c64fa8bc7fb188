"""The package's roles stay apart: nothing in the runtime, the SGLang contract or the verl glue imports a tool, and
nothing under scripts/ imports from tests/ (read from the source's import statements)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "verl_sglang_lora"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def test_runtime_contract_and_glue_import_no_tool() -> None:
    offenders = {}
    for role in ("runtime", "sglang_contract", "verl_glue"):
        for path in (PKG / role).rglob("*.py"):
            tools = sorted(m for m in imported_modules(path) if m.startswith("verl_sglang_lora.tools"))
            if tools:
                offenders[str(path.relative_to(ROOT))] = tools
    assert offenders == {}
    assert any((PKG / "runtime").rglob("server.py")) and any((PKG / "tools").rglob("doctor.py"))  # the walk saw them


def test_scripts_import_nothing_from_tests() -> None:
    scripts = list((ROOT / "scripts").rglob("*.py"))
    assert scripts
    offenders = {str(p.relative_to(ROOT)): sorted(m for m in imported_modules(p) if m.split(".")[0] == "tests")
                 for p in scripts}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_supported_releases_are_written_once() -> None:
    """setup.py's extras and the test scripts read the one list (verl_sglang_lora/releases.json)."""
    from verl_sglang_lora.releases import SGLANG_RELEASES, VERL_RELEASES

    source = (ROOT / "setup.py").read_text()
    setup = source.replace(ast.get_docstring(ast.parse(source), clean=False) or "", "")  # prose may name releases
    runner = (ROOT / "scripts" / "run_cpu_tests.sh").read_text()
    for version in SGLANG_RELEASES + VERL_RELEASES:
        assert version not in setup and f"{version} " not in runner, version
    assert "releases.json" in setup and "releases.json" in runner
