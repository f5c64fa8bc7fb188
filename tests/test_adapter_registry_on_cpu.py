"""``sglang_contract/adapter_registry.sglang_holds`` against each SGLang release's own unload code.

Each release runs in its own interpreter (``.cache/sglang/V`` first on PYTHONPATH). Its tokenizer manager's
``_unload_lora_adapter_locked`` runs over its own ``LoRARegistry``; the scheduler's answer (the one part that needs a
GPU) is a refusal, then a success. What the plugin reads afterwards decides whether it retries the unload: on 0.5.23 a
refused unload keeps the name pending (still loaded; a load of the name is refused until an unload succeeds), up to
0.5.18 the name is gone from SGLang's books while the ranks may still hold it."""

from __future__ import annotations

import pytest

from tests.conftest import per_release_fixture, release_result
from verl_sglang_lora.releases import SGLANG_RELEASES

_SCRIPT = r"""
import asyncio, inspect, json, types
import sglang
from sglang.srt.lora.lora_registry import LoRARef, LoRARegistry
from sglang.srt.managers import io_struct
try:  # the tokenizer manager's LoRA half (importing the manager itself needs its HTTP stack)
    from sglang.srt.managers.tokenizer_control_mixin import TokenizerControlMixin as Owner
except ImportError:  # 0.5.8
    from sglang.srt.managers.tokenizer_communicator_mixin import TokenizerCommunicatorMixin as Owner
from verl_sglang_lora.sglang_contract.adapter_registry import sglang_holds

def answer(ok):
    fields = {"success": ok, "error_message": "" if ok else "rank 0: unload failed"}
    if "loaded_adapters" in getattr(io_struct.LoRAUpdateOutput, "__annotations__", {}) or \
            "loaded_adapters" in getattr(io_struct.LoRAUpdateOutput, "__struct_fields__", ()):
        fields["loaded_adapters"] = {}
    return io_struct.LoRAUpdateOutput(**fields)

async def main():
    tm = types.SimpleNamespace(lora_registry=LoRARegistry(), lora_update_lock=asyncio.Lock())
    keeps_pending = "pending_lora_unloads" in inspect.getsource(Owner._unload_lora_adapter_locked)
    if keeps_pending:
        tm.pending_lora_unloads = {}  # what the release's tokenizer manager starts with
    replies = [False, True]
    async def communicator(obj):
        return [answer(replies.pop(0))]
    tm.update_lora_adapter_communicator = communicator
    unload = Owner._unload_lora_adapter_locked  # the release's own
    await tm.lora_registry.register(LoRARef(lora_name="v1", lora_path="/a"))
    out = {"version": sglang.__version__, "keeps_pending": keeps_pending, "registered": sglang_holds(tm, "v1")}
    async def call():
        async with tm.lora_update_lock:
            try:
                return bool((await unload(tm, io_struct.UnloadLoRAAdapterReqInput(lora_name="v1"))).success)
            except ValueError as exc:  # the release's registry no longer knows the name
                return f"ValueError: {exc}"
    out["first"] = await call()
    out["after_refusal"] = sglang_holds(tm, "v1")
    out["retry"] = await call()
    out["after_retry"] = sglang_holds(tm, "v1")
    out["without_registry"] = sglang_holds(types.SimpleNamespace(), "v1")
    print(json.dumps(out))

asyncio.run(main())
"""


runs = per_release_fixture(SGLANG_RELEASES, ["-c", _SCRIPT], with_root=True)


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_a_refused_unload_is_held_where_sglang_keeps_it_pending(runs, version) -> None:
    out = release_result(runs, version)
    assert out["version"] == version and out["registered"] is True and out["without_registry"] is None
    assert out["first"] is False  # the scheduler's refusal
    assert out["after_refusal"] is out["keeps_pending"]
    if out["keeps_pending"]:  # still loaded on a rank: the plugin unloads it again, and that completes it
        assert out["retry"] is True and out["after_retry"] is False
    else:  # the name left SGLang's books with the refusal: a second unload has nothing to name
        assert out["retry"].startswith("ValueError: ") and out["after_retry"] is False
