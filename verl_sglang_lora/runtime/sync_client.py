"""``SGLangLoRAServerAdapter``: the weight-sync client verl instantiates in every hybrid worker for
``rollout.name=sglang_lora`` (registered in ``verl.workers.rollout.base._ROLLOUT_REGISTRY``).

Adapter syncs take the plugin's path: names resolved against the served checkpoint, tensors gathered into one
persistent flat device buffer, the load request built from the installed SGLang's struct, then one call to the
server actor, which loads it under a versioned name (or writes it in place into a resident slot), switches to it
atomically and runs the canary. Base-weight syncs (first sync in adapter mode, merge mode, no LoRA) keep verl's
bucketed ``update_weights_from_tensor`` path, with names resolved and tensors moved to the device first, inside one
weight-update session where the release requires it (SGLang 0.5.23). Memory release/resume is delegated to the
server's ledger.
"""

from __future__ import annotations

import logging
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator

import torch

from verl_sglang_lora.runtime.cuda_libs import warn_if_cudnn_mismatch
from verl_sglang_lora.runtime.lora_plan import lora_plan
from verl_sglang_lora.runtime.memory import sleep_level
from verl_sglang_lora.runtime.fault_injection import served_config
from verl_sglang_lora.runtime.resident.requests import (LoadVerifyError, LoaderCall, ResidentRequests,
                                                         attach_summary, check_load_verify, check_results,
                                                         verify_for_push, write_targets)
from verl_sglang_lora.runtime.resident.support import resident_enabled, session_unsafe_base
from verl_sglang_lora.runtime.settings import PluginSettings
from verl_sglang_lora.runtime.sync.adapter_push import AdapterPush, adapter_request_fields
from verl_sglang_lora.runtime.sync.canary import CanaryExpectation
from verl_sglang_lora.runtime.sync.device import current_device, to_device
from verl_sglang_lora.runtime.sync.flat_adapter import AdapterCollector, FlatAdapter
from verl_sglang_lora.runtime.sync.metrics import SyncStats
from verl_sglang_lora.runtime.sync.snapshot import write_snapshot
from verl_sglang_lora.runtime.sync.versions import adapter_name
from verl_sglang_lora.sglang_contract.expert_lora import ExpertDims, convert_stream
from verl_sglang_lora.sglang_contract.installed import weight_update_session
from verl_sglang_lora.sglang_contract.lora_request import request_to_json
from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config, trainer_scaling
from verl_sglang_lora.sglang_contract.update_session import update_session
from verl_sglang_lora.sglang_contract.weight_names import ModelWeightNames, lora_module_path
from verl_sglang_lora.verl_glue.config_access import sglang_rank_count
from verl_sglang_lora.verl_glue.config_guards import check_config, model_hf_config
from verl_sglang_lora.verl_glue.device_collect import install as install_device_collect
from verl_sglang_lora.verl_glue.http_engine import concrete_client_in
from verl_sglang_lora.verl_glue.imports import load_verl_server_adapter

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

_VerlServerAdapter = load_verl_server_adapter()


