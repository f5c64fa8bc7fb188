"""Drives the real ``SGLangLoRARollout`` in a real Ray actor on a CPU host (tests/test_server_actor_on_cpu.py).

The actor is the plugin's class built by verl's own ``SGLangHttpServer.__init__`` from composed verl configs; only
SGLang's engine is absent: ``launch_server`` installs a stand-in tokenizer manager (records what the plugin asks of
SGLang, answers generate with fixed tokens, records adapter loads) instead of starting SGLang. Everything between
verl's generate (or the weight-sync client's one call) and SGLang's tokenizer manager is the real code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from verl_sglang_lora.tools.compat_probe import stub_inert_modules

ROOT = Path(__file__).resolve().parents[1]
# SGLang 0.5.12's server import chain reaches sgl_kernel (a CUDA-only binary): the repo's CPU stub stands in
SGL_KERNEL_STUB = ROOT / "scripts" / "cpu_env" / "sgl_kernel_stub"


def worker_setup() -> None:
    """Ray worker_process_setup_hook: SGLang's server entry points cannot be imported on a CPU host."""
    stub_inert_modules()


class FakeTokenizerManager:
    """Records the calls SGLangLoRARollout makes on SGLang's tokenizer manager."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.generate_keys = []

    async def generate_request(self, obj: Any, request: Any = None):
        if os.environ.get("PROBE_DIE_IN_GENERATE") == "1":  # as the actor dies when SGLang's scheduler crashes
            import ray

            if not ray.get_runtime_context().was_current_actor_reconstructed:
                os._exit(1)
        self.calls.append(("generate", getattr(obj, "lora_path", None)))
        self.generate_keys.append([getattr(obj, "lora_path", None), getattr(obj, "extra_key", None)])
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

    async def update_weights_from_tensor(self, obj: Any, request: Any = None) -> tuple[bool, str]:
        """Records what each TP rank would deserialize (SGLang's own serializer)."""
        from sglang.srt.utils import MultiprocessingSerializer

        ranks = [MultiprocessingSerializer.deserialize(blob) for blob in obj.serialized_named_tensors]
        self.calls.append(("update_weights_from_tensor", {"type": type(obj).__name__, "ranks": ranks,
                                                          "flush_cache": obj.flush_cache}))
        return True, "Success"

    async def unload_lora_adapter(self, obj: Any, request: Any = None) -> Any:
        self.calls.append(("unload", obj.lora_name))
        if self.unload_ok:
            self.lora_registry._registry.pop(obj.lora_name, None)
        return _Result(success=self.unload_ok)

    unload_ok = True
    generate_keys: list  # [lora_path, extra_key] of each generate request, as SGLang received it
    die_on_first_tensor_load = False
    stall_first_tensor_load_s = 0.0  # the first tensor load answers only after this long, then registers anyway
    loaded_from_disk: list[dict]
    loaded_from_tensors: list[dict]

    class _Registry:
        def __init__(self) -> None:
            self._registry: dict = {}

    @property
    def lora_registry(self) -> Any:
        if "_lora_registry" not in self.__dict__:
            self.__dict__["_lora_registry"] = FakeTokenizerManager._Registry()
        return self.__dict__["_lora_registry"]

    async def load_lora_adapter(self, obj: Any, request: Any = None) -> Any:
        """SGLang's disk load (restart recovery): records the request the server actor built."""
        self.loaded_from_disk.append({"lora_name": obj.lora_name, "lora_path": obj.lora_path})
        return _Result(success=True)

    async def load_lora_adapter_from_tensors(self, obj: Any, request: Any = None) -> Any:
        """SGLang's tensor load: the struct must be the installed release's own class (the server actor built it);
        can end the process on its first call, as a crash mid-load would."""
        import ray
        from sglang.srt.managers import io_struct

        if self.die_on_first_tensor_load and not ray.get_runtime_context().was_current_actor_reconstructed:
            os._exit(1)
        if self.stall_first_tensor_load_s:
            stall, self.stall_first_tensor_load_s = self.stall_first_tensor_load_s, 0.0
            import asyncio

            # what a slow scheduler does: the load completes and registers after the caller gave up
            asyncio.get_running_loop().call_later(stall, lambda: self.lora_registry._registry.setdefault(obj.lora_name, 1))
            await asyncio.sleep(stall * 2)
        assert isinstance(obj, io_struct.LoadLoRAAdapterFromTensorsReqInput), type(obj)
        field = "serialized_named_tensors" if getattr(obj, "serialized_named_tensors", None) else "serialized_tensors"
        self.loaded_from_tensors.append({"lora_name": obj.lora_name, "r": obj.config_dict["r"], "field": field,
                                         "load_format": getattr(obj, "load_format", None)})
        self.calls.append(("load_tensors", obj.lora_name))
        self.lora_registry._registry[obj.lora_name] = 1
        return _Result(success=True)


class ResidentTokenizerManager(FakeTokenizerManager):
    """The stand-in with SGLang's REAL LoRA manager behind it (``tests/resident_selfcheck.ServedModel``: real pool,
    real LoRA layers and SGLang's CPU LoRA kernels on a stand-in model), sized by the launch arguments the plugin
    computes: adapter loads go through SGLang's own load, custom-loader updates run the plugin's real loader against
    the real pool, and generate requests are scored through SGLang's LoRA layers for the adapter they name, so
    the served log-probs depend on the bytes SGLang holds for that name."""

    def __init__(self, rank: int = 8) -> None:
        from tests import resident_selfcheck as selfcheck
        from verl_sglang_lora.runtime.lora_plan import LoRAPlan
        from verl_sglang_lora.sglang_contract.launch_args import lora_launch_args

        super().__init__()
        launch = lora_launch_args(LoRAPlan(rank, 2 * rank, "all-linear", False), resident=True)
        self.rank = launch["max_lora_rank"]
        self.served_model = selfcheck.ServedModel(self.rank, max_loras=launch["max_loras_per_batch"])
        self.manager = self.served_model.manager

    async def generate_request(self, obj: Any, request: Any = None):
        self.calls.append(("generate", getattr(obj, "lora_path", None)))
        self.generate_keys.append([getattr(obj, "lora_path", None), getattr(obj, "extra_key", None)])
        ids = [i % self.served_model.VOCAB for i in obj.input_ids]
        scores = self.served_model.served(obj.lora_path, ids + [7]) if len(ids) else []
        yield {
            "output_ids": [7, 8, 9],
            "meta_info": {
                "finish_reason": {"type": "length"},
                "output_token_logprobs": [(scores[-1] if scores else -0.5, t, None) for t in (7, 8, 9)],
                "input_token_logprobs": [(None, ids[0], None)] + [(lp, t, None) for lp, t in zip(scores, ids[1:])],
            },
        }

    async def load_lora_adapter_from_tensors(self, obj: Any, request: Any = None) -> Any:
        from sglang.srt.utils import MultiprocessingSerializer
        from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorBucket

        from tests import resident_selfcheck as selfcheck

        await super().load_lora_adapter_from_tensors(obj, request)
        payload = MultiprocessingSerializer.deserialize(obj.serialized_tensors if isinstance(obj.serialized_tensors, bytes)
                                                        else __import__("base64").b64decode(obj.serialized_tensors))
        if getattr(obj, "load_format", None) == "flattened_bucket":
            payload = dict(FlattenedTensorBucket(flattened_tensor=payload["flattened_tensor"],
                                                 metadata=payload["metadata"]).reconstruct_tensors())
        selfcheck.load(self.manager, obj.lora_name, {k: v.clone() for k, v in payload.items()}, self.rank, obj.pinned)
        self.manager.fetch_new_loras({self.manager.lora_refs[uid].lora_id for uid in self.manager.lora_refs
                                      if self.manager.lora_refs[uid].lora_name == obj.lora_name})
        return _Result(success=True)

    async def update_weights_from_tensor(self, obj: Any, request: Any = None) -> tuple[bool, str]:
        from sglang.srt.utils import MultiprocessingSerializer

        from verl_sglang_lora.runtime.resident import LOADER_PATH, loader

        if obj.load_format != LOADER_PATH:
            return await super().update_weights_from_tensor(obj, request)
        named = MultiprocessingSerializer.deserialize(obj.serialized_named_tensors[0])
        op = next(n for n, _ in named if n.startswith("verl_resident.v1|")).split("|")[1]
        self.calls.append(("loader", op))
        loader.apply(self.manager.base_model, named)  # never raises: reports through the shared status tensor
        return True, "Success"


class _Result:
    """The fields of SGLang's adapter load/unload outputs the server actor reads."""

    def __init__(self, success: bool) -> None:
        self.success = success
        self.error_message = None if success else "stand-in refusal"


class _ServerArgsSeen(Exception):
    """Raised by the stand-in ServerArgs with the keyword arguments verl's launch_server built."""


def probe_class(base: type) -> type:
    class ProbeServer(base):
        async def _launch(self, from_checkpoint: bool, *args: Any, **kwargs: Any) -> None:
            """The plugin's launch path minus SGLang: pinning wrapper on a stand-in tokenizer manager."""
            self.launches = [*getattr(self, "launches", []), "relaunch" if from_checkpoint else "launch"]
            resident = os.environ.get("PROBE_RESIDENT") == "1"
            self.tokenizer_manager = ResidentTokenizerManager() if resident else FakeTokenizerManager()
            self.loaded_from_disk = self.tokenizer_manager.loaded_from_disk = []
            self.loaded_from_tensors = self.tokenizer_manager.loaded_from_tensors = []
            self.tokenizer_manager.die_on_first_tensor_load = os.environ.get("PROBE_DIE_ON_FIRST_TENSOR_LOAD") == "1"
            self._server_address, self._server_port = "127.0.0.1", 0
            await self._after_launch()

        def refuse_unloads(self, refuse: bool = True) -> None:
            self.tokenizer_manager.unload_ok = not refuse

        def stall_next_tensor_load(self, seconds: float) -> None:
            self.tokenizer_manager.stall_first_tensor_load_s = seconds

        async def server_args(self, from_checkpoint: bool) -> dict:
            """The ServerArgs keywords of verl's real ``launch_server`` through the plugin's real launch path
            (SGLang's own ServerArgs fields; the constructor stops before anything starts)."""
            import sys

            from sglang.srt.server_args import ServerArgs

            module = sys.modules[base.__mro__[1].__module__]  # verl's async_sglang_server

            class Seen:
                __dataclass_fields__ = ServerArgs.__dataclass_fields__

                def __init__(self, **kwargs: Any) -> None:
                    raise _ServerArgsSeen(kwargs)

            original, module.ServerArgs = module.ServerArgs, Seen
            try:
                await base._launch(self, from_checkpoint)
            except _ServerArgsSeen as seen:
                return {k: v for k, v in seen.args[0].items() if k in ("load_format", "model_path", "enable_lora",
                                                                         "max_lora_rank", "lora_target_modules")}
            finally:
                module.ServerArgs = original
            raise AssertionError("verl's launch_server did not build ServerArgs")

        async def generate_named(self, lora_path: str, hold_s: float) -> dict:
            """A generate request that names its adapter itself, as the HTTP /generate route passes it, through the
            plugin's wrapped tokenizer manager; held open ``hold_s`` after its first answer."""
            import asyncio

            from verl_sglang_lora.sglang_contract.installed import io_struct

            obj = io_struct("GenerateReqInput")(input_ids=[5, 6, 7, 8], sampling_params={"max_new_tokens": 1},
                                                return_logprob=True, logprob_start_len=0, lora_path=lora_path)
            scored = 0
            async for out in self.tokenizer_manager.generate_request(obj, None):
                scored = sum(1 for x in out["meta_info"]["input_token_logprobs"] if x[0] is not None)
                await asyncio.sleep(hold_s)
            return {"lora_path": obj.lora_path, "scored": scored}

        def calls(self) -> list:
            return list(self.tokenizer_manager.calls)

        def generate_keys(self) -> list:
            return list(self.tokenizer_manager.generate_keys)

        def state(self) -> dict:
            return {"loaded_from_disk": getattr(self, "loaded_from_disk", None), "global_steps": self.global_steps,
                    "loaded_from_tensors": getattr(self, "loaded_from_tensors", None),
                    "restarts": self.sync_metrics.restarts, "last_canary": self.last_canary,
                    "launches": getattr(self, "launches", []),
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


def start_probe_server(model_path: str, snapshot_dir: str, *extra: str) -> tuple[Any, Any]:
    """In a probe script: compose verl's ppo_trainer config for an r8 adapter with restart recovery, start Ray and
    the probe server actor (named as verl names it, Ray restarts allowed once), launched. Returns (cfg, actor)."""
    import ray
    from verl.workers.rollout.replica import RolloutMode

    from verl_sglang_lora.tools.doctor import compose_config
    from verl_sglang_lora.runtime.recovery import ray_restart_options
    from verl_sglang_lora.runtime.server import SGLangLoRARollout

    cfg = compose_config("ppo_trainer", [
        f"actor_rollout_ref.model.path={model_path}", "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16", "actor_rollout_ref.model.target_modules=all-linear",
        "data.max_prompt_length=64", "data.max_response_length=16",
        "actor_rollout_ref.rollout.engine_kwargs.sglang_lora.server_max_restarts=1",
        f"actor_rollout_ref.rollout.engine_kwargs.sglang_lora.snapshot_dir={snapshot_dir}", *extra,
    ])
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": "tests.server_probe.worker_setup"})
    server = ray.remote(**ray_restart_options(1))(probe_class(SGLangLoRARollout))
    actor = server.options(name="sglang_server_0_0", max_concurrency=16).remote(
        config=cfg.actor_rollout_ref.rollout, model_config=cfg.actor_rollout_ref.model,
        rollout_mode=RolloutMode.HYBRID, workers=[], replica_rank=0, node_rank=0, nnodes=1, cuda_visible_devices="",
        base_gpu_id=0)
    ray.get(actor.launch_server.remote())
    return cfg, actor


def push_down_proj_version(server: Any, version: int) -> dict:
    """One adapter sync of a one-module (layer 0 down_proj, r 8) adapter whose lora_A is filled with the version
    number, as a versioned tensor load, committed as the sync client commits it (no loader verify here); the server
    actor's reply to the commit (the first phase's where it was not staged: an ack)."""
    import ray
    import torch

    from verl_sglang_lora.runtime.sync.adapter_push import AdapterPush
    from verl_sglang_lora.runtime.sync.metrics import SyncStats
    from verl_sglang_lora.sglang_contract.lora_request import lora_request_fields

    prefix = "base_model.model.model.layers.0.mlp.down_proj"
    config = {"r": 8, "lora_alpha": 16, "target_modules": ["down_proj"], "peft_type": "LORA"}
    tensors = {f"{prefix}.lora_A.weight": torch.full((8, 128), float(version)),
               f"{prefix}.lora_B.weight": torch.zeros(64, 8)}
    fields = lora_request_fields(config, tensors, tp_size=2)
    staged = ray.get(server.sync_adapter.remote(AdapterPush(version, f"fp{version}", version, fields,
                                                            SyncStats(version=version))))
    return ray.get(server.commit_adapter.remote(version)) if staged.get("staged") else staged


def resident_payload(requests: Any, adapter: Any, version: int, mode: str | None, config: dict,
                     slots: tuple[str, ...] | None = None) -> tuple[dict, dict | None]:
    """The loader calls and the push's ``resident`` payload as the sync client builds them: ``attach`` (the first sync
    of a launch) or ``write`` (later syncs, for ``slots``); ``({}, None)`` for a push without the resident path."""
    from verl_sglang_lora.runtime.resident.requests import SLOTS
    from verl_sglang_lora.runtime.sync.adapter_push import adapter_request_fields

    if mode == "attach":
        attach = requests.attach(adapter.tensors, version, adapter.flat)
        return ({(c.op, c.slot): c for c in attach},
                {"attach": [(c.op, c.slot, c.blobs) for c in attach],
                 "slot_fields": adapter_request_fields(config, adapter, 1)})
    if mode == "write":
        writes = requests.writes(version, slots or SLOTS)
        return {("write", s): c for s, c in writes.items()}, {"writes": {s: c.blobs for s, c in writes.items()}}
    return {}, None


def run_probe_script(script: str, *args: str, extra_env: dict[str, str] | None = None) -> dict:
    """Run a probe script in the state of a fresh interpreter (SGLang caches import-time facts) with the repo and
    the sgl_kernel stub on the path -- forked from a pre-imported zygote (tests/probe_zygote.py) where it can be,
    else a fresh interpreter; returns the JSON object it prints last."""
    from tests.probe_zygote import Zygote

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(SGL_KERNEL_STUB)])}
    env.pop("SGLANG_USE_CPU_ENGINE", None)
    zygote = Zygote.get(env, ROOT)
    if zygote is not None:
        rc, stdout, stderr = zygote.run(script, args, extra_env or {}, timeout=420)
    else:
        proc = subprocess.run([sys.executable, "-W", "ignore", "-c", script, *args], cwd=ROOT,
                              env={**env, **(extra_env or {})}, capture_output=True, text=True, timeout=420)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    assert rc == 0, f"exit {rc}: {stderr[-4000:]}"
    return json.loads(stdout.strip().splitlines()[-1])
