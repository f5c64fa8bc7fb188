"""Resident in-place LoRA slots: docs/resident_sync.md (modules: section 2; wire format: section 3)."""

LOADER_PATH = "verl_sglang_lora.runtime.resident.loader.apply"

__all__ = ["LOADER_PATH"]