class SGLangLoRAServerAdapter(_VerlServerAdapter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        check_config(self.config, self.model_config)
        warn_if_cudnn_mismatch()
        self.lora = lora_plan(self.model_config)
        self._sleep_level = sleep_level(self.lora.as_adapter)
        self.settings = PluginSettings.from_rollout_config(self.config)
        self._names: ModelWeightNames | None = None
        self._collector = AdapterCollector(current_device())
        self._snapshot_root: Path | None = None
        on = self.lora.as_adapter and resident_enabled(self.settings.resident, sglang_rank_count(self.config),
                                                       session_unsafe_base(self.model_config, self.config))
        on = on and current_device() is not None
        # an expert adapter is never written in place (SGLang stores expert B scaled), only its loads verified
        self._resident = ResidentRequests(current_device()) if on and not self.lora.expert_projections else None
        # the loader stays launched after a fallback: ordinary loads verified
        self._load_verifier = self._resident or (ResidentRequests(current_device()) if on else None)
        self._resident_attached = -1  # the collector layout the server's slots are attached to (-1: none)
        self._resident_active: str | None = None  # the slot the server served after the last sync (None: unknown)
        self._served_scaling: float | None = None  # the trainer's peft scaling, which SGLang's lora_alpha / r must equal
        # the expert count and widths the fused-expert conversion reads, fixed by the model (None: a dense adapter)
        self._expert_dims = ExpertDims.from_hf_config(model_hf_config(self.model_config) or {}) \
            if self.lora.expert_projections else None
        if self.lora.as_adapter and self.settings.device_collect:
            install_device_collect()
        self._internal_version = -1

    # verl 0.9.1 writes ``rollout.sleep_level = 1`` after its first sync; the plugin's value is fixed by config.
    @property
    def sleep_level(self) -> int:
        return self._sleep_level

    @sleep_level.setter
    def sleep_level(self, value: int) -> None:
        if value != getattr(self, "_sleep_level", value):
            logger.warning("sglang_lora: ignoring sleep_level=%s; fixed to %s by the LoRA config", value, self._sleep_level)

    async def _init_server_adapter(self) -> None:
        if self._engine is not None:  # verl calls this before every release, resume and sync
            return
        # verl's HTTP client is abstract under SGLang 0.5.23's EngineBase (verl_glue/http_engine.py)
        with concrete_client_in(sys.modules[_VerlServerAdapter.__module__]):
            await super()._init_server_adapter()

    # ---- memory ----------------------------------------------------------------------------------------
    def _is_leader(self) -> bool:
        return self._engine is not None and self.device_mesh["infer_tp"].get_local_rank() == 0

    async def resume(self, tags: list[str]) -> None:
        await self._init_server_adapter()
        if self._is_leader() and self.config.free_cache_engine:
            await self.server_actor.resume_memory.remote(list(tags))

    async def release(self) -> None:
        await self._init_server_adapter()
        if self._is_leader() and self.config.free_cache_engine:
            await self.server_actor.release_memory.remote(None)

    # ---- weights ---------------------------------------------------------------------------------------
    def weight_names(self) -> ModelWeightNames:
        if self._names is None:
            self._names = ModelWeightNames.from_model_path(self.model_config.local_path)
        return self._names

    async def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], global_steps: int | None = None, **kwargs: Any):
        await self._init_server_adapter()
        peft_config = kwargs.get("peft_config")
        if self.lora.as_adapter and kwargs.get("base_sync_done", False):
            if peft_config is None:
                raise RuntimeError(
                    "sglang_lora: adapter mode (LoRA rank > 0, lora.merge=False) but the trainer sent no adapter "
                    "config with the LoRA sync; the rollout would keep serving a stale adapter"
                )
            return await self._sync_adapter(weights, peft_config, global_steps)
        # SGLang >= 0.5.23 takes tensor updates only inside a weight-update session (opened by the TP leader); the
        # resident writes' held session is closed first (SGLang refuses a second begin)
        leader = self._is_leader()
        try:
            if leader and self._load_verifier is not None and weight_update_session():  # writes or verifies
                await self.server_actor.close_weight_update_session.remote()
            # selector "all": verl's update names none, so it reaches every runner (a speculative draft too)
            async with update_session(self._http_call, None if leader else False, selector="all"):
                return await super().update_weights(self._base_weights(weights), global_steps=global_steps, **kwargs)
        except Exception:
            for _ in weights:  # the other ranks wait in the producer's collectives: finish them, then raise
                pass
            raise

    async def _http_call(self, endpoint: str, request: Any) -> Any:
        return await self._engine._make_async_request(endpoint, request_to_json(request))

    def _base_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        """Base weights with SGLang names (checked against the checkpoint), each on the device."""
        names, device, dropped = self.weight_names(), current_device(), 0
        for name, tensor in weights:
            if lora_module_path(name) is not None:
                dropped += 1  # adapter tensors go through the adapter sync that follows
                continue
            yield names.resolve_base(name), to_device(tensor, device)
        if dropped:
            logger.warning("sglang_lora: %d LoRA tensors in a base-weight sync were not sent as base weights", dropped)

    async def _sync_adapter(self, weights: Iterable[tuple[str, torch.Tensor]], peft_config: Any, global_steps: int | None) -> dict:
        """Gather the adapter into the persistent device buffer, then two calls to the server actor: stage the version
        (written in place or loaded, checked by the loader), then, once this client has read a verified answer,
        commit it (served, step set, canary). The snapshot for restart recovery is written between the verified answer
        and the commit: a restarted server serves it without a check, so it only ever holds a verified version (a
        server lost in the first phase recovers the previous version, and Ray's re-sent call stages this one
        again; one lost in the commit recovers this version, and the re-sent commit is acknowledged)."""
        t0 = time.perf_counter()
        if not self._is_leader():
            for _ in weights:  # consume in lockstep with the leader in case the producer runs collectives
                pass
            return {}
        version = self._version(global_steps)
        if self._expert_dims is not None:  # PEFT's fused-expert pairs as SGLang's 3-D expert LoRA weights
            weights = convert_stream(weights, self._expert_dims)
        adapter = self._collector.collect(weights, self.weight_names().resolve_lora)
        config_dict = normalize_peft_config(
            peft_config, rank=self.lora.rank, alpha=self.lora.alpha, modules=adapter.module_leaves()
        )
        self._served_scaling = trainer_scaling(peft_config, rank=self.lora.rank, alpha=self.lora.alpha)
        config_dict = served_config(config_dict, version)  # TEST-ONLY (fault_injection.py): a no-op unless enabled
        t_collect = time.perf_counter()
        inplace = self._resident is not None and self._resident_attached == self._collector.layouts_built
        fields = {} if inplace else self._request_fields(config_dict, adapter)
        calls, resident = self._resident_calls(adapter, config_dict, version, inplace)
        t_request = time.perf_counter()
        canary = None
        if self.settings.canary:
            canary = CanaryExpectation.of(adapter.tensors, self._served_scaling,
                                          self.settings.canary_min_delta).to_dict()
        stats = SyncStats(
            version=version, tensors=len(adapter.entries), bytes=adapter.nbytes,
            collect_ms=round((t_collect - t0) * 1e3, 2), request_ms=round((t_request - t_collect) * 1e3, 2),
            total_ms=round((time.perf_counter() - t0) * 1e3, 2),
        )
        # the push's identity: the layout and this sync (a call Ray re-sends carries the same one and is acknowledged;
        # another push of the same version is a new one)
        push = AdapterPush(version, f"{adapter.fingerprint}:{uuid.uuid4().hex[:16]}", global_steps, fields, stats,
                           canary, resident)

        def with_load_fields() -> LoaderCall | None:  # the ordinary load's fields, and the loader's verify of it
            push.request_fields = self._request_fields(config_dict, adapter)
            return verify_for_push(self._load_verifier, push, adapter.tensors, adapter_name(version))

        verify = verify_for_push(self._load_verifier, push, adapter.tensors, adapter_name(version))
        result = await self.server_actor.sync_adapter.remote(push)
        if result["action"] == "need_fields":  # e.g. a restarted server holds no slots yet
            verify = with_load_fields()
            result = await self.server_actor.sync_adapter.remote(push)
        if result["action"] == "need_verify":  # the server loads this version under a revision name
            verify = verify_for_push(self._load_verifier, push, adapter.tensors, result["name"])
            result = await self.server_actor.sync_adapter.remote(push)
        failed = self._check_resident(result, calls)
        if failed:  # never served: the server drops the staged write, then the version is loaded the ordinary way
            logger.error("sglang_lora: in-place adapter write failed its check (%s); loading version %d the "
                         "ordinary way and turning the resident path off", failed, version)
            await self.server_actor.commit_adapter.remote(version, failed)
            push.resident, push.resident_failed = None, failed
            verify = with_load_fields()
            result = await self.server_actor.sync_adapter.remote(push)
            self._resident = None
        if result["action"] != "ack":  # phase two: served only now that the client has read a verified answer
            try:
                check_load_verify(result, verify, self._served_scaling)
            except LoadVerifyError as exc:
                await self.server_actor.commit_adapter.remote(version, str(exc))
                raise
            # kept for a restarted server only once verified (it serves the snapshot without a check)
            snapshot_ms = await self._snapshot(version, adapter, config_dict, global_steps, push.fingerprint)
            result = await self.server_actor.commit_adapter.remote(version, None, snapshot_ms)
        logger.info("sglang_lora: adapter sync %s", result)
        return result

    def _resident_calls(self, adapter: FlatAdapter, config: dict, version: int, inplace: bool):
        """The loader calls for this sync: attach (once per launch and buffer layout), or the write for the slot the
        server does not serve (both slots' writes when the last sync did not say which it serves)."""
        if self._resident is None:
            return {}, None
        if inplace:  # the server writes its idle slot: the one it does not serve, when the last sync said which
            writes = self._resident.writes(version, write_targets(self._resident_active))
            return ({("write", slot): c for slot, c in writes.items()},
                    {"writes": {slot: c.blobs for slot, c in writes.items()}})
        attach = self._resident.attach(adapter.tensors, version, adapter.flat)
        return ({(c.op, c.slot): c for c in attach},  # slot1's load needs its own serialization of the tensors
                {"attach": [(c.op, c.slot, c.blobs) for c in attach], "slot_fields": self._request_fields(config, adapter)})

    def _request_fields(self, config: dict, adapter: FlatAdapter) -> dict:
        """The installed SGLang's load-request fields for this adapter (one serialization per call)."""
        return adapter_request_fields(config, adapter, sglang_rank_count(self.config), self.settings.verify_checksums)

    def _check_resident(self, result: dict, calls: dict) -> str | None:
        """The status the loader wrote for each op the server ran; None when all passed (or none ran)."""
        state = result.get("resident") or {}
        if self._resident is None:
            return None
        if state.get("disabled"):  # the server turned the path off (its log says why): versioned loads from now on
            logger.warning("sglang_lora: resident in-place sync off: %s", state["disabled"])
            self._resident = None
        ran = [calls[tuple(op_slot)] for op_slot in state.get("ran", [])]
        self._resident_attached = self._collector.layouts_built if state.get("attached") else -1
        self._resident_active = result.get("name") if result.get("action") in ("inplace", "ack") else None
        verdict = check_results(ran, self._served_scaling) if ran else None
        if verdict is None and any(c.op == "attach" for c in ran):
            logger.info("sglang_lora: resident slots attached: %s", attach_summary(ran))
        return verdict

    async def _snapshot(self, version: int, adapter: FlatAdapter, config: dict, global_steps: int | None,
                        fingerprint: str) -> float:
        """Keep the adapter where a restarted server finds it (only with server_max_restarts > 0)."""
        if self.settings.server_max_restarts == 0:
            return 0.0
        t0 = time.perf_counter()
        if self._snapshot_root is None:  # fixed per server actor (job, node, name), also across its restarts
            self._snapshot_root = Path(await self.server_actor.snapshot_dir.remote())
        write_snapshot(self._snapshot_root, name=adapter_name(version), version=version, fingerprint=fingerprint,
                       global_steps=global_steps, tensors=adapter.tensors, peft_config=config)
        return round((time.perf_counter() - t0) * 1e3, 2)

    def _version(self, global_steps: int | None) -> int:
        if global_steps is None:
            self._internal_version += 1
            return self._internal_version
        self._internal_version = max(self._internal_version, int(global_steps))
        return int(global_steps)


__all__ = ["SGLangLoRAServerAdapter"]
