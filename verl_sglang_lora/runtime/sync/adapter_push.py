"""What the weight-sync client hands the server actor for one adapter sync: one Ray call carries it all."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl_sglang_lora.runtime.sync.flat_adapter import FlatAdapter
from verl_sglang_lora.runtime.sync.metrics import SyncStats
from verl_sglang_lora.sglang_contract.lora_request import lora_request_fields, tensor_checksums


@dataclass
class AdapterPush:
    """One adapter version for ``SGLangLoRARollout.sync_adapter``.

    ``request_fields`` are the installed SGLang's ``LoadLoRAAdapterFromTensorsReqInput`` fields except
    ``lora_name``: the server actor names the version it loads (a re-push of a version gets a revision name).
    The tensors travel as CUDA-IPC handles and stay alive in the client until the call returns.
    """

    version: int
    fingerprint: str
    global_steps: int | None
    request_fields: dict[str, Any]
    stats: SyncStats = field(default_factory=SyncStats)
    canary: dict[str, Any] | None = None  # CanaryExpectation.to_dict(), or None with the canary off
    # the resident path (runtime/resident): {"attach": [(op, slot, blobs)], "slot_fields": {...}} once per launch,
    # then {"writes": {slot: blobs}}; request_fields may then be empty (the server asks for them when it needs them)
    resident: dict[str, Any] | None = None
    resident_failed: str | None = None  # the client's check of an in-place write failed: load this version instead
    # a loader ``verify`` of the ordinary load (TP 1, loader launched): {"name": the version's expected name,
    # "blobs": the request}; the server runs it after the load, before activation (the client reads its answer)
    verify: dict[str, Any] | None = None


def adapter_request_fields(
    config_dict: dict[str, Any],
    adapter: FlatAdapter,
    tp_size: int,
    verify_checksums: bool = False,
    flatten: bool | None = None,
) -> dict[str, Any]:
    """The load request's fields for the installed SGLang, the flattened form described over the adapter's buffer."""
    checksums = tensor_checksums(adapter.tensors) if verify_checksums else None
    layout = [(e.name, e.shape, e.dtype, e.offset, e.nbytes) for e in adapter.entries]
    return lora_request_fields(config_dict, adapter.tensors, tp_size=tp_size, checksums=checksums, flatten=flatten,
                               flat=(adapter.flat, layout))
