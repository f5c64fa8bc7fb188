"""A small async HTTP client for SGLang's control endpoints that never drops the response body.

``raise_for_status()`` alone yields '400 Bad Request for url ...' and the body -- the only place SGLang says
*why* an adapter was rejected -- is lost once the response context exits (seed layer 7). Here the body is
read first, then turned into :class:`SGLangRequestError`. Connection failures and 502/503/504 are retried
with backoff; 4xx are fatal at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from verl_sglang_lora.sglang_contract.errors import SGLangRequestError

logger = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({502, 503, 504})


class SGLangHTTPClient:
    def __init__(self, base_url: str, *, timeout_s: float = 300.0, max_attempts: int = 3, backoff_s: float = 0.5):
        self.base_url = base_url.rstrip("/")
        if not self.base_url.startswith("http"):
            self.base_url = f"http://{self.base_url}"
        self.timeout_s = timeout_s
        self.max_attempts = max(1, max_attempts)
        self.backoff_s = backoff_s

    async def post(self, endpoint: str, payload: dict[str, Any] | None = None, *, timeout_s: float | None = None) -> Any:
        return await self._call("POST", endpoint, payload, timeout_s)

    async def get(self, endpoint: str, *, timeout_s: float | None = None) -> Any:
        return await self._call("GET", endpoint, None, timeout_s)

    async def _call(self, method: str, endpoint: str, payload: dict[str, Any] | None, timeout_s: float | None) -> Any:
        import aiohttp

        url = f"{self.base_url}/{endpoint.lstrip('/')}"
        timeout = aiohttp.ClientTimeout(total=timeout_s or self.timeout_s)
        last: SGLangRequestError | None = None
        for attempt in range(1, self.max_attempts + 1):
            try:
                async with aiohttp.ClientSession(timeout=timeout) as session:
                    async with session.request(method, url, json=payload) as resp:
                        body = await resp.text()  # read before the context closes and before any raise
                        if resp.status < 400:
                            return _parse(body)
                        last = SGLangRequestError(endpoint, resp.status, body, resp.status in RETRYABLE_STATUS)
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
                last = SGLangRequestError(endpoint, None, f"{type(exc).__name__}: {exc}", retryable=True)
            if not last.retryable or attempt == self.max_attempts:
                raise last
            delay = self.backoff_s * (2 ** (attempt - 1))
            logger.warning("SGLang %s attempt %d/%d failed (%s); retrying in %.1fs", endpoint, attempt, self.max_attempts, last, delay)
            await asyncio.sleep(delay)
        raise last  # pragma: no cover - loop always returns or raises

    # Control endpoints (names are SGLang's HTTP routes, stable across the supported releases).
    async def load_lora_adapter_from_tensors(self, body: dict[str, Any]) -> Any:
        result = await self.post("load_lora_adapter_from_tensors", body)
        if isinstance(result, dict) and result.get("success") is False:
            raise SGLangRequestError("load_lora_adapter_from_tensors", 200, json.dumps(result))
        return result

    async def unload_lora_adapter(self, lora_name: str) -> Any:
        return await self.post("unload_lora_adapter", {"lora_name": lora_name})

    async def release_memory_occupation(self, tags: list[str]) -> Any:
        return await self.post("release_memory_occupation", {"tags": tags})

    async def resume_memory_occupation(self, tags: list[str]) -> Any:
        return await self.post("resume_memory_occupation", {"tags": tags})

    async def flush_cache(self) -> Any:
        return await self.post("flush_cache")

    async def generate(self, body: dict[str, Any]) -> Any:
        return await self.post("generate", body)


def _parse(body: str) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return body
