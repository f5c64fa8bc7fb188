"""The LoRA-from-tensors request, shaped by the installed SGLang's own struct.

SGLang changed this request across releases: 0.5.8/0.5.12 declare ``serialized_tensors: str`` (one base64
blob, a dataclass); 0.5.18+ declare ``serialized_named_tensors: List[bytes]`` (one blob per TP rank, a msgspec
struct with base64 on the HTTP wire). verl 0.9.1 sends the new field to the 0.5.12 it pins (seed layer 3), so
the shape is read from the struct every time rather than from a version table.

Where the struct declares ``load_format`` (0.5.12+) the tensors travel as SGLang's own ``FlattenedTensorBucket``
(``load_format="flattened_bucket"``): one contiguous byte tensor and its metadata, so the scheduler opens one
CUDA-IPC handle per load instead of one per tensor (392 for a Qwen3-0.6B all-linear adapter).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from verl_sglang_lora.sglang_contract.installed import io_struct, is_msgspec_struct, struct_fields

PER_RANK_FIELD = "serialized_named_tensors"
SINGLE_FIELD = "serialized_tensors"
REQUEST_CLASS = "LoadLoRAAdapterFromTensorsReqInput"
FLATTENED_FORMAT = "flattened_bucket"
# A byte buffer and its layout: (name, shape, dtype, byte offset, byte count) per tensor.
FlatBytes = tuple[torch.Tensor, list[tuple[str, tuple[int, ...], torch.dtype, int, int]]]


@dataclass(frozen=True)
class LoRARequestShape:
    """Which payload field the installed SGLang declares and how it is encoded."""

    field: str
    per_rank: bool
    msgspec: bool
    has_checksums: bool
    declared: tuple[str, ...]
    flattened: bool = False  # the release accepts load_format="flattened_bucket" for adapters


def request_shape(cls: type | None = None) -> LoRARequestShape:
    cls = cls or io_struct(REQUEST_CLASS)
    fields = struct_fields(cls)
    if PER_RANK_FIELD in fields:
        field, per_rank = PER_RANK_FIELD, True
    elif SINGLE_FIELD in fields:
        field, per_rank = SINGLE_FIELD, False
    else:
        raise TypeError(
            f"{cls.__module__}.{cls.__name__} declares neither {PER_RANK_FIELD!r} nor {SINGLE_FIELD!r} "
            f"(fields: {sorted(fields)}); this SGLang release is not supported, see docs/compatibility.md"
        )
    for required in ("lora_name", "config_dict"):
        if required not in fields:
            raise TypeError(f"{cls.__name__} lacks {required!r} (fields: {sorted(fields)})")
    flattened = "load_format" in fields and flattened_bucket_class() is not None
    return LoRARequestShape(
        field, per_rank, is_msgspec_struct(cls), "expected_checksums" in fields, tuple(fields), flattened
    )


def flattened_bucket_class() -> type | None:
    """SGLang's ``FlattenedTensorBucket`` if the installed release has one that takes mixed dtypes."""
    try:
        from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorBucket
    except ImportError:
        return None
    return FlattenedTensorBucket if getattr(FlattenedTensorBucket, "supports_multi_dtypes", False) else None


def flattened_payload(named_tensors: Mapping[str, torch.Tensor], flat: FlatBytes | None = None) -> dict[str, Any]:
    """The dict SGLang's ``load_lora_adapter_from_tensors`` rebuilds a flattened bucket from.

    With ``flat`` (the tensors already live in one byte buffer) the bucket is described over that buffer with
    SGLang's own metadata class, so no second copy of the adapter is made.
    """
    bucket_cls = flattened_bucket_class()
    if bucket_cls is None:
        raise RuntimeError("the installed SGLang has no FlattenedTensorBucket with mixed-dtype support")
    if flat is not None:
        from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorMetadata

        buffer, layout = flat
        metadata = [FlattenedTensorMetadata(name=name, shape=torch.Size(shape), dtype=dtype, start_idx=offset,
                                            end_idx=offset + nbytes, numel=nbytes)
                    for name, shape, dtype, offset, nbytes in layout]
        return {"flattened_tensor": buffer, "metadata": metadata}
    bucket = bucket_cls(named_tensors=[(name, t.detach().contiguous()) for name, t in named_tensors.items()])
    return {"flattened_tensor": bucket.get_flattened_tensor(), "metadata": bucket.get_metadata()}


