"""Resident in-place slot writes against SGLang's REAL LoRA code, on CPU.

SGLang 0.5.12 (the venv's) runs in-process; 0.5.23, 0.5.18 and 0.5.8 run ``python -m
verl_sglang_lora.runtime.resident.selfcheck`` in a subprocess with ``.cache/sglang/V`` first on PYTHONPATH (all
started at once). Each case builds SGLang's real ``LoRAManager`` / ``LoRAMemoryPool`` / LoRA layer wrappers
for one TP rank of a 2-layer Qwen3-shaped model (pool max rank 16, 3 slots, the seven HF linear targets),
loads a pinned slot adapter and a reference adapter through SGLang's ``load_lora_adapter_from_tensors`` +
``fetch_new_loras``, then asserts that the plan's write into the slot is byte-identical to SGLang's own load
of the same adapter in the other slot, that wrong plans are reported, and that the loader entry point reports
through its status tensor without raising.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import sglang_or_skip
from verl_sglang_lora.sglang_contract.lora_backends import FASTEST_FIRST
from verl_sglang_lora.runtime.resident import protocol as P
from verl_sglang_lora.runtime.resident.protocol import ErrorCode

ROOT = Path(__file__).resolve().parent.parent
SUBPROCESS_RELEASES = {  # release -> selfcheck arguments (0.5.23 gets the full matrix; 0.5.18 the hardest case:
    "0.5.23": ["--tp", "1,2", "--ranks", "8,16"],  # strided r=8 slot, TP 2, both ranks). 0.5.8 passes the same
    "0.5.18": ["--tp", "2", "--ranks", "8"],  # selfcheck (docs/resident_sync.md) but is not part of the suite:
}  # each extra release costs ~10 s of SGLang import on CI's 2 cores.
TIMEOUT_S = 240
CASES_0512 = [(1, 0, 8), (1, 0, 16), (2, 0, 8), (2, 0, 16), (2, 1, 8), (2, 1, 16)]


def _required() -> bool:
    return os.environ.get("VERL_SGLANG_LORA_REQUIRE_SGLANG") == "1"


@pytest.fixture(scope="module")
def started_probes():
    """Start one selfcheck subprocess per release at once, before the in-process cases run."""
    procs = {}
    for version, args in SUBPROCESS_RELEASES.items():
        path = ROOT / ".cache" / "sglang" / version
        if not path.is_dir():
            procs[version] = {"missing": str(path)}
            continue
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = f"{path}{os.pathsep}{ROOT}"
        procs[version] = subprocess.Popen(
            [sys.executable, "-m", "tests.resident_selfcheck", *args], cwd=ROOT, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield procs
    for proc in procs.values():
        if not isinstance(proc, dict) and proc.poll() is None:
            proc.kill()


@pytest.fixture(scope="module")
def release_probes(started_probes):
    """The selfcheck JSON line of each release."""
    procs, out = started_probes, {}
    for version, proc in procs.items():
        if isinstance(proc, dict):
            out[version] = proc
            continue
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out[version] = {"crashed": f"timed out after {TIMEOUT_S}s"}
            continue
        lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
        out[version] = json.loads(lines[-1]) if lines else {
            "crashed": f"exit {proc.returncode}, no JSON\n" + "\n".join(stderr.splitlines()[-20:])}
    return out


@pytest.fixture(scope="module")
def cases_0512(started_probes):
    sglang_or_skip("sglang.srt.lora.mem_pool")
    from tests import resident_selfcheck as selfcheck

    return {case: selfcheck.check_case(*case, max_rank=16) for case in CASES_0512}


def _assert_case(c: dict, tp: int, rank: int) -> None:
    assert "error" not in c, c.get("traceback")
    # the pool is built for the backend the plugin launches with, and every LoRA layer reads the pool the write fills
    assert c["backend"] in FASTEST_FIRST
    assert c["layers_reading_pool"] >= 8 and c["layers_reading_elsewhere"] == []  # 4 modules x 2 layers, A and B
    slots = c["slots"]
    assert slots["slot"] != slots["reference"] and slots["pool_slots"] == 3
    # the pool really is strided for r=8 (max rank 16) and sharded for tp=2: read from SGLang's buffers
    assert c["buffer_shapes"]["A.qkv_proj"] == [3, 48, 64]
    assert c["buffer_shapes"]["B.qkv_proj"] == [3, 128 // tp, 16]
    assert c["buffer_shapes"]["A.o_proj"] == [3, 16, 64 // tp]
    assert c["before_write_mismatches"] > 0  # the comparison can fail: slots differ before the write
    assert c["plan_mismatches"] == []  # byte-exact, every module and layer, against SGLang's own load
    assert c["pairs_differing"] == []  # the exact per-block check agrees
    assert c["modules"] == ["down_proj", "gate_up_proj", "o_proj", "qkv_proj"] and c["layers"] == [0, 1]
    assert c["unused_sources"] == [] and c["zero_blocks"] == 0
    # per layer: qkv A 3r x 64, qkv B 128/tp x r, o A r x 64/tp, o B 64 x r, gate_up A 2r x 64,
    # gate_up B 256/tp x r, down A r x 128/tp, down B 64 x r
    assert c["copied_elements"] == 2 * rank * (448 + 576 // tp)
    # q/k/v keep separate row blocks in B (k/v rows per rank follow the kv-head split)
    assert sorted(map(tuple, c["qkv_B_rows"])) == [("k_proj", 32 // tp), ("q_proj", 64 // tp), ("v_proj", 32 // tp)]
    # deliberately wrong plans are reported where they are wrong
    assert c["swapped_kv_mismatches"] == [f"{f}[qkv_proj][layer {n}]" for f in "AB" for n in (0, 1)]
    assert c["missing_layer_mismatches"] == [f"{f}[{m}][layer 1]" for f in "AB"
                                             for m in ("down_proj", "gate_up_proj", "o_proj", "qkv_proj")]
    # the custom-weight-loader entry point, end to end
    attach, write, compare = c["attach_status"], c["write_status"], c["compare_status"]
    assert attach["ok"] and attach["magic_ok"] and attach["seq"] == 7 and attach["copies"] == 28
    assert attach["buffer_id"] == slots["slot"] and "attached 28 copies" in c["attach_message"]
    assert write["ok"] and write["version"] == 2 and write["seq"] == 8 and write["copies"] == 28
    assert compare["ok"] and compare["mismatches"] == 0 and c["compare_message"] == "slots are byte-identical"
    # TP 1 reads the slot back whole through the mirror and compares it with the trainer's buffer; a TP rank that
    # uses a slice of the adapter compares block by block with the source views
    assert attach["verified_by"] == write["verified_by"] == (P.BY_MIRROR if tp == 1 else P.BY_PAIRS)
    assert write["scaling"] == 2.0 and write["lora_r"] == rank  # selfcheck's alpha is 2r
    # a normal load proven byte for byte against the tensors it came from (this rank's slice); refused against others
    verified, wrong = c["verify_status"], c["verify_wrong_status"]
    assert verified["ok"] and verified["copies"] == 28 and verified["verified_by"] == P.BY_PAIRS
    assert not wrong["ok"] and wrong["error"] == ErrorCode.MISMATCH
    assert "the pool's bytes for 'reference'" in c["verify_wrong_message"]
    assert not c["unknown_slot_status"]["ok"] and c["unknown_slot_status"]["error"] == ErrorCode.UNKNOWN_SLOT
    assert c["unpinned_status"]["error"] == ErrorCode.NOT_PINNED and "not pinned" in c["unpinned_message"]
    # detached: the loader has nowhere to answer, the channel keeps request 8's answer (the client's seq check)
    assert c["detach_status"]["ok"]
    assert c["reply_after_detach_status"]["seq"] == 8


@pytest.mark.parametrize("tp, tp_rank, rank", CASES_0512, ids=[f"tp{t}.rank{k}.r{r}" for t, k, r in CASES_0512])
def test_plan_matches_sglang_load_0512_in_process(cases_0512, tp, tp_rank, rank):
    _assert_case(cases_0512[(tp, tp_rank, rank)], tp, rank)


def _probe(release_probes, version: str) -> dict:
    """The release's selfcheck JSON; skipped (failed under VERL_SGLANG_LORA_REQUIRE_SGLANG=1) where it is missing."""
    data = release_probes[version]
    if "missing" in data:
        msg = f"{data['missing']} is missing (bash scripts/sglang_release.sh {version})"
        if _required():
            pytest.fail(msg)
        pytest.skip(msg)
    assert "crashed" not in data, data["crashed"]
    return data


