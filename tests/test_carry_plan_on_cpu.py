"""scripts/offline_bundle/carry_plan.sh: the batches copied to a GPU host with no network (the wheel bundle and the
Megatron stack), and what to run there as they arrive."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "offline_bundle" / "carry_plan.sh"
MIB = 2**20


def plan(parts: Path, limit_mib: int, **env: str) -> str:
    proc = subprocess.run(["bash", str(SCRIPT), str(parts), str(limit_mib)], capture_output=True, text=True,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def files(where: Path, sizes: dict[str, int]) -> Path:
    where.mkdir(parents=True)
    for name, size in sizes.items():
        (where / name).write_bytes(b"x" * size)
    return where


def batches(base: Path, prefix: str) -> dict[str, set[str]]:
    return {d.name: {f.name for f in d.iterdir()} for d in sorted(base.iterdir())
            if d.name.startswith(prefix) and d.name[len(prefix):].isdigit()}


def test_bundle_batches_fit_the_limit_and_the_last_carries_the_checksums(tmp_path: Path) -> None:
    parts = files(tmp_path / "parts", {"a.whl": 3 * MIB, "b.whl.part00": 2 * MIB, "b.whl.part01": 2 * MIB,
                                       "c.whl": MIB, "SHA256SUMS": 10})
    out = plan(parts, 4)
    got = batches(tmp_path, "b")
    assert sorted(got) == ["b0", "b1"]  # first-fit decreasing: 3 + 1 MiB, then 2 + 2 MiB
    carried = [f for names in got.values() for f in names]
    assert sorted(carried) == ["SHA256SUMS", "a.whl", "b.whl.part00", "b.whl.part01", "c.whl"]  # each file once
    for name, names in got.items():
        assert sum((tmp_path / name / f).stat().st_size for f in names if f != "SHA256SUMS") <= 4 * MIB
    assert "SHA256SUMS" in got["b1"]
    assert out.strip().splitlines()[-1].count("install.sh /tmp/whl /tmp/site") == 1


def test_megatron_batches_take_their_prefix_device_dir_and_install_hint(tmp_path: Path) -> None:
    (tmp_path / "m7").mkdir()  # a batch left from an earlier plan is replaced, the source folder kept
    parts = files(tmp_path / "parts", {"te.whl.part00": 2 * MIB, "te.whl.part01": 2 * MIB, "core.whl": MIB,
                                       "te_torch.tar.gz": MIB // 2, "SHA256SUMS": 10})
    hint = "bash scripts/device/megatron_stack.sh build-bg /tmp/mcore"
    out = plan(parts, 3, BATCH_PREFIX="m", DEVICE_DIR="/tmp/mcore", INSTALL_HINT=hint)
    got = batches(tmp_path, "m")
    assert sorted(got) == ["m0", "m1"] and (tmp_path / "parts").is_dir()
    assert got["m0"] | got["m1"] == {"te.whl.part00", "te.whl.part01", "core.whl", "te_torch.tar.gz", "SHA256SUMS"}
    assert "SHA256SUMS" in got["m1"]
    assert f"cp -a {os.path.relpath(tmp_path / 'm0', SCRIPT.parent.parent.parent)}/. /tmp/mcore/" in out
    lines = [ln for ln in out.splitlines() if ln.strip().startswith("mkdir -p /tmp/mcore")]
    assert len(lines) == 2 and lines[-1].endswith(f"&& {hint}") and not lines[0].endswith(hint)
    assert "install.sh" not in out and not (tmp_path / "m7").exists()


def test_a_file_over_the_limit_is_refused_by_name(tmp_path: Path) -> None:
    parts = files(tmp_path / "parts", {"huge.whl": 3 * MIB})
    proc = subprocess.run(["bash", str(SCRIPT), str(parts), "2"], capture_output=True, text=True)
    assert proc.returncode != 0 and "huge.whl is 3.0 MiB, over the 2.0 MiB batch limit" in proc.stderr
