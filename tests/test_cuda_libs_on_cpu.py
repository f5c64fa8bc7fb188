"""runtime/cuda_libs.py: torch's cuDNN pin read from its requirements, and the worker's start-up line when torch's own
cuDNN check fails (stood in for: a CPU torch has no cuDNN; the doctor's row is in tests/test_doctor_on_cpu.py)."""

from __future__ import annotations

import logging

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