@pytest.mark.parametrize("version", list(SUBPROCESS_RELEASES))
def test_plan_matches_sglang_load_other_releases(release_probes, version):
    data = _probe(release_probes, version)
    assert data["sglang_version"] == version
    assert data["sglang_file"].startswith(str(ROOT / ".cache" / "sglang" / version))
    want = {f"tp{t}.rank{k}.r{r}" for t in map(int, SUBPROCESS_RELEASES[version][1].split(","))
            for k in range(t) for r in map(int, SUBPROCESS_RELEASES[version][3].split(","))}
    assert set(data["cases"]) == want
    for key, case in data["cases"].items():
        tp, rank = int(key.split(".")[0][2:]), int(key.split(".r")[-1])
        _assert_case(case, tp, rank)


# ---- pieces that need no SGLang ------------------------------------------------------------------------------------
def test_the_pinning_stand_in_leaves_later_device_contexts_intact():
    """The CPU stand-in for pinned memory swaps torch.tensor/zeros/empty while SGLang builds its LoRA batch, which
    can be the first `with torch.device(...)` of the process: torch then caches the constructors a device context
    redirects. Cached with the swapped functions, a later meta-device init (transformers' from_pretrained) made real
    tensors, and the tiny Qwen3's rotary buffer came out uninitialized in the next test that loaded it."""
    from torch.utils._device import _device_constructors

    from tests.resident_selfcheck import pinning_is_noop

    _device_constructors.cache_clear()  # as in a process that has not used a device context yet
    with pinning_is_noop(), torch.device("meta"):
        torch.zeros(2)
    with torch.device("meta"):
        assert torch.empty(2).is_meta and torch.zeros(2).is_meta and torch.tensor([1.0]).is_meta


