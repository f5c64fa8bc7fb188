"""Resident in-place LoRA slots: the new adapter written straight into the idle pinned slot of SGLang's LoRA pool,
checked byte for byte against the trainer's buffer, served only then. Modules and wire format:
docs/resident_sync.md, sections 2 and 3."""

LOADER_PATH = "verl_sglang_lora.runtime.resident.loader.apply"

__all__ = ["LOADER_PATH"]
