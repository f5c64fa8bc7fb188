"""verl 0.9.1's stock LoRA sync pattern (``rollout.name=sglang``) against SGLang's real LoRA bookkeeping, on CPU.

verl's stock path (``workers/rollout/sglang_rollout/sglang_rollout.py:338-357``) does, every step: if
``verl_actor_lora_name`` is listed, unload it by name; load the new version from tensors under the same name,
unpinned. An upstream report (sgl-project/sglang#21380, fix proposed in #21381) says that unloading does not free the
adapter's LoRA memory-pool slot, so slots fill with "ghost" uids.

``tests/stock_pattern_probe.py`` drives that pattern for 50 steps through each release's own ``LoRARegistry``,
request structs, ``LoRAManager``, ``LoRAMemoryPool`` and eviction policy (4 pool slots, LRU -- SGLang's default --
and FIFO), plus a ``versioned`` variant (load vN under a new name, unload vN-1). Each release runs in its own
interpreter with ``.cache/sglang/V`` first on PYTHONPATH (scripts/sglang_release.sh), both started at once.

These tests document upstream behaviour: they fail when a release's behaviour changes (0.5.18 starts keeping
ghost slots, or 0.5.12's ghosts stop appearing or stop being bounded), and then the docs (docs/verl_touchpoints.md,
"Stock adapter reload and SGLang's LoRA pool") must be updated with it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import per_release_fixture, release_result, sglang_release_dir

ROOT = Path(__file__).resolve().parents[1]
RELEASES = ("0.5.18", "0.5.12")
STEPS, SLOTS = 50, 4
RUNS = ("stock.lru", "stock.fifo", "versioned.lru", "versioned.fifo")


runs = per_release_fixture(RELEASES, ["-m", "tests.stock_pattern_probe", "--steps", str(STEPS), "--slots", str(SLOTS)],
                           with_root=True)


def _result(runs: dict, version: str) -> dict:
    out = release_result(runs, version)
    assert out["sglang_version"] == version and f"/.cache/sglang/{version}/" in out["sglang_file"]
    return out


def _common(run: dict) -> None:
    """What holds on every release: the manager and registry forget the old version, its host tensors are freed."""
    assert run["error"] is None  # no AssertionError from the eviction policy, no refused load
    assert run["slots"] == SLOTS and len(run["history"]) == STEPS and run["adapters_loaded"] == STEPS
    assert run["adapters_alive_after_gc"] == 1
    for state in run["history"]:
        assert (state["loras"], state["lora_refs"], state["configs"], state["pinned"]) == (1, 1, 1, 0)
        assert (state["registry"], state["registry_counters"]) == (1, 1)
        assert state["adapters_alive"] == 1  # the unloaded LoRAAdapter (host weights) is freed by refcount alone


@pytest.mark.parametrize("name", RUNS)
def test_0518_unload_frees_the_pool_slot_every_step(runs, name):
    """0.5.18's ``unload_lora_adapter`` calls ``memory_pool.remove_lora``: after each of the 50 steps the pool holds
    the base model (slot 0) and the one live adapter, and SLOTS-2 slots are free. No growth anywhere."""
    run = _result(runs, "0.5.18")[name]
    _common(run)
    assert run["policy"] == ("LRUEvictionPolicy" if name.endswith("lru") else "FIFOEvictionPolicy")
    for step, state in enumerate(run["history"]):
        assert (state["pool_uids"], state["pool_ghosts"], state["free_slots"]) == (2, 0, SLOTS - 2), step
        assert state["policy_tracked"] == 1, step
        if name.startswith("stock"):  # unload first, then load: the freed slot is the one reused
            assert state["slot"] == 1, step
        else:  # load vN while vN-1 still holds its slot, then unload vN-1
            assert state["slot"] == 1 + step % 2, step


@pytest.mark.parametrize("name", RUNS)
def test_0512_unload_leaves_ghost_slots_bounded_by_the_pool(runs, name):
    """0.5.12's ``unload_lora_adapter`` drops the adapter from the manager but leaves its uid in the pool (and in the
    eviction policy): one ghost more per step until the pool is full (SLOTS-2 ghosts next to the base model and the
    live adapter), then each load evicts the oldest ghost. The ghosts stay tracked by the policy, so the eviction
    never fails: no crash, no growth beyond the pool's fixed size."""
    run = _result(runs, "0.5.12")[name]
    _common(run)
    for step, state in enumerate(run["history"]):
        ghosts = min(step, SLOTS - 2)
        assert (state["pool_ghosts"], state["pool_uids"], state["free_slots"]) == (ghosts, 2 + ghosts,
                                                                                  SLOTS - 2 - ghosts), step
        assert state["policy_tracked"] == 1 + ghosts, step


@pytest.mark.parametrize("version", RELEASES)
def test_the_tokenizer_name_cache_grows_only_with_new_names(runs, version):
    """The tokenizer manager's ``lora_ref_cache`` (name -> last LoRARef) is written on each load and never pruned:
    the stock pattern, one name, keeps one entry; a new name per step (``versioned``) adds one entry per step."""
    out = _result(runs, version)
    for name in RUNS:
        sizes = [s["lora_ref_cache"] for s in out[name]["history"]]
        assert sizes == ([1] * STEPS if name.startswith("stock") else list(range(1, STEPS + 1))), name
    managers = sglang_release_dir(version) / "sglang" / "srt" / "managers"
    source = "".join(p.read_text() for p in managers.glob("tokenizer*.py"))
    assert "self.lora_ref_cache[obj.lora_name] = new_adapter" in source
    for removal in ("del self.lora_ref_cache", "lora_ref_cache.pop", "lora_ref_cache.clear"):
        assert removal not in source, removal
