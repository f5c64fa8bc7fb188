"""Drives the real ``SGLangLoRARollout`` in a real Ray actor on a CPU host (tests/test_server_actor_on_cpu.py).

The actor is the plugin's class built by verl's own ``SGLangHttpServer.__init__`` from composed verl configs; only
SGLang's engine is absent: ``launch_server`` installs a stand-in tokenizer manager (records what the plugin asks of
SGLang, answers generate with fixed tokens) instead of starting SGLang, plus a stand-in ``/load_lora_adapter`` HTTP
route for restart recovery. Everything between verl's generate and SGLang's tokenizer manager is the real code.
"""

from __future__ import annotations

import os
from typing import Any

from tests.compat_probe import stub_inert_modules


def worker_setup() -> None:
    """Ray worker_process_setup_hook: SGLang's server entry points cannot be imported on a CPU host."""
    stub_inert_modules()


class FakeTokenizerManager:
    """Records the calls SGLangLoRARollout makes on SGLang's tokenizer manager."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def generate_request(self, obj: Any, request: Any = None):
        self.calls.append(("generate", getattr(obj, "lora_path", None)))
        n = len(obj.input_ids)
        yield {
            "output_ids": [7, 8, 9],
            "meta_info": {
                "finish_reason": {"type": "length"},
                "output_token_logprobs": [(-0.5, t, None) for t in (7, 8, 9)],
                "input_token_logprobs": [(None, 0, None)] + [(-1.0, 0, None)] * (n - 1),
            },
        }

    async def release_memory_occupation(self, obj: Any, request: Any = None) -> None:
        self.calls.append(("release", list(obj.tags)))

    async def resume_memory_occupation(self, obj: Any, request: Any = None) -> None:
        self.calls.append(("resume", list(obj.tags)))

    async def flush_cache(self) -> None:
        self.calls.append(("flush", None))

    async def unload_lora_adapter(self, obj: Any, request: Any = None) -> Any:
        self.calls.append(("unload", obj.lora_name))
        return type("Result", (), {"success": True})()


async def start_load_route(records: list[dict]) -> int:
    """A stand-in for SGLang's HTTP ``/load_lora_adapter`` (records each body, answers success); returns its port."""
    from aiohttp import web

    async def load(request: Any) -> Any:
        records.append(await request.json())
        return web.json_response({"success": True})

    app = web.Application()
    app.router.add_post("/load_lora_adapter", load)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return site._server.sockets[0].getsockname()[1]


def probe_class(base: type) -> type:
    class ProbeServer(base):
        async def launch_server(self, *args: Any, **kwargs: Any) -> None:
            """The plugin's launch path minus SGLang: pinning wrapper on a stand-in tokenizer manager."""
            self.tokenizer_manager = FakeTokenizerManager()
            self.loaded_from_disk: list[dict] = []
            self._server_address, self._server_port = "127.0.0.1", await start_load_route(self.loaded_from_disk)
            if self.lora.as_adapter:
                self._pin_adapter_on_every_request()

        def calls(self) -> list:
            return list(self.tokenizer_manager.calls)

        def state(self) -> dict:
            return {"loaded_from_disk": getattr(self, "loaded_from_disk", None), "global_steps": self.global_steps,
                    "active": self.adapters.active.name if self.adapters.active else None,
                    "snapshot_root": str(self.snapshot_root)}

        def die(self) -> str:
            """End the process as SGLang's SIGQUIT handler does when the scheduler crashes (first instance only:
            Ray re-sends this call to the restarted actor, which must survive it)."""
            import ray

            if ray.get_runtime_context().was_current_actor_reconstructed:
                return "restarted"
            os._exit(1)

    return ProbeServer
