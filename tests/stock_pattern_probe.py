"""verl 0.9.1's stock (``rollout.name=sglang``) LoRA sync pattern, driven through the SGLang on ``sys.path``, on CPU.

    python -m tests.stock_pattern_probe [--steps 50] [--slots 3]

prints one JSON line. What it drives, per training step, exactly as the stock path does it
(verl ``workers/rollout/sglang_rollout/sglang_rollout.py:338-357``): if an adapter named ``verl_actor_lora_name``
is listed, unload it by that name; then load the new version from tensors under the same name (unpinned); then the
rollout's requests, all with ``lora_path=verl_actor_lora_name``.

SGLang's side is its real code, release by release:
- the tokenizer manager's bookkeeping: SGLang's ``LoRARegistry`` (``unregister`` + ``wait_for_unload`` before the
  backend unload, a fresh ``LoRARef`` -- a new ``lora_id`` -- per load, ``register`` after it; ``acquire`` /
  ``release`` around each request) and its ``lora_ref_cache`` (a name -> ref dict);
- the request structs (``LoadLoRAAdapterFromTensorsReqInput``, ``UnloadLoRAAdapterReqInput``) and their ``to_ref()``;
- the TP worker's deserialization of its own payload (``MultiprocessingSerializer.deserialize``; the worker's
  CUDA-IPC reduction patch is left out, it needs CUDA), then ``LoRAManager.load_lora_adapter_from_tensors`` /
  ``unload_lora_adapter`` (the scheduler, TP worker and model runner methods in between are one-line pass-throughs);
- before each forward, what ``ForwardBatch.init_new`` does (``fetch_new_loras(set(lora_ids))``, which runs the
  pool's ``prepare_lora_batch``) and then ``LoRAManager.prepare_lora_batch``.
The manager, its ``LoRAMemoryPool``, eviction policy and LoRA layer wrappers are SGLang's own, built over the tiny
Qwen3-shaped model of ``tests/resident_selfcheck.py`` (same config as the ``tiny_qwen3`` fixture).

A second scenario, ``versioned``, loads version N under a new name and then unloads version N-1 (the order of the
upstream report): the same SGLang calls, a different name per step.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import types
import weakref
from typing import Any

import torch

from tests.resident_selfcheck import build_manager, peft_adapter, peft_config, pinning_is_noop, release_scope

NAME = "verl_actor_lora_name"  # verl/workers/rollout/sglang_rollout/utils.py:26
RANK = 8


class WithPolicy:
    """The release's server args with ``lora_eviction_policy`` replaced (``LoRAManager.__init__`` reads it from there
    and hands it to its pool); every other attribute is the release's own."""

    def __init__(self, args: Any, policy: str) -> None:
        self._args, self.lora_eviction_policy = args, policy

    def __getattr__(self, name: str) -> Any:
        return getattr(self._args, name)


