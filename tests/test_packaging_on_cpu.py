"""Packaging: the constraints files of the tested pairs are the locks', the installed metadata comes from the one list of
releases and that file, a wheel built from the checkout carries the entry points and the package data, and the test
command's prerequisite check stops with one message."""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import load_script
from verl_sglang_lora import __version__
from verl_sglang_lora.releases import SGLANG_RELEASES, VERL_RELEASES

ROOT = Path(__file__).resolve().parents[1]
DIST = "verl-sglang-lora"
# The pairs whose lock carries its own torch (SGLang's pin), with the transformers SGLang pins: (torch, transformers)
CARRIED_TORCH = {"0.5.18": ("2.13.0", "5.12.1"), "0.5.23": ("2.14.1", "5.19.0")}


def _generator() -> ModuleType:
    return load_script(ROOT / "constraints" / "generate.py", "_vsl_constraints_generate")


def _pins(text: str) -> dict[str, tuple[str, bool]]:
    """{name: (version, installed --no-deps)} of a constraints file."""
    out = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            spec = line.split("#", 1)[0].strip()
            name, version = spec.split("==")
            out[name] = (version, "# --no-deps" in line)
    return out


def test_constraints_files_are_generated_from_the_current_locks() -> None:
    gen = _generator()
    rendered = {path: text for lock in gen.LOCKS for path, text in gen.render(lock).items()}
    on_disk = {p for p in (ROOT / "constraints").rglob("*.txt")}
    assert on_disk == set(rendered), f"constraints/ holds {sorted(on_disk)}; run python constraints/generate.py"
    for path, text in rendered.items():
        assert path.read_text() == text, f"{path} is stale: run python constraints/generate.py"
    reader = gen._bundle_reader()
    # the default pair (SGLang 0.5.12, verl 0.9.1's own pin): the bundle's [core] + [verl], the host torch, torchvision
    # and triton the GPU runs used (`import sglang` imports all three); SGLang and its kernels --no-deps
    default = _pins((ROOT / "constraints" / "verl0.9.1-sglang0.5.12.txt").read_text())
    lock = {gen._norm(n): v for n, v, _ in reader.read_lock(reader.bundle_groups(str(gen.LOCK)), gen.LOCK)}
    assert {n: v for n, (v, _) in default.items() if n in lock} == lock  # every bundle pin, unchanged
    host = {n: v for n, (v, _) in default.items() if n not in lock}
    assert host == {"torch": "2.11.0", "torchvision": "0.26.0", "triton": "3.6.0"}, host
    assert {n for n, (_, no_deps) in default.items() if no_deps} == {
        "sglang", "sglang-kernel", "flashinfer-python", "torch-memory-saver"}
    # the pairs that carry their own torch (SGLang 0.5.18: torch 2.13.0; 0.5.23: 2.14.1): every group of the lock;
    # verl --no-deps
    assert [lock.name for lock in gen.LOCKS] == ["requirements.lock", *(f"requirements-sglang{s}.lock"
                                                                       for s in CARRIED_TORCH)]
    for sglang, (torch, transformers) in CARRIED_TORCH.items():
        pins = _pins((ROOT / "constraints" / f"verl0.9.1-sglang{sglang}.txt").read_text())
        lock = gen.BUNDLE / f"requirements-sglang{sglang}.lock"
        assert {n: v for n, (v, _) in pins.items()} == {gen._norm(n): v for n, v, _ in reader.read_lock(None, lock)}
        assert (pins["sglang"][0], pins["torch"][0], pins["transformers"][0]) == (sglang, torch, transformers)
        assert {n for n, (_, no_deps) in pins.items() if no_deps} == {"verl"}
        assert pins["verl"][0] in VERL_RELEASES and pins["sglang"][0] in SGLANG_RELEASES
    assert default["verl"][0] in VERL_RELEASES and default["sglang"][0] in SGLANG_RELEASES
    assert gen.main(["--check"]) == 0


def test_pyproject_holds_the_static_metadata() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = meta["project"]
    assert project["name"] == DIST and project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert project["readme"] == "README.md" and project["requires-python"] == ">=3.10,<3.13"
    assert set(project["dynamic"]) == {"version", "dependencies", "optional-dependencies"}
    assert project["entry-points"]["verl.plugins"] == {"sglang_lora": "verl_sglang_lora.register"}
    assert project["scripts"] == {"verl-sglang-lora": "verl_sglang_lora.tools.cli:main"}
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "verl_sglang_lora.__version__"}
    data = meta["tool"]["setuptools"]["package-data"]
    assert data == {"verl_sglang_lora": ["*.json"], "verl_sglang_lora.tools": ["*.json"],
                    "verl_sglang_lora.configs.sglang_lora": ["*.yaml"]}
    for package, patterns in data.items():  # each pattern matches files that exist
        folder = ROOT / package.replace(".", "/")
        assert all(list(folder.glob(p)) for p in patterns), package


