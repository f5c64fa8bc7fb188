"""The LoRA-from-tensors request, built for the installed SGLang and decoded by SGLang itself.

The body goes through the same pydantic validation FastAPI applies to SGLang's route, then SGLang's own
``MultiprocessingSerializer.deserialize`` -- what the TP worker runs -- must return the original tensors.
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import sglang_or_skip
from verl_sglang_lora.sglang_contract.lora_request import (
    PER_RANK_FIELD,
    SINGLE_FIELD,
    build_lora_request,
    request_shape,
    request_to_json,
)

CONFIG = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": "all-linear"}


def _tensors():
    torch.manual_seed(0)
    return {
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.randn(4, 64),
        "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": torch.randn(64, 4),
    }


def _decode(body):
    """SGLang's HTTP decode path for this route: pydantic validation of the request class."""
    import pydantic

    io = sglang_or_skip()
    return pydantic.TypeAdapter(io.LoadLoRAAdapterFromTensorsReqInput).validate_python(body)


@pytest.mark.parametrize("flatten", [None, False], ids=["default", "per_tensor"])
@pytest.mark.parametrize("tp_size", [1, 2, 4])
def test_request_round_trips_through_sglang_decoder_and_deserializer(tp_size, flatten):
    io = sglang_or_skip()
    MultiprocessingSerializer = sglang_or_skip("sglang.srt.utils").MultiprocessingSerializer

    tensors = _tensors()
    req = build_lora_request("verl_lora_v3", CONFIG, tensors, tp_size=tp_size, flatten=flatten)
    assert isinstance(req, io.LoadLoRAAdapterFromTensorsReqInput)
    shape = request_shape()
    body = request_to_json(req)
    decoded = _decode(body)
    assert decoded.lora_name == "verl_lora_v3" and decoded.config_dict == CONFIG
    payload = getattr(decoded, shape.field)
    if shape.per_rank:
        assert shape.field == PER_RANK_FIELD and isinstance(payload, list) and len(payload) == tp_size
        blobs = payload
    else:
        assert shape.field == SINGLE_FIELD and isinstance(payload, str)
        blobs = [payload]
    if shape.per_rank:
        assert len({bytes(b) for b in blobs}) == tp_size  # one serialization per rank, as SGLang's producer does
    flattened = shape.flattened and flatten is None  # the default wherever the release declares load_format
    assert getattr(decoded, "load_format", None) == ("flattened_bucket" if flattened else None)
    for blob in blobs:  # every rank can deserialize its own copy
        restored = MultiprocessingSerializer.deserialize(blob)
        if flattened:  # rebuilt as SGLang's load_lora_adapter_from_tensors does
            bucket_cls = sglang_or_skip("sglang.srt.weight_sync.tensor_bucket").FlattenedTensorBucket
            assert set(restored) == {"flattened_tensor", "metadata"}
            bucket = bucket_cls(flattened_tensor=restored["flattened_tensor"], metadata=restored["metadata"])
            restored = dict(bucket.reconstruct_tensors())
        assert set(restored) == set(tensors)
        for name, tensor in tensors.items():
            torch.testing.assert_close(restored[name], tensor)


def test_the_other_release_field_is_rejected_by_installed_struct():
    """Sending the field of the other SGLang generation fails (seed layer 3) -- the shape must be read."""
    io = sglang_or_skip()
    shape = request_shape()
    other = SINGLE_FIELD if shape.per_rank else PER_RANK_FIELD
    with pytest.raises(TypeError):
        io.LoadLoRAAdapterFromTensorsReqInput(lora_name="x", config_dict=CONFIG, **{other: "AAAA"})


def test_checksums_only_where_declared():
    sglang_or_skip()
    shape = request_shape()
    req = build_lora_request("v", CONFIG, _tensors(), checksums={"a": "b"})
    assert ("expected_checksums" in request_to_json(req)) is shape.has_checksums


def test_tp_size_must_be_positive():
    sglang_or_skip()
    with pytest.raises(ValueError, match="tp_size"):
        build_lora_request("v", CONFIG, _tensors(), tp_size=0)
