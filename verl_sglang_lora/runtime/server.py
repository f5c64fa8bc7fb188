"""``SGLangLoRARollout``: verl's SGLang server actor, with the LoRA contract owned from construction.

Imported only where the replica is built (the trainer process) and inside the actor itself; it needs an
installed SGLang. Everything that decides *what* to do lives in small modules (``lora_mode``,
``memory_tags``, ``sglang_contract``, ``sync``); this class wires them into verl's actor:

- ``sleep_level``, the memory-tag ledger and the LoRA launch args are fixed in ``__init__`` from the config;
- ``ServerArgs`` is built with the plugin's LoRA keys, whatever verl's own ``launch_server`` put there;
- in adapter mode every generate request names the active adapter version (``lora_path``), and pins it so
  the version is not unloaded while the request runs; each sample is tagged with that version;
- ``sleep``/``wake_up`` and the weight-sync client's ``release``/``resume`` all go through one ledger.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import sys
import time
from typing import Any

import ray

from verl_sglang_lora.verl_glue.config_access import sglang_rank_count
from verl_sglang_lora.verl_glue.config_guards import check_config, overlay_applied, refuse_raw_video
from verl_sglang_lora.runtime.lora_plan import lora_plan
from verl_sglang_lora.runtime.memory import KV_CACHE, MemoryTagLedger
from verl_sglang_lora.runtime.fault_injection import before_unload  # test-only hook, inert unless its env var is set
from verl_sglang_lora.runtime.recovery import RestartRecovery, ray_restart_options
from verl_sglang_lora.runtime.settings import PluginSettings
from verl_sglang_lora.runtime.watchdog import SchedulerHung, Watchdog
from verl_sglang_lora.runtime.sync.adapter_push import AdapterPush
from verl_sglang_lora.sglang_contract.errors import SGLangRequestError, request_outcome
from verl_sglang_lora.sglang_contract.adapter_registry import sglang_holds
from verl_sglang_lora.runtime.resident import LOADER_PATH
from verl_sglang_lora.runtime.resident.requests import (SLOTS as RESIDENT_SLOTS, ResidentSlots, detach_request,
                                                        send_loader_request)
from verl_sglang_lora.runtime.resident.support import mirror_bytes, resident_enabled, session_unsafe_base
from verl_sglang_lora.sglang_contract.installed import io_struct, weight_update_session
from verl_sglang_lora.sglang_contract.update_session import HeldSession
from verl_sglang_lora.sglang_contract.lora_request import REQUEST_CLASS as LORA_REQUEST_CLASS
from verl_sglang_lora.sglang_contract.ipc_reducers import prime_scheduler_reducers
from verl_sglang_lora.sglang_contract.launch_args import lora_launch_args
from verl_sglang_lora.sglang_contract.lora_backends import plugin_lora_backend
from verl_sglang_lora.verl_glue.server_args import running_server_args, wrap_server_args
from verl_sglang_lora.topology.launch import replica_launch_overrides
from verl_sglang_lora.runtime.sync.canary import CanaryExpectation, canary_prompt_ids, judge_canary
from verl_sglang_lora.runtime.sync.metrics import SyncMetrics
from verl_sglang_lora.runtime.sync.prefix_tags import PrefixTags
from verl_sglang_lora.runtime.sync.snapshot import clear_snapshots, snapshot_root
from verl_sglang_lora.runtime.sync.versions import (AdapterVersions, Lease, explicit_adapters, fill_adapter,
                                                     wants_active)
from verl_sglang_lora.verl_glue.imports import load_verl_sglang_server, refuse_sglang_cpu_engine

_verl_server = load_verl_sglang_server()

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

UNREAD_SYNCS_WARNING = 3  # adapter syncs with no drain_metrics() between: verl's metrics hook is not installed
_current_lease: contextvars.ContextVar[Lease | None] = contextvars.ContextVar("sglang_lora_lease", default=None)


class SGLangLoRARollout(_verl_server.SGLangHttpServer):
    """The server actor for ``rollout.name=sglang_lora`` (named like verl's so its ServerAdapter finds it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        refuse_sglang_cpu_engine()
        check_config(self.config, self.model_config)
        if not overlay_applied(self.model_config):
            logger.warning(
                "sglang_lora: the Hydra overlay is not applied (actor_rollout_ref.model.external_lib lacks "
                "verl_sglang_lora.register); registration relies on the verl.plugins entry point alone. Add "
                "`hydra.searchpath=[pkg://verl_sglang_lora.configs] +sglang_lora=default` and check "
                "`verl-sglang-lora doctor`."
            )
        self.lora = lora_plan(self.model_config)
        self.memory = MemoryTagLedger(as_adapter=self.lora.as_adapter)
        self.sleep_level = self.memory.sleep_level
        self.settings = PluginSettings.from_rollout_config(self.config)
        self.adapters = AdapterVersions()
        self.resident = ResidentSlots()
        self.sync_metrics = SyncMetrics()
        self._warned_metrics_unread = False
        # Validated here, before SGLang allocates any GPU memory.
        self.resident_on = self.lora.as_adapter and resident_enabled(self.settings.resident, sglang_rank_count(self.config),
                                                                     session_unsafe_base(self.model_config, self.config))
        # the in-place writes' weight-update session (SGLang >= 0.5.23), held across writes
        self.weight_session = HeldSession(self.resident_on and weight_update_session())
        self.lora_args = lora_launch_args(self.lora, self.settings.max_lora_rank, resident=self.resident_on,
                                          lora_backend=plugin_lora_backend())
        # an expert adapter is never written in place (SGLang stores expert B scaled): the loader only verifies loads
        inplace = self.resident_on and not self.lora.expert_projections
        # the resident slots' read-back mirrors live in SGLang's process beside its KV cache: kept free at launch
        mirror = mirror_bytes(getattr(self.model_config, "hf_config", None) or {}, self.lora.rank,
                              self.lora.target_modules) if inplace else None
        self.resident_reserve = 2 * (mirror or 0)
        if self.resident_on and not inplace:
            logger.warning("sglang_lora: expert LoRA (%s): versioned adapter loads, each checked byte for byte by the "
                           "plugin's loader before it serves; no in-place writes", self.lora.expert_projections)
        if inplace:
            logger.warning("sglang_lora: resident in-place sync on: 2 slots, each verified through a read-back "
                           "mirror of %s in SGLang's process where the trainer's adapter has the pool's dtype (else "
                           "block by block, with no mirror; the attach says which)",
                           f"{mirror / 2**20:.1f} MiB" if mirror else
                           "the adapter's size (not computable from this model's config)")
        self._raw_generate_request = None
        self.prefix_tags = PrefixTags()
        self._warned_no_adapter = False
        self._pending_canary: tuple[str, CanaryExpectation] | None = None
        self._staged: tuple[str, str, AdapterPush, dict | None] | None = None  # (name, action, push, verify) to commit
        self._unload_retry: list[str] = []  # stale versions SGLang refused to unload
        self._uncertain: set[str] = set()  # loads that timed out: maybe registered by SGLang after all
        self.last_canary: dict[str, Any] | None = None
        # restart recovery (recovery.py): a reconstructed actor relaunches SGLang before its first call
        ctx = ray.get_runtime_context()
        actor_name = ctx.get_actor_name() or f"sglang_server_{self.replica_rank}_{self.node_rank}"
        self.snapshot_root = snapshot_root(self.settings.snapshot_dir, ctx.get_job_id(), actor_name, ctx.get_node_id())
        self.recovery = RestartRecovery(self.settings.server_max_restarts)
        if not self.recovery.pending and self.settings.server_max_restarts > 0:
            clear_snapshots(self.snapshot_root)

    # ---- launch -------------------------------------------------------------------------------------
    async def launch_server(self, *args: Any, **kwargs: Any) -> Any:
        return await self._launch(False, *args, **kwargs)

    async def relaunch_server(self) -> Any:
        """Launch SGLang again in a Ray-restarted actor, on the checkpoint's weights (``checkpoint_weights``)."""
        return await self._launch(True)

    async def _launch(self, from_checkpoint: bool, *args: Any, **kwargs: Any) -> Any:
        module = sys.modules[_verl_server.SGLangHttpServer.__module__]
        original = module.ServerArgs
        module.ServerArgs = wrap_server_args(original, self.lora_args, from_checkpoint, await replica_launch_overrides(
            self.config, self.model_config, self.replica_rank, self.node_rank),  # topology: group overrides
            reserve_bytes=self.resident_reserve)
        try:
            result = await super().launch_server(*args, **kwargs)
        finally:
            module.ServerArgs = original
        await self._after_launch()
        return result

    async def _after_launch(self) -> None:
        """Adapter mode, on the node that hosts the tokenizer manager: pin every request to the active adapter, and
        prepare the scheduler for CUDA-IPC adapter loads (SGLang <= 0.5.12 patches its reducers only on a base
        update, which a relaunched server never gets: ``ipc_reducers``)."""
        self.weight_session.forget()  # a new SGLang process holds no session
        if self.lora.as_adapter and getattr(self, "tokenizer_manager", None) is not None:
            self._pin_adapter_on_every_request()
            await prime_scheduler_reducers(self.tokenizer_manager, sglang_rank_count(self.config))

    async def _recover_if_restarted(self) -> None:
        await self.recovery.ensure(self)

    async def get_server_address(self) -> tuple[str, int]:
        await self._recover_if_restarted()
        return super().get_server_address()

    def _pin_adapter_on_every_request(self) -> None:
        """Wrap the tokenizer manager's entry point: verl's generate and the HTTP /generate route both pass it."""
        tm = self.tokenizer_manager
        raw = tm.generate_request
        self._raw_generate_request = raw

        async def generate_request(obj: Any, request: Any = None):
            path = getattr(obj, "lora_path", None)
            named = explicit_adapters(path)
            served = self.adapters.active.name if self.adapters.active else None
            unserved = [n for n in named if n in RESIDENT_SLOTS and n != served]
            if unserved:  # its bytes may be a write not yet verified, or one that failed its check
                raise ValueError(f"sglang_lora: {unserved[0]} is a resident slot that is not the served adapter "
                                 f"version (that is {served}); name the served one or none")
            lease = _current_lease.get()
            # a request is leased to each adapter it reads: the ones it names, and the active one for the rest
            own = [self.adapters.acquire_named(n) for n in named]
            active = lease
            if wants_active(path) and lease is None:
                active = self.adapters.acquire()
                own.append(active)
            try:
                if wants_active(path):
                    self._name_adapter(obj, active)
                self.prefix_tags.tag(obj)
                async for out in raw(obj, request):
                    yield out
            finally:
                for held in own:
                    await self._release(held)

        tm.generate_request = generate_request

    def _name_adapter(self, obj: Any, lease: Lease | None) -> None:
        """Every prompt that left its adapter to the plugin is given the active version (explicit choices, e.g. the
        canary or a pinned evaluation, are kept); before the first sync that is the base policy, said once."""
        if lease is None and not self._warned_no_adapter:
            logger.warning(
                "sglang_lora: a generate request arrived before any adapter was loaded; it is served by the "
                "BASE policy (adapter version -1). verl syncs the adapter before the first rollout, so this "
                "means the weight sync did not run."
            )
            self._warned_no_adapter = True
        obj.lora_path = fill_adapter(getattr(obj, "lora_path", None), lease.name if lease else None)

    async def _release(self, lease: Lease | None) -> None:
        """Unpin; a version no request holds any more is unloaded now (awaited: its failure is seen)."""
        stale = self.adapters.release(lease)
        if stale:
            await self._unload(stale)

    # ---- generation -----------------------------------------------------------------------------------
    async def generate(self, *args: Any, **kwargs: Any) -> Any:
        refuse_raw_video(kwargs.get("video_data"))
        await self._recover_if_restarted()
        if not self.lora.as_adapter:
            return await super().generate(*args, **kwargs)
        lease = self.adapters.acquire()
        token = _current_lease.set(lease)
        try:
            output = await super().generate(*args, **kwargs)
        finally:
            _current_lease.reset(token)
            await self._release(lease)
        version = lease.version if lease else -1
        staleness = int(self.global_steps) - lease.version if lease is not None and self.global_steps is not None else None
        self.sync_metrics.record_sample(version, staleness)
        extra = getattr(output, "extra_fields", None)
        if isinstance(extra, dict):  # verl's agent loop turns extra_fields into per-sample non_tensor_batch columns
            extra["adapter_version"] = version
            extra["adapter_staleness"] = staleness  # None before the trainer set a step: same keys on every sample
        return output

    # ---- memory: one ledger for sleep/wake_up and the client's release/resume ---------------------------
    async def release_memory(self, tags: list[str] | None = None) -> list[str]:
        await self._recover_if_restarted()
        if self.node_rank != 0 or not self.config.free_cache_engine:
            return []
        todo = self.memory.to_release(tags)
        await self._occupation("release_memory_occupation", "ReleaseMemoryOccupationReqInput", todo,
                               self.memory.undo_release)
        return todo

    async def resume_memory(self, tags: list[str] | None = None) -> list[str]:
        await self._recover_if_restarted()
        if self.node_rank != 0:
            return []
        todo = self.memory.to_resume(tags)
        t0 = time.perf_counter()
        await self._occupation("resume_memory_occupation", "ResumeMemoryOccupationReqInput", todo,
                               self.memory.undo_resume)
        if KV_CACHE in todo:
            t1 = time.perf_counter()
            await self._serve_newest_adapter(flush="resume")
            self.sync_metrics.resume_kv_ms = round((t1 - t0) * 1e3, 2)
            self.sync_metrics.canary_ms = round((time.perf_counter() - t1) * 1e3, 2)
        return todo

    async def _occupation(self, method: str, request: str, todo: list[str], undo: Any) -> None:
        """Release or resume ``todo`` in SGLang; a failed call is undone in the ledger (SGLang did not do it)."""
        if not todo:
            return
        try:
            await getattr(self.tokenizer_manager, method)(io_struct(request)(tags=todo), None)
        except BaseException:
            undo(todo)
            raise

    async def sleep(self) -> None:
        await self.release_memory(None)

    async def wake_up(self) -> None:
        await self.resume_memory(None)

    async def release_kv_cache(self) -> None:
        await self.release_memory([KV_CACHE])

    async def resume_kv_cache(self) -> None:
        await self.resume_memory([KV_CACHE])

    def memory_status(self) -> dict[str, Any]:
        return {"as_adapter": self.lora.as_adapter, "plan": list(self.memory.plan), "released": sorted(self.memory.released)}

    # ---- adapter syncs: the one door (one Ray call per sync from the weight-sync client) --------------------
    def snapshot_dir(self) -> str:
        """Where the weight-sync client keeps the newest adapter for a restarted server (same node; asked once)."""
        return str(self.snapshot_root)

    async def sync_adapter(self, push: AdapterPush) -> dict[str, Any]:
        """Phase one of a sync: put one adapter version where SGLang can serve it, without serving it.

        With the resident path the version is written in place into the idle pinned slot (``runtime/resident``),
        whose loader verifies it byte for byte; otherwise it is loaded under a fresh versioned name (and, where the
        client sent one, checked by the loader's ``verify``). The loader answers only to the client, so the version
        is served only when the client, having read a verified answer, calls :meth:`commit_adapter` (phase two). A
        client that dies in between leaves the previous version serving. An exact re-push of the served version
        (same version, same fingerprint: a call Ray re-sends to a restarted actor that recovered it) is acknowledged.
        """
        await self._recover_if_restarted()
        t0 = time.perf_counter()
        if push.resident and not self.resident_on:
            self._disable_resident("the client sent in-place writes but this server was launched without the loader")
        if push.resident_failed:
            self._disable_resident(push.resident_failed)
        elif self.adapters.check_push(push.version, push.fingerprint) == "ack":
            logger.info("sglang_lora: version %d already served as %s; ack", push.version, self.adapters.active.name)
            return {"action": "ack", "name": self.adapters.active.name, "version": push.version,
                    "resident": {"ran": [], **self._resident_state()}}
        await self._drop_staged()
        ran = await self._write_resident(push) if push.resident and self.resident.disabled is None else None
        if ran is not None:
            name, action = self.resident.written, "inplace"
        elif not push.request_fields:  # an in-place push this sync cannot take: the client re-sends with fields
            return {"action": "need_fields", "version": push.version, "resident": self._resident_state()}
        else:
            name, action = self.adapters.name_for(push.version), "load"
            if push.verify and self.resident_on and push.verify.get("name") != name:  # the client builds it again
                return {"action": "need_verify", "name": name, "version": push.version,
                        "resident": self._resident_state()}
            request = io_struct(LORA_REQUEST_CLASS)(lora_name=name, **push.request_fields)
            try:
                await self._sglang_call("load_lora_adapter_from_tensors", request)
            except SGLangRequestError as exc:
                if exc.status is None:  # no answer: SGLang may still finish this load after we gave up on it
                    self._retire_uncertain(name)
                raise
        verified = await self._verify_load(push, name) if action == "load" else None
        push.stats.load_ms = round((time.perf_counter() - t0) * 1e3, 2)
        self._staged = (name, action, push, verified)
        return {"action": action, "name": name, "version": push.version, "staged": True,
                "resident": {"ran": ran or [], **self._resident_state()}, "verify": verified}

    async def commit_adapter(self, version: int, failure: str | None = None,
                             snapshot_ms: float = 0.0) -> dict[str, Any]:
        """Phase two: serve the version staged by :meth:`sync_adapter` (the client read a verified answer), set verl's
        step and run the canary; with ``failure`` (the client's check failed) the staged version is never served: an
        in-place write turns the resident path off (the client then loads the version the ordinary way), a load is
        unloaded. ``snapshot_ms``: the client's recovery snapshot of this version, for the sync's figures. A commit
        Ray re-sends to a restarted server that recovered this version from that snapshot is acknowledged."""
        await self._recover_if_restarted()
        t0 = time.perf_counter()
        staged = self._staged
        active = self.adapters.active
        if staged is None and failure is None and active is not None and active.version == version:
            return {"action": "ack", "name": active.name, "version": version, "resident": self._resident_state()}
        if staged is None or staged[2].version != version:  # the staged version (if any) stays for its own commit
            raise RuntimeError(f"sglang_lora: commit of version {version}, but the staged version is "
                               f"{staged[2].version if staged else None}: nothing is served (the sync's first phase "
                               "did not run here, e.g. the server restarted in between)")
        self._staged = None
        name, action, push, verified = staged
        if failure is not None:
            logger.error("sglang_lora: version %d staged as %s is NOT served: %s", version, name, failure)
            if action == "inplace":
                self._disable_resident(f"the in-place write of version {version} failed its check: {failure}")
            else:
                await self._unload([name])
            return {"action": "dropped", "name": name, "version": version}
        if action == "inplace":
            self.resident.active = name
        self.prefix_tags.set(name, push.version)  # before the switch: requests for it carry the new version's tag
        await self._activate(name, push.version, push.fingerprint, push.canary)
        if action == "load" and self.resident.disabled is not None and self.resident.created:
            await self._drop_slots()  # after a fallback: no request is given a slot any more
        await self.set_global_steps(push.global_steps if push.global_steps is not None else push.version)
        stats = push.stats
        stats.snapshot_ms = round(snapshot_ms, 2)
        stats.inplace = int(action == "inplace")
        stats.load_verified = int(bool(verified and verified["ran"]))
        stats.activate_ms = round((time.perf_counter() - t0) * 1e3, 2)
        stats.total_ms = round(stats.total_ms + stats.load_ms + snapshot_ms + stats.activate_ms, 2)
        self.sync_metrics.record_sync(stats)
        self._warn_if_metrics_unread()
        logger.info("sglang_lora: adapter %s active (version %d, %s) %s", name, push.version, action, stats)
        return {"action": action, "name": name, "version": push.version, "stats": dataclasses.asdict(stats),
                "resident": {"ran": [], **self._resident_state()}, "verify": verified}

    async def _drop_staged(self) -> None:
        """A staged version a new sync replaces is never served: a load is unloaded (its name retired), a written
        slot simply stays idle."""
        staged, self._staged = self._staged, None
        if staged is not None and staged[1] == "load":
            self.adapters.unloading.add(staged[0])
            await self._unload([staged[0]])

    async def _verify_load(self, push: AdapterPush, name: str) -> dict[str, Any] | None:
        """Run the client's loader ``verify`` of the version just loaded, before its activation. The loader answers
        on the client's status tensor, which only the client reads, when this sync returns: a mismatch stops the run
        there, before a rollout uses the version. None when the client sent none."""
        if not push.verify:
            return None
        reason = None
        if not self.resident_on:
            reason = "this server was launched without the plugin's loader"
        elif push.verify.get("name") != name:
            reason = f"the verify was built for {push.verify.get('name')!r}, SGLang holds the version as {name!r}"
        if reason is None:
            t0 = time.perf_counter()
            try:
                await self._loader_call(push.verify["blobs"])
                return {"ran": True, "ms": round((time.perf_counter() - t0) * 1e3, 2)}
            except SGLangRequestError as exc:  # the load itself succeeded: it serves, unverified, and the log says so
                reason = f"the verify request failed: {exc}"
        logger.warning("sglang_lora: version %d is not verified byte for byte in SGLang's pool: %s", push.version,
                       reason)
        return {"ran": False, "reason": reason}

    def _resident_state(self) -> dict[str, Any]:
        return {"attached": self.resident.attached, "disabled": self.resident.disabled}

    # ---- resident in-place slots (runtime/resident) --------------------------------------------------------------
    async def _write_resident(self, push: AdapterPush) -> list[tuple[str, str]] | None:
        """The loader ops run for this push, or None when this sync takes the ordinary load."""
        slots = self.resident
        if not slots.attached:
            attach = push.resident.get("attach")
            if not attach:
                return None  # the client attaches at its next sync (reply: attached=False)
            slots.created = True
            self.adapters.permanent.update(RESIDENT_SLOTS)
            try:
                for slot, fields in zip(RESIDENT_SLOTS, (push.request_fields, push.resident["slot_fields"])):
                    request = io_struct(LORA_REQUEST_CLASS)(lora_name=slot, pinned=True, **fields)
                    await self._sglang_call("load_lora_adapter_from_tensors", request)  # SGLang's own load of v
                for op, slot, blobs in attach:  # tracing a large model keeps the scheduler busy: not watched
                    await self._loader_call(blobs, watched=False)
            except SGLangRequestError as exc:  # e.g. the pool cannot pin two slots: versioned loads from now on
                self._disable_resident(f"creating the slots failed: {exc}")
                await self._drop_slots()
                return None
            slots.attached, slots.written = True, RESIDENT_SLOTS[0]  # slot0 holds SGLang's own load of v
            return [(op, slot) for op, slot, _ in attach]
        if "writes" not in push.resident:  # the client's buffer layout changed under attached slots
            self._disable_resident("the adapter's tensor layout changed after the slots were attached")
            return None  # the slots are dropped once the version's ordinary load serves (commit_adapter)
        slot = slots.idle(self.adapters.refs)
        if slot is None:
            logger.warning("sglang_lora: both resident slots are in use by running requests; version %d takes "
                           "the ordinary load", push.version)
            return None
        if slot not in push.resident["writes"]:  # the client wrote for the slot it saw idle last; this once, a load
            logger.info("sglang_lora: version %d came without a write for the idle slot %s (the client's view of the "
                        "served slot is older than this server's); it takes the ordinary load", push.version, slot)
            return None
        try:
            await self._loader_call(push.resident["writes"][slot])
        except SGLangRequestError as exc:  # the idle slot may be half written: never served
            self._disable_resident(f"the in-place write of version {push.version} failed in SGLang: {exc}")
            return None
        slots.written = slot
        return [("write", slot)]

    async def _loader_call(self, blobs: list[bytes], watched: bool = True) -> None:
        """One request to the plugin's custom weight loader in SGLang's scheduler (its status reaches the client
        through the shared status tensor; SGLang's own answer is checked here)."""
        async def call(method: str, request: Any) -> Any:
            return await self._sglang_call(method, request, watched=watched)

        await send_loader_request(call, blobs, LOADER_PATH, self.weight_session)

    async def close_weight_update_session(self) -> bool:
        """Close the in-place writes' held session (the sync client calls this before a base-weight update, which
        opens its own: SGLang refuses a second). Returns whether one was open."""
        was_open = self.weight_session.is_open
        await self.weight_session.close(self._sglang_call)
        return was_open

    def _retire_uncertain(self, name: str) -> None:
        """A load that timed out may still land: its name is never reused (a retry of the version gets a revision
        name), and it is unloaded at the next activation if SGLang did register it."""
        self.adapters.unloading.add(name)
        self._uncertain.add(name)

    def _sglang_holds(self, name: str) -> bool | None:
        """Whether SGLang holds ``name``: registered or its unload pending (None when the release does not say)."""
        return sglang_holds(self.tokenizer_manager, name)

    def _disable_resident(self, reason: str) -> None:
        if self.resident.disabled is None:
            logger.error("sglang_lora: RESIDENT IN-PLACE SYNC OFF for this server launch, falling back to versioned "
                         "adapter loads: %s", reason)
            self.resident.disabled = reason
            self.sync_metrics.resident_fallbacks += 1

    async def _drop_slots(self) -> None:
        """After a fallback (a versioned load now serves) the slots only take memory: the loader drops each binding
        (its mirror, the IPC views of the trainer's buffer, the reply channel), then SGLang unloads the slots."""
        if self.resident.created:
            if self.resident.attached:
                for slot in RESIDENT_SLOTS:
                    try:
                        await self._loader_call(detach_request(slot))
                    except SGLangRequestError as exc:
                        logger.warning("sglang_lora: detaching resident slot %s failed: %s", slot, exc)
            # unloaded while still permanent: a request released meanwhile cannot hand them out as stale as well
            await self._unload([s for s in RESIDENT_SLOTS if self._sglang_holds(s) is not False])
            self.adapters.permanent.difference_update(RESIDENT_SLOTS)
            self.resident.created = self.resident.attached = False
            self.resident.active = self.resident.written = None
        await self.weight_session.close(self._sglang_call, quietly=True)

    async def _load_adapter_from_disk(self, name: str, path: str, version: int, fingerprint: str,
                                      canary: dict | None = None) -> None:
        """The same door for an adapter on disk (restart recovery reads its snapshot this way)."""
        await self._sglang_call("load_lora_adapter", io_struct("LoadLoRAAdapterReqInput")(lora_name=name, lora_path=path))
        await self._activate(name, version, fingerprint, canary)

    async def _activate(self, name: str, version: int, fingerprint: str, canary: dict | None) -> None:
        stale = self.adapters.activate(name, version, fingerprint)
        # a timed-out load that landed after all is unloaded; its name stays retired either way
        landed = [n for n in self._uncertain if self._sglang_holds(n) is not False]  # unknown: try the unload
        self._uncertain.clear()
        await self._unload(stale + self._unload_retry + landed, raise_on_failure=True)
        if canary is not None:
            self._pending_canary = (name, CanaryExpectation(**canary))
        if KV_CACHE not in self.memory.released:  # otherwise at resume_memory(kv_cache)
            await self._serve_newest_adapter(flush=None if self.prefix_tags.supported else "switch")

    async def _sglang_call(self, method: str, request: Any, watched: bool = True) -> Any:
        """One adapter request through the tokenizer manager this actor owns; SGLang's refusal raises with its
        message; a call that does not return within ``http_timeout_s``, or whose scheduler answers no health probe
        within ``health_timeout_s`` meanwhile (``runtime/watchdog``), is an error, never a hang."""
        tm, timeout = self.tokenizer_manager, self.settings.http_timeout_s
        if getattr(self, "_watchdog_tm", None) is not tm:  # one watchdog per SGLang launch
            self._watchdog_tm = tm
            self._watchdog = Watchdog(getattr(tm, "get_internal_state", None), self.settings.health_timeout_s)
        # Shielded: a call given up on is left to finish in SGLang (cancelling it would wedge SGLang's communicator)
        watch = self._watchdog if watched else Watchdog(None, self.settings.health_timeout_s)
        try:
            result = await watch.call(asyncio.shield(getattr(tm, method)(request, None)), timeout)
        except asyncio.TimeoutError:
            running = self.adapters.status()["in_flight"]  # a weight update waits for these (SGLang's update lock)
            probed = " while the scheduler answered its health probes" if watch.probe else ""
            raise SGLangRequestError(method, None, f"no answer within {timeout:g} s (engine_kwargs.sglang_lora."
                                     f"http_timeout_s){probed}; requests still running per adapter: "
                                     f"{running or 'none'} -- a weight update waits for them (SGLang's "
                                     "model_update_lock)") from None
        except SchedulerHung as exc:
            raise SGLangRequestError(method, None, f"{exc} (engine_kwargs.sglang_lora.health_timeout_s): the "
                                     "scheduler is hung or dead; see its log") from None
        except Exception as exc:  # an assert or error inside SGLang's handler: keep its text
            raise SGLangRequestError(method, None, f"{type(exc).__name__}: {exc}") from exc
        success, message = request_outcome(result)
        if not success:
            raise SGLangRequestError(method, 200, message)
        return result

    async def _serve_newest_adapter(self, flush: str | None) -> None:
        """With the KV cache resident: drop cached prefixes, then run the pending canary.

        ``switch``: requests cannot be tagged by version (``prefix_tags``), so a refused flush would serve prefixes of
        another version: an error. ``resume``: SGLang flushed when it released the KV cache; this one only guards
        releases that did not, and a refusal (a request already running) is said, not raised.
        """
        if flush:
            ok, message = request_outcome(await self.tokenizer_manager.flush_cache())
            if not ok and flush == "switch":
                raise SGLangRequestError("flush_cache", 200, "SGLang did not flush its prefix cache, and requests "
                                         f"cannot be keyed by adapter version on this release: {message}")
            if not ok:
                logger.warning("sglang_lora: flush_cache after resuming the KV cache refused (%s); SGLang flushed "
                               "when it released it", message)
        await self._run_pending_canary()

    async def _run_pending_canary(self) -> None:
        """Score the canary prompt for the newest adapter; a contradiction raises into the caller (the trainer)."""
        if self._pending_canary is None:
            return
        name, expect = self._pending_canary
        self._pending_canary = None
        result = await self.canary(canary_prompt_ids(self.model_config), name)
        verdict = judge_canary(result, expect, name)
        self.last_canary = {"adapter": name, "verdict": verdict, **result}
        log = logger.info if verdict == "pass" else logger.warning
        log("sglang_lora: canary %s", self.last_canary)

    def _warn_if_metrics_unread(self) -> None:
        if self.sync_metrics.syncs >= UNREAD_SYNCS_WARNING and not self._warned_metrics_unread:
            self._warned_metrics_unread = True
            logger.warning(
                "sglang_lora: %d adapter syncs and no metrics read: verl's per-step metrics lack sglang_lora/* (the "
                "trainer process did not import verl_sglang_lora.register; check actor_rollout_ref.model.external_lib "
                "or `verl-sglang-lora doctor`). Per-sample adapter_version is still recorded.",
                self.sync_metrics.syncs,
            )

    def drain_metrics(self) -> dict[str, float]:
        """This step's sync/staleness figures for verl's metrics dict (read by ``trainer_metrics``)."""
        return self.sync_metrics.drain()

    def adapter_status(self) -> dict[str, Any]:
        return {**self.adapters.status(), "last_canary": self.last_canary}

    def launched_server_args(self, keys: list[str]) -> dict[str, Any]:
        """The ServerArgs fields ``keys`` this replica's SGLang runs with (e.g. for a topology check)."""
        return running_server_args(getattr(self, "tokenizer_manager", None), keys)

    async def _unload(self, names: list[str], raise_on_failure: bool = False) -> None:
        """Unload stale versions. A refusal is logged with SGLang's message, counted, and the name retried at the
        next activation, where a second refusal raises into the trainer: a leak is never silent."""
        failed: list[str] = []
        for name in dict.fromkeys(names):
            try:
                await before_unload(name)  # TEST-ONLY hook (runtime/fault_injection.py); no-op unless enabled
                await self._sglang_call("unload_lora_adapter", io_struct("UnloadLoRAAdapterReqInput")(lora_name=name))
            except SGLangRequestError as exc:
                failed.append(name)
                self.sync_metrics.unload_failures += 1
                logger.warning("sglang_lora: unloading stale adapter %s failed: %s", name, exc)
                if raise_on_failure and name in self._unload_retry:
                    raise
        unloaded = [n for n in names if n not in failed]
        self.adapters.forget(unloaded)
        for name in unloaded:
            self.prefix_tags.forget(name)
        self._unload_retry = [n for n in self._unload_retry if n not in names] + failed

    async def canary(self, prompt_ids: list[int], adapter: str) -> dict[str, float]:
        """Log-probs of a fixed prompt with and without ``adapter``; the client judges the difference. The two
        requests go in together: the scheduler can take them into one batch instead of two in a row."""
        raw = self._raw_generate_request or self.tokenizer_manager.generate_request

        async def score(lora_path: str | None) -> list[float]:
            obj = io_struct("GenerateReqInput")(
                input_ids=list(prompt_ids),
                sampling_params={"max_new_tokens": 1, "temperature": 0.0},
                return_logprob=True,
                logprob_start_len=0,
                lora_path=lora_path,
            )
            self.prefix_tags.tag(obj)
            out = None
            async for out in raw(obj, None):
                pass
            return [x[0] for x in out["meta_info"]["input_token_logprobs"] if x[0] is not None]

        # both end before an error is raised: a release of the KV cache must not find the other one still running
        results = await asyncio.gather(score(adapter), score(None), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        with_adapter, base = results
        diffs = [abs(a - b) for a, b in zip(with_adapter, base)]
        return {"max_abs_diff": max(diffs) if diffs else 0.0, "tokens": float(len(diffs))}


class SGLangLoRAReplica(_verl_server.SGLangReplica):
    """verl's SGLang replica, launching :class:`SGLangLoRARollout` actors under verl's actor names."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        restarts = PluginSettings.from_rollout_config(self.config).server_max_restarts
        options = ray_restart_options(restarts)  # {} unless restart recovery is on
        self.server_class = ray.remote(**options)(SGLangLoRARollout) if options else ray.remote(SGLangLoRARollout)