def test_blocks_from_trace_strides_zeros_and_repeats():
    from verl_sglang_lora.runtime.resident.plan import Block, SourceSpec, blocks_from_trace

    specs = (SourceSpec("a", (4, 3), 0), SourceSpec("b", (2, 3), 13))
    ids_a = np.arange(1, 13).reshape(4, 3)
    trace = np.full((6, 5), -1, dtype=np.int64)
    trace[0:2, 0:2] = ids_a[2:4, 1:3]  # a column slice of rows 2..3
    trace[2:4, 0:3] = ids_a[0:1, :].repeat(2, axis=0)  # the same source row twice (a replicated A)
    trace[4, :] = 0  # SGLang zeroes a row
    trace[5, 1:4] = np.arange(14, 17)  # b's first row
    blocks = blocks_from_trace(trace, specs, "A", "m", 0)
    assert Block("A", "m", 0, 0, 2, 0, 2, "a", 7, 3) in blocks
    assert Block("A", "m", 0, 2, 2, 0, 3, "a", 0, 0) in blocks  # a repeated row reads with row stride 0
    assert Block("A", "m", 0, 4, 1, 0, 5) in blocks  # zero block, no source
    assert Block("A", "m", 0, 5, 1, 1, 3, "b", 0, 3) in blocks
    assert len(blocks) == 4


