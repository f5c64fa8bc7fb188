"""The adapter gathered into a persistent flat buffer, versions and retention, canary judgement (CPU, protocol logic)."""

from __future__ import annotations

import pytest
import torch

from verl_sglang_lora.sglang_contract.weight_names import ModelWeightNames
from verl_sglang_lora.runtime.sync.flat_adapter import ALIGN, AdapterCollector, fingerprint, plan_layout
from verl_sglang_lora.runtime.sync.flat_adapter import view as flat_view
from verl_sglang_lora.runtime.sync.canary import CanaryError, judge_canary
from verl_sglang_lora.runtime.sync.versions import AdapterVersions, adapter_name


def _lora_stream(layers=2, rank=4, hidden=64):
    for i in range(layers):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            yield f"base_model.model.model.layers.{i}.self_attn.{proj}.lora_A.weight", torch.randn(rank, hidden)
            yield f"base_model.model.model.layers.{i}.self_attn.{proj}.lora_B.weight", torch.randn(hidden if proj != "k_proj" and proj != "v_proj" else 32, rank)


def test_collect_gathers_the_stream_into_one_flat_buffer_of_the_adapters_size(tiny_qwen3):
    """Device memory held by a sync = the adapter (one buffer; the request is described over it, no second copy)."""
    names = ModelWeightNames.from_model_path(tiny_qwen3)
    stream = [(n, t) for n, t in _lora_stream(rank=4) if ".layers.0." in n or ".layers.1." in n]
    collector = AdapterCollector()
    adapter = collector.collect(iter(stream), names.resolve_lora)
    payload = sum(t.numel() * t.element_size() for _, t in stream)
    assert adapter.nbytes == payload and adapter.flat.numel() <= payload + ALIGN * len(stream)
    for (name, tensor), entry in zip(stream, adapter.entries):
        assert adapter.tensors[entry.name].data_ptr() == adapter.flat.data_ptr() + entry.offset  # a view, no copy
        assert torch.equal(adapter.tensors[names.resolve_lora(name)[0]], tensor)


def test_later_syncs_copy_into_the_same_buffer(tiny_qwen3):
    names = ModelWeightNames.from_model_path(tiny_qwen3)
    stream = list(_lora_stream(rank=4))
    collector = AdapterCollector()
    first = collector.collect(iter(stream), names.resolve_lora)
    ptr, fp = first.flat.data_ptr(), first.fingerprint
    second = collector.collect(((n, t + 1) for n, t in stream), names.resolve_lora)
    assert second.flat.data_ptr() == ptr and collector.layouts_built == 1  # no new allocation
    assert second.fingerprint == fp  # same layout: the version tells the two apart
    name = names.resolve_lora(stream[0][0])[0]
    assert torch.equal(second.tensors[name], stream[0][1] + 1)
    third = collector.collect(iter(stream[:8]), names.resolve_lora)  # another set of tensors: a new layout
    assert collector.layouts_built == 2 and len(third.entries) == 8


