"""Prefix-cache keys per adapter version, so a sync never needs a cache flush.

SGLang keys a cached prefix by the request's ``extra_key`` with the adapter's lora id appended
(``schedule_batch.Req``). A resident slot keeps its lora id across versions, so KV computed under version v would be
reused under v+1. Each request therefore carries its adapter's version in ``extra_key``: prefixes of another version
never match, and old ones age out of the radix tree by LRU. A release whose ``GenerateReqInput`` declares no
``extra_key`` cannot be tagged: the server flushes the cache on every switch instead (``supported`` is False); so
does SGLang's experimental C++ radix tree (``SGLANG_EXPERIMENTAL_CPP_RADIX_TREE``), which keys by token ids only.
A tag names the version and a per-write count, so a version re-sent with other content never shares a key.
"""

from __future__ import annotations

import os
from typing import Any

from verl_sglang_lora.sglang_contract.installed import io_struct, struct_fields

TAG = "|sglang_lora_v"


class PrefixTags:
    """Which content version each adapter name holds, and the tag requests for that name carry."""

    def __init__(self, generate_fields: set[str] | frozenset[str] | None = None) -> None:
        """``generate_fields``: the fields of SGLang's ``GenerateReqInput`` (default: the installed release's)."""
        if generate_fields is None:
            generate_fields = set(struct_fields(io_struct("GenerateReqInput")))
        cpp_tree = os.environ.get("SGLANG_EXPERIMENTAL_CPP_RADIX_TREE", "").lower() in ("1", "true", "yes")
        self.supported = "extra_key" in generate_fields and not cpp_tree
        self._tags: dict[str, str] = {}
        self._writes = 0

    def set(self, name: str, version: int) -> None:
        """``name`` holds ``version`` from now on (called once the write or load has landed)."""
        self._writes += 1
        self._tags[name] = f"{TAG}{version}.{self._writes}"

    def forget(self, name: str) -> None:
        self._tags.pop(name, None)

    def suffix(self, name: str | None) -> str:
        return self._tags.get(name, "") if name is not None else ""

    def tag(self, obj: Any) -> None:
        """Append the version tag of the request's adapter(s) to its ``extra_key``.

        A batch naming several adapters gets one tag naming all their versions: SGLang 0.5.12 hands a batch's
        ``extra_key`` to every item unsplit, and the tag still changes whenever any of those versions does.
        """
        if not self.supported:
            return
        names = obj.lora_path if isinstance(obj.lora_path, list) else [obj.lora_path]
        suffix = "".join(sorted({self.suffix(n) for n in names} - {""}))
        if not suffix:
            return
        keys = getattr(obj, "extra_key", None)
        obj.extra_key = [(k or "") + suffix for k in keys] if isinstance(keys, list) else (keys or "") + suffix