def test_bind_and_exact_compare_follow_the_blocks():
    from verl_sglang_lora.runtime.resident.execute import differing_pairs, run_copies
    from verl_sglang_lora.runtime.resident.plan import Block, SlotLayout, SourceSpec, bind

    class Pool:
        A_buffer = {"m": [torch.zeros(2, 4, 4, dtype=torch.bfloat16)]}
        B_buffer = {"m": [torch.zeros(2, 4, 4, dtype=torch.bfloat16)]}

    src = {"w": torch.arange(16, dtype=torch.float32).view(4, 4)}
    layout = SlotLayout((SourceSpec("w", (4, 4), 0),),
                        (Block("A", "m", 0, 1, 2, 1, 2, "w", 5, 4), Block("B", "m", 0, 0, 1, 0, 4)))
    pairs = bind(layout, Pool, 1, src)
    Pool.B_buffer["m"][0][1].fill_(3)
    assert run_copies(pairs) == 2
    assert Pool.A_buffer["m"][0][1, 1:3, 1:3].float().tolist() == [[5, 6], [9, 10]]
    assert Pool.B_buffer["m"][0][1, 0].tolist() == [0, 0, 0, 0] and Pool.B_buffer["m"][0][0].abs().sum() == 0
    assert differing_pairs(pairs) == []
    Pool.A_buffer["m"][0][1, 1, 1] = 7  # one changed element is found in its block
    assert differing_pairs(pairs) == [0]
    Pool.B_buffer["m"][0][1, 0, 2] = -0.0  # a zero block holding -0.0: equal as a float, not as bits
    assert differing_pairs(pairs) == [0, 1]
    with pytest.raises(ValueError, match="shape"):
        bind(layout, Pool, 1, {"w": torch.zeros(4, 5)})


def test_protocol_round_trip_and_apply_never_raises():
    from verl_sglang_lora.runtime.resident import protocol as P
    from verl_sglang_lora.runtime.resident.loader import apply

    status, message = P.new_status(), P.new_message(256)
    req = P.parse(P.request_tensors("write", status, {"x.lora_A.weight": torch.ones(2, 2)}, message,
                                    slot="verl_lora_slot1", version=12, seq=3))
    assert (req.op, req.get("slot"), req.int("version"), set(req.tensors)) == ("write", "verl_lora_slot1", 12,
                                                                               {"x.lora_A.weight"})
    with pytest.raises(ValueError):
        P.header_name("write", slot="a|b")
    apply(object(), P.request_tensors("write", status, None, message, slot="s", version=1, seq=9))
    got = P.read_status(status)
    assert got["magic_ok"] and not got["ok"] and got["error"] == ErrorCode.LORA_DISABLED and got["seq"] == 9
    assert "enable-lora" in P.read_message(message)
    apply(object(), [("garbage", torch.zeros(1))])  # no header: logged, nothing raised
    # a reply channel the loader could never answer on is refused when the attach is parsed, not at the first write
    for bad in ((torch.empty(0, dtype=torch.int64), P.new_message()), (P.new_status(), torch.empty(0, dtype=torch.uint8)),
                (torch.zeros(P.STATUS_LEN, dtype=torch.int32), P.new_message())):
        with pytest.raises(ValueError, match="reply channel"):
            P.parse(P.request_tensors("attach", status, None, message, None, bad, slot="s"))
    with pytest.raises(ValueError, match="needs both"):
        P.parse([*P.request_tensors("attach", status, slot="s"), (P.REPLY_STATUS_NAME, P.new_status())])


def test_manager_found_through_the_model_runner():
    from verl_sglang_lora.runtime.resident.access import ResidentError, find_lora_manager

    class LoRAManager:  # found by its SGLang class name and its base_model
        def __init__(self, model):
            self.base_model, self.memory_pool, self.lora_modules = model, object(), []

    class Runner:
        def __init__(self, model):
            self.model, self.lora_manager = model, LoRAManager(model)

    model, other_model = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    other, runner = Runner(other_model), Runner(model)  # another launch's manager is never taken for this model's
    assert find_lora_manager(model) is runner.lora_manager
    assert find_lora_manager(model) is runner.lora_manager  # cached
    assert find_lora_manager(other_model) is other.lora_manager
    with pytest.raises(ResidentError, match="enable-lora"):
        find_lora_manager(torch.nn.Linear(2, 2))


