"""Which adapter names the installed SGLang still holds, read from its tokenizer manager.

The seam, checked at run time (``sglang_holds`` answers None where a release has no registry to read):
- ``tokenizer_manager.lora_registry._registry`` (name -> ``LoRARef``, every release): the adapters requests can name;
- ``tokenizer_manager.pending_lora_unloads`` (name -> lora_id, 0.5.23 on): names SGLang took out of the registry
  whose unload did not finish on every rank (the scheduler refused it, or a load failed part-way). Such a name is still
  loaded somewhere, a load of the same name is refused ("has an incomplete unload"), and an unload of it retries the
  pending one. Up to 0.5.18 a refused unload leaves the name in neither place: SGLang offers no retry.
"""

from __future__ import annotations

from typing import Any


def sglang_holds(tokenizer_manager: Any, name: str) -> bool | None:
    """Whether SGLang still holds adapter ``name`` (registered, or its unload pending); None when the release does
    not expose its registry."""
    registry = getattr(getattr(tokenizer_manager, "lora_registry", None), "_registry", None)
    if registry is None:
        return None
    return name in registry or name in (getattr(tokenizer_manager, "pending_lora_unloads", None) or {})