def test_collect_clones_views_of_a_reused_buffer(tiny_qwen3):
    names = ModelWeightNames.from_model_path(tiny_qwen3)
    buffer = torch.zeros(2, 4 * 64)

    def producer():
        buffer[0] = 1.0
        buffer[1] = 2.0
        yield "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", buffer[0].view(4, 64)
        yield "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", buffer[1].view(64, 4)
        buffer.fill_(9.0)  # the producer reuses its buffer for what comes next

    adapter = AdapterCollector().collect(producer(), names.resolve_lora)
    assert torch.all(adapter.tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"] == 1.0)
    assert adapter.nbytes == 2 * 4 * 64 * 4
    assert adapter.module_leaves() == ["q_proj"]


def test_an_unknown_name_fails_the_sync_before_anything_is_kept(tiny_qwen3):
    names = ModelWeightNames.from_model_path(tiny_qwen3)
    collector = AdapterCollector(device="cpu")
    prefix = "base_model.model.model.layers.0.self_attn.q_proj"
    with pytest.raises(KeyError):
        collector.collect(iter([(f"{prefix}.lora_A.weight", torch.randn(4, 64)),
                                ("base_model.model.model.layers.0.self_attn.nope.lora_B.weight", torch.randn(64, 4))]),
                          names.resolve_lora)
    assert collector.flat is None and collector.entries == []


def test_snapshot_of_views_into_one_buffer_writes_and_reads_back(tmp_path):
    """safetensors refuses tensors that share storage; a producer's views into one flat buffer all do."""
    from safetensors.torch import load_file

    from verl_sglang_lora.runtime.sync.snapshot import read_snapshot, write_snapshot

    prefix = "base_model.model.model.layers.0.self_attn.q_proj"
    flat = torch.randn(2 * 4 * 64)
    a, b = flat[: 4 * 64].view(4, 64), flat[4 * 64 :].view(64, 4)
    write_snapshot(tmp_path, name="verl_lora_v1", version=1, fingerprint="fp", global_steps=1,
                   tensors={f"{prefix}.lora_A.weight": a, f"{prefix}.lora_B.weight": b},
                   peft_config={"r": 4, "lora_alpha": 4, "target_modules": ["q_proj"], "peft_type": "LORA"})
    snap = read_snapshot(tmp_path)
    loaded = load_file(f"{snap.path}/adapter_model.safetensors")
    assert torch.equal(loaded[f"{prefix}.lora_A.weight"], a) and torch.equal(loaded[f"{prefix}.lora_B.weight"], b)


def test_collect_rejects_empty_duplicate_and_half_pairs(tiny_qwen3):
    names = ModelWeightNames.from_model_path(tiny_qwen3)
    with pytest.raises(ValueError, match="no tensors"):
        AdapterCollector().collect(iter([]), names.resolve_lora)
    t = ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", torch.zeros(4, 64))
    with pytest.raises(ValueError, match="twice"):
        AdapterCollector().collect(iter([t, t]), names.resolve_lora)
    with pytest.raises(KeyError, match="missing lora_A or lora_B"):
        AdapterCollector().collect(iter([t]), names.resolve_lora)


def _flat_of(tensors: dict) -> tuple[list, torch.Tensor]:
    entries = plan_layout((n, tuple(t.shape), t.dtype) for n, t in tensors.items())
    flat = torch.zeros(entries[-1].offset + entries[-1].nbytes, dtype=torch.uint8)
    for e in entries:
        flat_view(flat, e).copy_(tensors[e.name])
    return entries, flat


def test_fingerprint_tracks_the_layout():
    x = {"a": torch.ones(3), "b": torch.arange(4.0)}
    same = fingerprint(_flat_of({k: v.clone() for k, v in x.items()})[0])
    assert fingerprint(_flat_of(x)[0]) == same
    renamed = {"a2": torch.ones(3), "b": torch.arange(4.0)}  # same bytes under another name
    assert fingerprint(_flat_of(renamed)[0]) != same
    reshaped = {"a": torch.ones(3), "b": torch.arange(4.0).view(2, 2)}
    assert fingerprint(_flat_of(reshaped)[0]) != same
    cast = {"a": torch.ones(3), "b": torch.arange(4.0).bfloat16()}
    assert fingerprint(_flat_of(cast)[0]) != same


def test_versions_idempotent_ack_monotonic_and_retention():
    v = AdapterVersions()
    assert v.check_push(1, "f1") == "load"
    v1 = v.name_for(1)
    assert v1 == adapter_name(1) == "verl_lora_v1"
    assert v.activate(v1, 1, "f1") == []
    assert v.check_push(1, "f1") == "ack"  # re-push of the served version
    assert v.check_push(1, "other") == "load"  # same version, different content -> a revision name
    on_v1 = v.acquire()  # an in-flight request on v1
    v2 = v.name_for(2)
    assert v.activate(v2, 2, "f2") == []  # v1 still referenced: not unloaded
    on_v2 = v.acquire()
    v3 = v.name_for(3)
    assert v.activate(v3, 3, "f3") == []  # v1 and v2 both still referenced
    assert v.release(on_v1) == [v1]  # last reference to v1 gone: unload v1 ...
    assert v.release(on_v2) == [v2]  # ... and v1 is not handed out a second time
    assert v.status()["unloading"] == [v1, v2]
    v.forget([v1, v2])
    assert v.status()["loaded"] == [v3] and v.status()["unloading"] == []
    with pytest.raises(ValueError, match="monotonic"):
        v.check_push(1, "f1")
    assert v.name_for(3) == "verl_lora_v3r1"
    with pytest.raises(ValueError):
        adapter_name(2**63)


def test_canary_judgement():
    from verl_sglang_lora.runtime.sync.canary import CanaryExpectation

    nonzero = CanaryExpectation.of({"m.lora_A.weight": torch.ones(2, 2), "m.lora_B.weight": torch.ones(2, 2)}, 1.0)
    zero = CanaryExpectation.of({"m.lora_A.weight": torch.ones(2, 2), "m.lora_B.weight": torch.zeros(2, 2)}, 1.0)
    tiny = CanaryExpectation.of({"m.lora_A.weight": torch.full((2, 2), 1e-3), "m.lora_B.weight": torch.full((2, 2), 1e-3)}, 1.0)
    assert zero.zero and not nonzero.zero and nonzero.effect_bound == pytest.approx(4.0)
    assert judge_canary({"max_abs_diff": 0.3}, nonzero, "v1") == "pass"
    assert judge_canary({"max_abs_diff": 0.0}, zero, "v0") == "pass"
    assert judge_canary({"max_abs_diff": 0.0}, tiny, "v2") == "inconclusive"
    with pytest.raises(CanaryError, match="did not change"):
        judge_canary({"max_abs_diff": 0.0}, nonzero, "v1")
    with pytest.raises(CanaryError, match="all-zero"):
        judge_canary({"max_abs_diff": 0.5}, zero, "v0")
    assert CanaryExpectation(**nonzero.to_dict()) == nonzero  # travels to the server actor as a dict
