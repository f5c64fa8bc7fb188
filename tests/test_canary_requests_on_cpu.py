"""The server actor's canary sends its two scoring requests (the adapter's, the base's) together, built as SGLang's
real ``GenerateReqInput``; an error in one surfaces only after the other has ended, so a KV-cache release that follows
the error never meets a scoring request still running (SGLang's release asserts an idle scheduler)."""

from __future__ import annotations

from tests.server_probe import run_probe_script

SCRIPT = r'''
import asyncio, json
from types import SimpleNamespace
from verl_sglang_lora.runtime.server import SGLangLoRARollout
from verl_sglang_lora.runtime.sync.prefix_tags import PrefixTags

def actor(generate):
    return SimpleNamespace(_raw_generate_request=generate, tokenizer_manager=None, prefix_tags=PrefixTags())

in_flight, peak, ended, types = [], [], [], set()

async def scores(obj, _request):
    types.add(type(obj).__module__ + "." + type(obj).__name__)
    in_flight.append(obj.lora_path)
    await asyncio.sleep(0.05)
    peak.append(len(in_flight))
    shift = 0.25 if obj.lora_path else 0.0
    yield {"meta_info": {"input_token_logprobs": [(None, 0, None)] + [(-1.0 - shift * i, i, None) for i in (1, 2)]}}
    in_flight.remove(obj.lora_path)

async def refused(obj, _request):
    if obj.lora_path:
        raise RuntimeError("adapter request refused")
    await asyncio.sleep(0.05)
    ended.append("base")
    yield {"meta_info": {"input_token_logprobs": [(-1.0, 1, None)]}}

result = asyncio.run(SGLangLoRARollout.canary(actor(scores), [5, 6, 7], "verl_lora_slot1"))
try:
    asyncio.run(SGLangLoRARollout.canary(actor(refused), [5, 6], "verl_lora_slot0"))
    error = None
except RuntimeError as exc:
    error = str(exc)
print(json.dumps({"result": result, "peak": max(peak), "types": sorted(types), "error": error, "ended": ended}))
'''


def test_both_requests_in_flight_together_and_an_error_after_both_ended() -> None:
    out = run_probe_script(SCRIPT)
    assert out["types"] == ["sglang.srt.managers.io_struct.GenerateReqInput"]
    assert out["peak"] == 2  # the scheduler sees both requests at once
    assert out["result"] == {"max_abs_diff": 0.5, "tokens": 2.0}
    assert out["error"] == "adapter request refused"
    assert out["ended"] == ["base"]  # the error came only once the base request had ended