def test_a_pool_wider_than_the_adapter_makes_strided_slot_views() -> None:
    """Why the sync matrix launches one engine per rank (tools/sync_matrix.py): in SGLang's real pool, an r32 adapter
    in a max-rank-128 slot has strided destinations (torch's fused copy leaves its fast path), in a max-rank-32 slot
    none -- the plugin always launches with max_lora_rank = the adapter's rank."""
    from tests import resident_selfcheck as selfcheck
    from verl_sglang_lora.runtime.resident.plan import bind
    from verl_sglang_lora.runtime.resident.trace import trace_layout

    strided = {}
    for max_rank in (32, 128):
        with selfcheck.release_scope(1, 0, max_rank, 3) as server_args:
            manager = selfcheck.build_manager(1, 0, max_rank, server_args)
            adapter = selfcheck.peft_adapter(32, seed=2)
            uid = selfcheck.load(manager, "verl_lora_slot0", adapter, 32, pinned=True)
            manager.fetch_new_loras({uid})
            _, views = selfcheck.flat_copy(adapter)
            pairs = bind(trace_layout(manager, uid, views), manager.memory_pool,
                         manager.memory_pool.uid_to_buffer_id[uid], views)
            copies = [(s, d) for s, d in pairs if s is not None]
            strided[max_rank] = sum(1 for s, d in copies if not d.is_contiguous() or s.stride() != d.stride())
            total = len(copies)
    assert strided[32] == 0 and 0 < strided[128] < total


def test_a_write_moves_only_its_header_and_a_stale_answer_is_caught_by_seq() -> None:
    """The client's side of the reply channel, through SGLang's own serializer: the attach hands the slot's write
    pair over, a write's payload is one empty tensor, and an answer left from an earlier request fails the check."""
    sglang_or_skip("sglang.srt.utils")
    from sglang.srt.utils import MultiprocessingSerializer

    from verl_sglang_lora.runtime.resident import protocol as P
    from verl_sglang_lora.runtime.resident.requests import SLOTS, ResidentRequests, check_results

    requests = ResidentRequests(torch.device("cpu"))
    flat = torch.zeros(64, dtype=torch.uint8)
    adapter = {"base_model.model.model.layers.0.mlp.down_proj.lora_A.weight": flat[:32].view(torch.float32).view(2, 4)}
    attach = requests.attach(adapter, 0, flat)
    sent = P.parse(MultiprocessingSerializer.deserialize(attach[1].blobs[0]))
    assert sent.reply is not None and sent.status is not None and sent.get("slot") == SLOTS[1]

    (write,) = requests.writes(5, (SLOTS[1],)).values()
    named = MultiprocessingSerializer.deserialize(write.blobs[0])
    assert len(named) == 1 and named[0][1].numel() == 0  # no tensor memory crosses
    req = P.parse(named)
    assert req.status is None and (req.op, req.get("slot"), req.int("version"), req.int("seq")) == (
        "write", SLOTS[1], 5, write.seq)
    # what the loader writes into the pair the attach handed over is what this write's check reads
    P.write_status(sent.reply[0], {P.STATE: P.OK, P.SEQ: 77})
    assert P.read_status(write.status)["seq"] == 77

    # the channel holds an older request's success: the write is not taken as done
    P.write_status(write.status, {P.STATE: P.OK, P.SEQ: write.seq - 1, P.VERIFIED_BY: P.BY_MIRROR})
    failed = check_results([write])
    assert failed and f"never answered request {write.seq}" in failed and "scheduler log" in failed
    P.write_status(write.status, {P.STATE: P.OK, P.SEQ: write.seq, P.N_COPIES: 4, P.VERIFIED_BY: P.BY_MIRROR})
    assert check_results([write]) is None
    P.write_status(write.status, {P.STATE: P.OK, P.SEQ: write.seq, P.N_COPIES: 4})  # written, never verified
    assert "without verifying" in check_results([write])