def serialize_payload(payload: Any) -> bytes:
    """SGLang's own serializer (CUDA tensors travel as IPC handles; CPU tensors are refused upstream)."""
    from sglang.srt.utils import MultiprocessingSerializer

    return MultiprocessingSerializer.serialize(payload)


def tensor_checksums(named_tensors: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """sha256 of each tensor's bytes, in the form SGLang >=0.5.18 verifies on the receiving rank."""
    import hashlib

    out = {}
    for name, tensor in named_tensors.items():
        data = tensor.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()
        out[name] = hashlib.sha256(data).hexdigest()
    return out


def build_lora_request(lora_name: str, config_dict: dict[str, Any], named_tensors: Mapping[str, torch.Tensor], *,
                       cls: type | None = None, **options: Any) -> Any:
    """An instance of the installed ``LoadLoRAAdapterFromTensorsReqInput`` (options: :func:`lora_request_fields`)."""
    cls = cls or io_struct(REQUEST_CLASS)
    return cls(lora_name=lora_name, **lora_request_fields(config_dict, named_tensors, cls=cls, **options))


def lora_request_fields(
    config_dict: dict[str, Any],
    named_tensors: Mapping[str, torch.Tensor],
    *,
    tp_size: int = 1,
    checksums: dict[str, str] | None = None,
    cls: type | None = None,
    flatten: bool | None = None,
    flat: FlatBytes | None = None,
) -> dict[str, Any]:
    """Every field of the installed request but ``lora_name`` (the server actor names the version it loads).

    ``flatten`` (default: wherever the release accepts it) sends one ``FlattenedTensorBucket`` per rank, over
    ``flat`` where the tensors already live in one byte buffer.

    Per-rank releases get one serialization per TP rank, as SGLang's own producer does: a serialized tensor
    handle is meant to be received once (on CPU a second deserialization fails outright; for CUDA-IPC SGLang
    serializes per rank so the producer's refcounts drop cleanly). The adapter is not TP-sharded on the wire;
    each rank slices it.
    """
    if tp_size < 1:
        raise ValueError(f"tp_size must be >= 1, got {tp_size}")
    cls = cls or io_struct(REQUEST_CLASS)
    shape = request_shape(cls)
    flatten = shape.flattened if flatten is None else flatten
    if flatten and not shape.flattened:
        raise ValueError(f"{cls.__name__} of the installed SGLang does not take load_format={FLATTENED_FORMAT!r}")
    kwargs: dict[str, Any] = {"config_dict": config_dict}
    # one flattened buffer shared by the ranks' serializations (each gets its own IPC handle record)
    payload: Any = flattened_payload(named_tensors, flat) if flatten else dict(named_tensors)
    if flatten:
        kwargs["load_format"] = FLATTENED_FORMAT
    if shape.per_rank:
        kwargs[shape.field] = [serialize_payload(payload) for _ in range(tp_size)]
    else:
        kwargs[shape.field] = base64.b64encode(serialize_payload(payload)).decode("ascii")
    if checksums is not None and shape.has_checksums:
        kwargs["expected_checksums"] = checksums
    return kwargs


def request_to_json(req: Any) -> dict[str, Any]:
    """The HTTP JSON body for a request struct: field names as keys, bytes as base64 (what SGLang's FastAPI
    route decodes with its Base64Bytes validator); None-valued optional fields are left out."""
    fields = struct_fields(type(req))
    body: dict[str, Any] = {}
    for name, spec in fields.items():
        if name in ("rid", "http_worker_ipc"):
            continue
        value = getattr(req, name)
        if value is None and not spec.required:
            continue
        body[name] = _jsonable(value)
    return body


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value
