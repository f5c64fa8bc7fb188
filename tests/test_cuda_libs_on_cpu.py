"""runtime/cuda_libs.py: torch's cuDNN pin read from its requirements, and the worker's start-up line when torch's own
cuDNN check fails (stood in for: a CPU torch has no cuDNN; the doctor's row is in tests/test_doctor_on_cpu.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from verl_sglang_lora.runtime import cuda_libs


def test_the_cudnn_pin_is_read_from_torch_requirements():
    # the requirement strings of torch 2.14.1's METADATA (cu13 wheel)
    requires = ['nvidia-cuda-runtime==13.0.96; platform_system == "Linux"',
                'nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"', "filelock"]
    assert cuda_libs.cudnn_pin(requires) == "nvidia-cudnn-cu13==9.24.0.43"
    assert cuda_libs.cudnn_pin(["filelock", "sympy>=1.13.3"]) is None


def test_the_worker_says_a_cudnn_mismatch_once_at_start_up(monkeypatch, caplog):
    assert cuda_libs.cudnn_state() == ("absent", "") or cuda_libs.cudnn_state()[0] == "ok"
    with caplog.at_level(logging.ERROR, logger=cuda_libs.__name__):
        cuda_libs.warn_if_cudnn_mismatch()
    assert not caplog.records  # nothing to say where torch's check passes or there is no cuDNN

    def version() -> int:
        raise RuntimeError("cuDNN version incompatibility: PyTorch was compiled  against (9, 24, 0) but found runtime "
                           "version (9, 19, 0).\nmore text")

    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "version", version)
    monkeypatch.setattr(cuda_libs, "torch_cudnn_pin", lambda: "nvidia-cudnn-cu13==9.24.0.43")
    assert cuda_libs.cudnn_state()[0] == "mismatch" and "\n" not in cuda_libs.cudnn_state()[1]
    with caplog.at_level(logging.ERROR, logger=cuda_libs.__name__):
        cuda_libs.warn_if_cudnn_mismatch()
    (record,) = caplog.records
    assert "(9, 24, 0)" in record.getMessage() and "pip install nvidia-cudnn-cu13==9.24.0.43" in record.getMessage()


def test_loaded_libraries_reads_this_process_maps():
    # the real /proc/self/maps: torch's CPU library is mapped (torch is imported above), no cuDNN on a CPU torch
    (lib,) = [p for p in cuda_libs.loaded_libraries("libtorch_cpu") if p.endswith(".so")]
    assert Path(lib).resolve().parent == Path(torch.__file__).resolve().parent / "lib"
    assert cuda_libs.loaded_libraries("libcudnn") == []


def _install_cudnn_wheel(root: Path, version: str) -> Path:
    """A real installed distribution (dist-info with RECORD) of nvidia-cudnn-cu13 holding one library file."""
    lib = root / "nvidia" / "cudnn" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudnn.so.9").write_bytes(b"")
    info = root / f"nvidia_cudnn_cu13-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvidia-cudnn-cu13\nVersion: {version}\n")
    (info / "RECORD").write_text("nvidia/cudnn/lib/libcudnn.so.9,,\n")
    return lib


def test_a_mismatch_with_the_pinned_cudnn_installed_names_the_other_copy(tmp_path, monkeypatch):
    """The Megatron trainer on SGLang 0.5.23's bundle: torch's 9.24 installed, the host's 9.14 loaded
    first. The fix names the copy that was loaded and where the pinned one is, instead of advising an install."""
    lib = _install_cudnn_wheel(tmp_path, "9.24.0.43")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cuda_libs, "torch_cudnn_pin", lambda: "nvidia-cudnn-cu13==9.24.0.43")
    assert cuda_libs.pinned_cudnn_dir("nvidia-cudnn-cu13==9.24.0.43") == str(lib.resolve())
    assert cuda_libs.pinned_cudnn_dir("nvidia-cudnn-cu13==9.19.0.56") is None  # another version is not the pin
    host = "/usr/local/cuda/lib64/libcudnn_graph.so.9.14.0"
    maps = (f"7f00-7f10 r-xp 00000000 08:01 11 {lib / 'libcudnn.so.9'}\n"
            f"7f10-7f20 r-xp 00000000 08:01 12 {host}\n"
            "7f20-7f30 rw-p 00000000 00:00 0 \n")
    fix = cuda_libs.cudnn_fix(maps)
    assert host in fix and str(lib.resolve()) in fix and "pip install" not in fix
    assert f"CUDNN_HOME={lib.resolve().parent}" in fix
    # the pin not installed: the install advice, as before
    monkeypatch.setattr(cuda_libs, "torch_cudnn_pin", lambda: "nvidia-cudnn-cu13==9.99.0.1")
    assert cuda_libs.cudnn_fix(maps) == "install the cuDNN torch was built with: pip install nvidia-cudnn-cu13==9.99.0.1"
