"""Every failed SGLang call carries status and body; known cryptic bodies are explained; transient failures
are retried. A stand-in aiohttp server plays SGLang's HTTP side (retry/timeout logic only)."""

from __future__ import annotations

import asyncio

import pytest

from verl_sglang_lora.sglang_contract.errors import KNOWN_ERRORS, SGLangRequestError, explain
from verl_sglang_lora.sglang_contract.http_client import SGLangHTTPClient

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402

POOL_MSG = (
    "LoRA adapter verl_actor_lora_name with rank 32 is incompatible with the current LoRA memory pool "
    "configuration. Please ensure that the LoRA adapter's rank is within the configured `--max-lora-rank`"
)


async def _serve(handler):
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"127.0.0.1:{port}"


def test_400_body_is_kept_and_explained():
    async def main():
        async def handler(request):
            return web.json_response({"success": False, "error_message": POOL_MSG}, status=400)

        runner, addr = await _serve(handler)
        try:
            with pytest.raises(SGLangRequestError) as info:
                await SGLangHTTPClient(addr, max_attempts=3).load_lora_adapter_from_tensors({"lora_name": "x"})
        finally:
            await runner.cleanup()
        return info.value

    err = asyncio.run(main())
    assert err.status == 400 and not err.retryable
    text = str(err)
    assert "incompatible with the current LoRA memory pool" in text and "max_lora_rank" in text and "cause:" in text


def test_success_false_in_200_is_an_error_too():
    async def main():
        async def handler(request):
            return web.json_response({"success": False, "error_message": "boom"})

        runner, addr = await _serve(handler)
        try:
            with pytest.raises(SGLangRequestError, match="boom"):
                await SGLangHTTPClient(addr).load_lora_adapter_from_tensors({})
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_503_is_retried_then_succeeds():
    calls = []

    async def main():
        async def handler(request):
            calls.append(1)
            if len(calls) < 3:
                return web.Response(status=503, text="server busy")
            return web.json_response({"success": True})

        runner, addr = await _serve(handler)
        try:
            return await SGLangHTTPClient(addr, max_attempts=3, backoff_s=0.01).post("flush_cache")
        finally:
            await runner.cleanup()

    assert asyncio.run(main()) == {"success": True} and len(calls) == 3


def test_connection_refused_is_retryable_and_reported():
    async def main():
        with pytest.raises(SGLangRequestError) as info:
            await SGLangHTTPClient("127.0.0.1:1", max_attempts=2, backoff_s=0.01).post("flush_cache")
        return info.value

    err = asyncio.run(main())
    assert err.status is None and err.retryable and "no response" in str(err)


def test_dataclass_wording_of_unexpected_field_is_explained():
    assert "serialized_named_tensors" in explain("TypeError: __init__() got an unexpected keyword argument 'x'")


@pytest.mark.parametrize("needle", [k[0] for k in KNOWN_ERRORS])
def test_every_known_error_has_cause_and_fix(needle):
    hint = explain(f"Traceback ... {needle} ...")
    assert hint and hint.startswith("cause:") and "fix:" in hint