@pytest.mark.parametrize("sglang", sorted(CARRIED_TORCH))
def test_no_deps_marks_follow_the_declared_requirements(sglang: str) -> None:
    """verl 0.9.1 is --no-deps beside SGLang 0.5.18 and 0.5.23 because its own metadata (the installed one) excludes
    those pairs' transformers; the requirements file keeps every other unconditional requirement of verl."""
    from packaging.requirements import Requirement

    gen = _generator()
    newest = _pins((ROOT / "constraints" / f"verl0.9.1-sglang{sglang}.txt").read_text())
    assert md.version("verl") == newest["verl"][0]
    declared = [Requirement(r) for r in md.requires("verl") if "extra ==" not in r]
    (transformers,) = [r for r in declared if r.name == "transformers"]
    assert not transformers.specifier.contains(newest["transformers"][0])
    requires = (ROOT / "constraints" / "requires" / f"verl0.9.1-sglang{sglang}.txt").read_text().splitlines()
    lines = {gen._norm(Requirement(line).name): line for line in requires if line and not line.startswith("#")}
    assert "verl" not in lines and lines["transformers"] == f"transformers=={CARRIED_TORCH[sglang][1]}"
    for r in declared:
        if r.name != "transformers":
            assert gen._norm(r.name) in lines, r  # pinned by the set, or kept from verl's metadata
    # the one the set does not meet is said in the file, not silently dropped
    assert any(line.startswith("# verl's own requirements") and "transformers" in line for line in requires)


def test_installed_metadata_comes_from_releases_and_the_constraints() -> None:
    dist = md.distribution(DIST)
    assert dist.version == __version__
    eps = {(e.group, e.name): e.value for e in dist.entry_points}
    assert eps[("verl.plugins", "sglang_lora")] == "verl_sglang_lora.register"
    assert eps[("console_scripts", "verl-sglang-lora")] == "verl_sglang_lora.tools.cli:main"
    requires = dist.requires or []
    base = [r for r in requires if "extra ==" not in r]
    major, minor = VERL_RELEASES[-1].split(".")[:2]
    assert any(r.replace(" ", "") in (f"verl<{major}.{int(minor) + 1},>={VERL_RELEASES[0]}",
                                      f"verl>={VERL_RELEASES[0]},<{major}.{int(minor) + 1}") for r in base), base
    gpu = sorted(r.split(";")[0].strip() for r in requires if 'extra == "gpu"' in r)
    pins = _pins((ROOT / "constraints" / "verl0.9.1-sglang0.5.12.txt").read_text())  # the default pair's
    assert gpu == sorted(f"{n}=={v}" for n, (v, no_deps) in pins.items() if not no_deps)
    assert {r.split(";")[1].split("==")[1].strip().strip('"') for r in requires if "extra ==" in r} <= {
        "gpu", "test", "fsdp", "megatron"}  # SGLang 0.5.23's pair has no extra: it could not resolve
    # no extra pulls SGLang through a resolver: it would pick an untested verl x SGLang pair without a word
    assert not [r for r in requires if r.split(";")[0].strip().lower().startswith("sglang")], requires
    assert set(dist.metadata["Requires-Python"].replace(" ", "").split(",")) == {">=3.10", "<3.13"}


def test_wheel_from_the_checkout_has_entry_points_and_package_data(tmp_path: Path) -> None:
    """What `pip install .` installs: built from a copy (the build writes build/ and egg-info next to the sources)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "constraints", src / "constraints", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "verl_sglang_lora", src / "verl_sglang_lora", ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
                           str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("verl_sglang_lora-*.whl")
    assert wheel.name.startswith(f"verl_sglang_lora-{__version__}-py3-none-any")
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in ("verl_sglang_lora/releases.json", "verl_sglang_lora/configs/sglang_lora/default.yaml"):
        assert f in names, f
    assert any(n.startswith("verl_sglang_lora/tools/") and n.endswith(".json") for n in names)
    info = f"verl_sglang_lora-{__version__}.dist-info"
    entry_points = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert "[verl.plugins]\nsglang_lora = verl_sglang_lora.register" in entry_points
    assert "verl-sglang-lora = verl_sglang_lora.tools.cli:main" in entry_points
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata and "Provides-Extra: gpu" in metadata
    assert "Author: The verl-sglang-lora developers" in metadata
    # the gpu extra as setup.py computes it now (the venv's own metadata is only as new as its last install)
    gpu = sorted(line.split(":", 1)[1].split(";")[0].strip() for line in metadata.splitlines()
                 if line.startswith("Requires-Dist:") and 'extra == "gpu"' in line)
    pins = _pins((ROOT / "constraints" / "verl0.9.1-sglang0.5.12.txt").read_text())
    assert gpu == sorted(f"{n}=={v}" for n, (v, no_deps) in pins.items() if not no_deps)
    assert f"{info}/licenses/LICENSE" in names


def _setup_script_copy(tmp_path: Path) -> Path:
    """setup_cpu_env.sh in an empty repo copy: its prerequisite check runs before it touches anything."""
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "setup_cpu_env.sh", tmp_path / "scripts" / "setup_cpu_env.sh")
    return tmp_path / "scripts" / "setup_cpu_env.sh"


def test_test_command_refuses_a_python_other_than_311(tmp_path: Path) -> None:
    script = _setup_script_copy(tmp_path)
    fake = tmp_path / "python3.12"
    fake.write_text('#!/usr/bin/env bash\nif [ "$1" = -c ]; then case "$2" in *"%d.%d"*) echo 3.12;; *) exit 1;; esac; fi\n')
    fake.chmod(0o755)
    proc = subprocess.run(["bash", str(script)], env={**os.environ, "PYTHON": str(fake)}, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "PREREQUISITE MISSING" in proc.stderr and "is Python 3.12, not 3.11" in proc.stderr
    assert not (tmp_path / ".venv").exists()


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the check accepts only 3.11")
def test_test_command_says_where_torch_must_come_from(tmp_path: Path) -> None:
    script = _setup_script_copy(tmp_path)
    empty = tmp_path / "wheels"
    empty.mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": str(empty)}
    env.pop("VSL_TORCH_FIND_LINKS", None)
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "no torch-2.13.0+cpu-cp311 wheel in pip's find-links" in proc.stderr and "download.pytorch.org" in proc.stderr
    assert not (tmp_path / ".venv").exists()
