"""verl's HTTP client for SGLang (``AsyncHttpServerAdapter``), made instantiable where the installed SGLang's
``EngineBase`` declares abstract methods verl's client lacks.

SGLang 0.5.23 adds ``begin_weight_update`` / ``end_weight_update`` to ``EngineBase``; verl 0.9.1's client subclasses
it without them, so its ``_init_server_adapter`` raises "Can't instantiate abstract class AsyncHttpServerAdapter"
at the first weight sync (seen on the H200). The subclass here sends them to SGLang's HTTP routes of the same
names; an abstract method it does not know raises, naming itself, when called -- never a silent no-op.
"""

from __future__ import annotations

import functools
import logging
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Iterator

from verl_sglang_lora.sglang_contract.installed import sglang_version
from verl_sglang_lora.sglang_contract.lora_request import request_to_json
from verl_sglang_lora.sglang_contract.update_session import begin_request, end_request

logger = logging.getLogger(__name__)

CLIENT_NAME = "AsyncHttpServerAdapter"


async def _begin_weight_update(self: Any, selector: str = "all") -> Any:  # EngineBase's default selector
    return await self._make_async_request("begin_weight_update", request_to_json(begin_request(selector)))


async def _end_weight_update(self: Any) -> Any:
    return await self._make_async_request("end_weight_update", request_to_json(end_request()))


KNOWN = {"begin_weight_update": _begin_weight_update, "end_weight_update": _end_weight_update}


def _unknown(name: str):
    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"sglang_lora: SGLang {sglang_version()} declares EngineBase.{name}, which verl's HTTP client does not "
            "implement and the plugin does not know; use a tested SGLang release (docs/compatibility.md)"
        )

    return refuse


def missing_methods(client: type) -> list[str]:
    """The abstract methods ``client`` leaves unimplemented under the installed SGLang's ``EngineBase`` (verl cannot
    instantiate it where there are any)."""
    return sorted(getattr(client, "__abstractmethods__", ()))


@functools.cache
def concrete_client(base: type) -> type:
    """``base`` itself where it is concrete, else a subclass filling its abstract methods (the known ones over HTTP);
    one class per base, published in this module under its name (so pickle finds it by reference)."""
    missing = missing_methods(base)
    if not missing:
        return base
    unknown = [m for m in missing if m not in KNOWN]
    if unknown:
        logger.warning("sglang_lora: verl's %s lacks %s of SGLang %s's EngineBase; they raise if called",
                       base.__name__, unknown, sglang_version())
    methods = {m: KNOWN.get(m) or _unknown(m) for m in missing}
    cls = type(base.__name__, (base,), {**methods, "__module__": __name__, "__qualname__": base.__name__})
    globals()[base.__name__] = cls
    return cls


@contextmanager
def concrete_client_in(module: ModuleType) -> Iterator[None]:
    """While the body runs, ``module``'s ``AsyncHttpServerAdapter`` (the name verl's ``_init_server_adapter`` looks
    up) is the concrete client."""
    original = getattr(module, CLIENT_NAME)
    setattr(module, CLIENT_NAME, concrete_client(original))
    try:
        yield
    finally:
        setattr(module, CLIENT_NAME, original)
