"""Declared pins against what is installed (tools/declared_pins.py) and the doctor's megatron-bridge row.

The real case is the pair that broke on the H200: the Megatron carry's megatron-bridge beside SGLang 0.5.23's
transformers (.cache/megatron_bridge/, scripts/megatron_bridge_release.sh), read from their installed metadata. The
rules (extras, markers, a satisfied pin, a missing distribution) use small dist-info folders written here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from tests.conftest import lock_pin, megatron_bridge_release_or_skip
from verl_sglang_lora.runtime.bridge_registrations import OPT_OUT_ENV
from verl_sglang_lora.tools.declared_pins import unmet_requirement
from verl_sglang_lora.tools.doctor import WARN, Doctor

@pytest.fixture(scope="module")
def release() -> Path:
    return megatron_bridge_release_or_skip()


def _dist(root: Path, name: str, version: str, *requires: str) -> None:
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
             *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def test_the_h200_pair_is_unmet(release: Path) -> None:
    unmet = unmet_requirement("megatron-bridge", "transformers", [str(release)])
    assert unmet is not None
    assert unmet.dist_version == lock_pin("requirements-megatron.lock", "megatron-bridge")
    assert unmet.installed == lock_pin("requirements-sglang0.5.23.lock", "transformers")
    assert not SpecifierSet(unmet.requirement.removeprefix("transformers")).contains(unmet.installed)


def test_rules(tmp_path: Path) -> None:
    _dist(tmp_path, "transformers", "5.8.2")
    _dist(tmp_path, "bridge-ok", "1.0", "transformers<5.9.0,>=5.8.1")
    _dist(tmp_path, "bridge-extra", "1.0", "transformers<5; extra == 'audio'", "transformers>=5")
    _dist(tmp_path, "bridge-marker", "1.0", "transformers<5; python_version < '3.0'")
    _dist(tmp_path, "bridge-bad", "1.0", "numpy", "transformers>=5.9")
    path = [str(tmp_path)]
    assert unmet_requirement("bridge-ok", "transformers", path) is None
    assert unmet_requirement("bridge_extra", "transformers", path) is None  # the extra's pin is not the base's
    assert unmet_requirement("bridge-marker", "transformers", path) is None  # its marker is false here
    assert unmet_requirement("bridge-bad", "transformers", path).requirement == "transformers>=5.9"
    assert unmet_requirement("bridge-bad", "absent-dist", path) is None
    assert unmet_requirement("absent-dist", "transformers", path) is None


def test_doctor_warns_with_both_versions_and_the_guard(release: Path, monkeypatch) -> None:
    monkeypatch.delenv(OPT_OUT_ENV, raising=False)
    doctor = Doctor([], config_name="ppo_megatron_trainer")
    doctor.check_megatron_bridge_pins([str(release)])
    (row,) = doctor.checks
    assert row.name == "megatron-bridge pins" and row.status == WARN
    bridge = lock_pin("requirements-megatron.lock", "megatron-bridge")
    assert f"megatron-bridge {bridge} declares transformers<" in row.detail
    assert f"transformers {lock_pin('requirements-sglang0.5.23.lock', 'transformers')} is installed" in row.detail
    assert "registration guard skips" in row.detail and "docs/megatron_gpu.md" in row.fix

    monkeypatch.setenv(OPT_OUT_ENV, "0")
    doctor = Doctor([], config_name="ppo_megatron_trainer")
    doctor.check_megatron_bridge_pins([str(release)])
    (row,) = doctor.checks
    assert row.status == WARN and f"{OPT_OUT_ENV}=0 turns the plugin's registration guard off" in row.detail
    assert row.fix.startswith(f"unset {OPT_OUT_ENV}")


def test_doctor_is_silent_on_a_met_pin(tmp_path: Path) -> None:
    _dist(tmp_path, "transformers", "5.8.2")
    _dist(tmp_path, "megatron-bridge", "0.5.1", "transformers<5.9.0,>=5.8.1")
    doctor = Doctor([], config_name="ppo_megatron_trainer")
    doctor.check_megatron_bridge_pins([str(tmp_path)])
    assert doctor.checks == []