class Server:
    """SGLang's tokenizer-side and backend-side LoRA state for one TP rank, driven as the server drives it."""

    def __init__(self, manager: Any) -> None:
        from sglang.srt.lora.lora_registry import LoRARegistry

        self.manager, self.registry, self.lora_ref_cache = manager, LoRARegistry(), {}
        self.adapters: list[weakref.ref] = []  # every LoRAAdapter ever loaded, to see which are still alive

    # -- /v1/models: the registry's adapters
    def listed(self) -> set[str]:
        return set(self.registry.get_all_adapters())

    # -- /unload_lora_adapter
    async def unload(self, name: str) -> None:
        from sglang.srt.managers.io_struct import UnloadLoRAAdapterReqInput

        lora_id = await self.registry.unregister(name)
        await self.registry.wait_for_unload(lora_id)
        req = UnloadLoRAAdapterReqInput(lora_name=name, lora_id=lora_id)
        result = self.manager.unload_lora_adapter(req.to_ref())
        assert result.success, result.error_message

    # -- /load_lora_adapter_from_tensors
    async def load(self, name: str, tensors: dict, config: dict) -> str:
        from sglang.srt.lora.lora_registry import LoRARef
        from sglang.srt.managers import io_struct
        from sglang.srt.utils import MultiprocessingSerializer

        ref = LoRARef(lora_name=name, lora_path="__tensor__", pinned=False)  # a fresh lora_id per load
        fields = io_struct.LoadLoRAAdapterFromTensorsReqInput.__annotations__
        blob = MultiprocessingSerializer.serialize(tensors)
        if "serialized_named_tensors" in fields:  # >= 0.5.18: one copy per TP rank (verl 0.9.1's field)
            req = io_struct.LoadLoRAAdapterFromTensorsReqInput(lora_name=name, config_dict=config,
                                                               serialized_named_tensors=[blob], lora_id=ref.lora_id)
            own = req.serialized_named_tensors[0]
        else:  # <= 0.5.12: a single serialized payload
            req = io_struct.LoadLoRAAdapterFromTensorsReqInput(lora_name=name, config_dict=config,
                                                               serialized_tensors=blob, lora_id=ref.lora_id)
            own = req.serialized_tensors
        result = self.manager.load_lora_adapter_from_tensors(req.to_ref(), MultiprocessingSerializer.deserialize(own),
                                                             req.config_dict, req.added_tokens_config)
        assert result.success, result.error_message
        await self.registry.register(ref)
        self.lora_ref_cache[name] = ref
        self.adapters.append(weakref.ref(self.manager.loras[ref.lora_id]))
        return ref.lora_id

    # -- a batch of generate requests with lora_path=name
    async def serve(self, name: str, batch: int = 4) -> int:
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        lora_id = await self.registry.acquire(name)
        try:
            self.manager.fetch_new_loras({lora_id})  # ForwardBatch.init_new
            with pinning_is_noop():
                self.manager.prepare_lora_batch(types.SimpleNamespace(batch_size=batch, forward_mode=ForwardMode.DECODE,
                                                                      lora_ids=[lora_id] * batch))
            return self.manager.memory_pool.uid_to_buffer_id[lora_id]
        finally:
            await self.registry.release(lora_id)

    def state(self, slot: int) -> dict:
        from sglang.srt.lora.mem_pool import EMPTY_SLOT

        m, pool = self.manager, self.manager.memory_pool
        policy = pool.eviction_policy
        order = getattr(policy, "access_order", None)
        if order is None:
            order = getattr(policy, "insertion_order", {})
        live = set(m.loras)
        return {
            "loras": len(m.loras), "lora_refs": len(m.lora_refs), "configs": len(m.configs),
            "pinned": m.num_pinned_loras,
            "pool_uids": len(pool.uid_to_buffer_id),
            "pool_ghosts": sum(uid is not None and uid not in live for uid in pool.uid_to_buffer_id),
            "free_slots": sum(u == EMPTY_SLOT for u in pool.buffer_id_to_uid),
            "policy_tracked": len(order),
            "registry": len(self.registry._registry), "registry_counters": len(self.registry._counters),
            "lora_ref_cache": len(self.lora_ref_cache),
            "adapters_alive": sum(r() is not None for r in self.adapters),  # freed by refcount alone (no gc run)
            "slot": slot,
        }


async def drive(scenario: str, steps: int, slots: int, policy: str = "lru") -> dict:
    with release_scope(1, 0, RANK, slots) as server_args:
        args = WithPolicy(server_args, policy)  # SGLang's default is "lru"; verl sets none
        server = Server(build_manager(1, 0, RANK, args, max_loras=slots))
        config, history, error = peft_config(RANK), [], None
        try:
            for step in range(steps):
                tensors = peft_adapter(RANK, seed=step)
                if scenario == "stock":  # sglang_rollout.py:341-357: unload by name if listed, then load the same name
                    if NAME in server.listed():
                        await server.unload(NAME)
                    await server.load(NAME, tensors, config)
                    slot = await server.serve(NAME)
                else:  # versioned: load N under a new name, serve it, unload N-1
                    await server.load(f"v{step}", tensors, config)
                    slot = await server.serve(f"v{step}")
                    if step:
                        await server.unload(f"v{step - 1}")
                history.append(server.state(slot))
        except Exception as exc:  # noqa: BLE001 - a failure is a finding: report the step it happened at
            error = {"step": len(history), "error": f"{type(exc).__name__}: {exc}"[:400]}
        gc.collect()
        alive_after_gc = sum(r() is not None for r in server.adapters)
        pool = server.manager.memory_pool
        return {"adapters_loaded": len(server.adapters), "adapters_alive_after_gc": alive_after_gc,"history": history, "error": error, "slots": pool.max_loras_per_batch,
                "policy": type(pool.eviction_policy).__name__}


def run(steps: int, slots: int, policies: list[str]) -> dict:
    import sglang

    out: dict[str, Any] = {"sglang_version": sglang.__version__, "sglang_file": sglang.__file__}
    for policy in policies:
        for scenario in ("stock", "versioned"):
            out[f"{scenario}.{policy}"] = asyncio.run(drive(scenario, steps, slots, policy))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--slots", type=int, default=3)
    parser.add_argument("--policies", default="lru,fifo")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    real_stdout = os.dup(1)
    os.dup2(2, 1)  # libraries print to stdout; the JSON line must be the only thing there
    try:
        result = run(args.steps, args.slots, args.policies.split(","))
    finally:
        sys.stdout.flush()
        os.dup2(real_stdout, 1)
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
