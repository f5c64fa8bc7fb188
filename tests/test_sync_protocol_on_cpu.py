"""Bucketed adapter stream, accumulation, versions and retention, canary judgement (CPU, protocol logic)."""

from __future__ import annotations

import pytest
import torch

from verl_sglang_lora.sglang_contract.weight_names import ModelWeightNames
from verl_sglang_lora.runtime.sync.buckets import LoRAAccumulator, fingerprint, iter_buckets
from verl_sglang_lora.runtime.sync.canary import CanaryError, judge_canary
from verl_sglang_lora.runtime.sync.versions import AdapterVersions, adapter_name


def _lora_stream(layers=2, rank=4, hidden=64):
    for i in range(layers):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            yield f"base_model.model.model.layers.{i}.self_attn.{proj}.lora_A.weight", torch.randn(rank, hidden)
            yield f"base_model.model.model.layers.{i}.self_attn.{proj}.lora_B.weight", torch.randn(hidden if proj != "k_proj" and proj != "v_proj" else 32, rank)


def test_buckets_are_bounded_and_never_split_a_pair():
    items = list(_lora_stream())
    pair_bytes = 4 * 64 * 4 + 64 * 4 * 4
    buckets = list(iter_buckets(items, bucket_bytes=pair_bytes + 1))
    assert sum(len(b) for b in buckets) == len(items)
    for b in buckets:
        modules = [n.rsplit(".lora_", 1)[0] for n, _ in b]
        assert all(modules.count(m) == 2 for m in modules)  # A and B together
        assert sum(t.numel() * t.element_size() for _, t in b) <= pair_bytes + 1 or len(b) == 2


def test_pair_kept_together_even_when_interleaved():
    a, b = torch.zeros(2, 2), torch.zeros(2, 2)
    stream = [("x.layers.0.q_proj.lora_A.weight", a), ("x.layers.0.k_proj.lora_A.weight", a),
              ("x.layers.0.q_proj.lora_B.weight", b), ("x.layers.0.k_proj.lora_B.weight", b)]
    buckets = list(iter_buckets(stream, bucket_bytes=40))
    assert [[n.split(".")[3] for n, _ in bk] for bk in buckets] == [["q_proj", "q_proj"], ["k_proj", "k_proj"]]


def test_accumulator_clones_views_of_a_reused_buffer(tiny_qwen3):
    names = ModelWeightNames.from_model_path(tiny_qwen3)
    buffer = torch.zeros(2, 4 * 64)
    acc = LoRAAccumulator(resolve=names.resolve_lora)
    buffer[0] = 1.0
    buffer[1] = 2.0
    acc.add_bucket([
        ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", buffer[0].view(4, 64)),
        ("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", buffer[1].view(64, 4)),
    ])
    buffer.fill_(9.0)  # the producer reuses its buffer for the next bucket
    adapter = acc.finish()
    assert torch.all(adapter.tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"] == 1.0)
    assert adapter.num_buckets == 1 and adapter.nbytes == 2 * 4 * 64 * 4
    assert adapter.module_leaves() == ["q_proj"]


def test_accumulator_resolves_a_whole_bucket_before_moving_any_tensor(tiny_qwen3):
    """An unknown name fails the bucket before anything of it is copied or recorded."""
    names = ModelWeightNames.from_model_path(tiny_qwen3)
    acc = LoRAAccumulator(resolve=names.resolve_lora, device="cpu")
    prefix = "base_model.model.model.layers.0.self_attn.q_proj"
    with pytest.raises(KeyError):
        acc.add_bucket([(f"{prefix}.lora_A.weight", torch.randn(4, 64)),
                        ("base_model.model.model.layers.0.self_attn.nope.lora_B.weight", torch.randn(64, 4))])
    assert acc.tensors == {} and acc.nbytes == 0 and acc._modules == []


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


def test_accumulator_rejects_empty_duplicate_and_half_pairs(tiny_qwen3):
    names = ModelWeightNames.from_model_path(tiny_qwen3)
    with pytest.raises(ValueError, match="no tensors"):
        LoRAAccumulator(resolve=names.resolve_lora).finish()
    acc = LoRAAccumulator(resolve=names.resolve_lora)
    t = ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", torch.zeros(4, 64))
    acc.add_bucket([t])
    with pytest.raises(ValueError, match="twice"):
        acc.add_bucket([t])
    with pytest.raises(KeyError, match="missing lora_A or lora_B"):
        acc.finish()


def test_fingerprint_tracks_content():
    x = {"a": torch.ones(3), "b": torch.arange(4.0)}
    assert fingerprint(x) == fingerprint({k: v.clone() for k, v in x.items()})
    y = {"a": torch.ones(3), "b": torch.arange(4.0).flip(0)}  # same sum, different order
    assert fingerprint(x) != fingerprint(y)
    # tensors of one shape are reduced together: a change in any one of them still shows
    same_shape = {f"t{i}": torch.full((2, 3), float(i)) for i in range(5)}
    changed = {**same_shape, "t3": same_shape["t3"].clone().index_fill_(1, torch.tensor([2]), -1.0)}
    assert fingerprint(same_shape) != fingerprint(changed)
    mixed = {"e": torch.zeros(0), "h": torch.ones(2, 2, dtype=torch.bfloat16), **x}  # empty and bf16 tensors
    assert fingerprint(mixed) == fingerprint({k: v.clone() for k, v in mixed.items()})


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
