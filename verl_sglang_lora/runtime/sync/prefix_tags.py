"""Prefix-cache keys per adapter version, so a sync never needs a cache flush.

SGLang keys a cached prefix by the request's ``extra_key`` with the adapter's lora id appended
(``schedule_batch.Req``). A resident slot keeps its lora id across versions, so KV computed under version v would be
reused under v+1. Each request therefore carries its adapter's version in ``extra_key``: prefixes of another version
never match, and old ones age out of the radix tree by LRU. A release whose ``GenerateReqInput`` declares no
``extra_key`` cannot be tagged: the server flushes the cache on every switch instead (``supported`` is False).
"""

from __future__ import annotations

from typing import Any

TAG = "|sglang_lora_v"


class PrefixTags:
    """Which content version each adapter name holds, and the tag requests for that name carry."""

    def __init__(self, generate_fields: set[str] | frozenset[str]) -> None:
        self.supported = "extra_key" in generate_fields
        self._versions: dict[str, int] = {}

    def set(self, name: str, version: int) -> None:
        """``name`` holds ``version`` from now on (called once the write or load has landed)."""
        self._versions[name] = version

    def forget(self, name: str) -> None:
        self._versions.pop(name, None)

    def suffix(self, name: str | None) -> str:
        version = self._versions.get(name) if name is not None else None
        return "" if version is None else f"{TAG}{version}"

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
