"""Per-version prefix-cache keys on SGLang's real ``GenerateReqInput`` (runtime/sync/prefix_tags.py)."""

from __future__ import annotations

from tests.conftest import sglang_or_skip

from verl_sglang_lora.runtime.sync.prefix_tags import PrefixTags
from verl_sglang_lora.sglang_contract.installed import io_struct, struct_fields


def _request(**kwargs):
    return io_struct("GenerateReqInput")(**kwargs)


def test_tags_follow_the_version_each_name_holds() -> None:
    sglang_or_skip("sglang")
    tags = PrefixTags(struct_fields(io_struct("GenerateReqInput")))
    assert tags.supported  # every release the plugin supports declares extra_key; a new one that drops it flushes
    tags.set("slot0", 4)
    one = _request(input_ids=[1, 2], lora_path="slot0")
    tags.tag(one)
    assert one.extra_key == "|sglang_lora_v4.1"
    salted = _request(input_ids=[1, 2], lora_path="slot0", extra_key="user-salt")
    tags.tag(salted)
    assert salted.extra_key == "user-salt|sglang_lora_v4.1"  # the user's own key is kept, the version appended
    tags.set("slot0", 5)
    again = _request(input_ids=[1, 2], lora_path="slot0")
    tags.tag(again)
    assert again.extra_key == "|sglang_lora_v5.2" != one.extra_key
    tags.set("slot0", 5)  # the same version re-sent with other content: a key of its own
    resent = _request(input_ids=[1, 2], lora_path="slot0")
    tags.tag(resent)
    assert resent.extra_key == "|sglang_lora_v5.3"
    base = _request(input_ids=[1, 2], lora_path=None)
    tags.tag(base)
    assert base.extra_key is None  # the base policy's cache is shared by every version


def test_batches_are_tagged_with_all_their_versions() -> None:
    sglang_or_skip("sglang")
    tags = PrefixTags(struct_fields(io_struct("GenerateReqInput")))
    tags.set("slot1", 7)
    tags.set("slot0", 2)
    batch = _request(input_ids=[[1, 2], [3, 4]], lora_path=["slot1", None])
    tags.tag(batch)
    assert batch.extra_key == "|sglang_lora_v7.1"
    batch.normalize_batch_and_arguments()  # SGLang's own split hands every item the batch's key
    assert batch[0].extra_key == batch[1].extra_key == "|sglang_lora_v7.1"
    mixed = _request(input_ids=[[1, 2], [3, 4]], lora_path=["slot1", "slot0"])
    tags.tag(mixed)
    assert mixed.extra_key == "|sglang_lora_v2.2|sglang_lora_v7.1"  # changes when either slot's version does
    shared = _request(input_ids=[[1, 2], [3, 4]], lora_path="slot1")
    tags.tag(shared)
    assert shared.extra_key == "|sglang_lora_v7.1"
    tags.forget("slot1")
    gone = _request(input_ids=[1], lora_path="slot1")
    tags.tag(gone)
    assert gone.extra_key is None


def test_a_release_without_extra_key_is_not_tagged() -> None:
    tags = PrefixTags({"input_ids", "lora_path"})
    tags.set("slot0", 1)

    class Req:
        lora_path = "slot0"

    req = Req()
    tags.tag(req)
    assert not tags.supported and not hasattr(req, "extra_key")


def test_the_cpp_radix_tree_keys_by_tokens_only_so_nothing_is_tagged(monkeypatch) -> None:
    monkeypatch.setenv("SGLANG_EXPERIMENTAL_CPP_RADIX_TREE", "1")
    assert not PrefixTags({"extra_key", "lora_path"}).supported  # the server flushes on every switch instead
