"""The adapter push pipeline shared by the weight-sync client and the benchmarks: collect the stream into one
device-resident adapter, then build the load request body for the installed SGLang."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from verl_sglang_lora.sglang_contract.lora_request import build_lora_request, request_to_json, tensor_checksums
from verl_sglang_lora.runtime.sync.buckets import AccumulatedAdapter, LoRAAccumulator, iter_buckets


def collect_adapter(
    weights: Iterable[tuple[str, torch.Tensor]],
    resolve: Callable[[str], tuple[str, str, str]],
    bucket_bytes: int,
    device: torch.device | str | None,
) -> AccumulatedAdapter:
    """Names resolved, tensors moved to ``device`` bucket by bucket, A/B pairs checked, fingerprinted."""
    acc = LoRAAccumulator(resolve=resolve, device=device)
    for bucket in iter_buckets(weights, bucket_bytes):
        acc.add_bucket(bucket)
    return acc.finish()


def adapter_load_body(
    name: str,
    config_dict: dict[str, Any],
    adapter: AccumulatedAdapter,
    tp_size: int,
    verify_checksums: bool = False,
    flatten: bool | None = None,
) -> dict[str, Any]:
    """JSON body for ``/load_lora_adapter_from_tensors``, shaped by the installed SGLang's struct (one flattened
    bucket where the release takes it, unless ``flatten=False``)."""
    checksums = tensor_checksums(adapter.tensors) if verify_checksums else None
    req = build_lora_request(name, config_dict, adapter.tensors, tp_size=tp_size, checksums=checksums, flatten=flatten)
    return request_to_json(req)
