"""The sync client's side of the byte-level check of ordinary loads (loader ``verify``): the request it hands the
server for the version's name, and what it does with the loader's answer. The server side and the real loader on
SGLang's real pool are driven in tests/test_resident_actor_on_cpu.py."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import sglang_or_skip
from verl_sglang_lora.runtime.resident import protocol as P
from verl_sglang_lora.runtime.resident.requests import (LoadVerifyError, ResidentRequests, check_load_verify,
                                                         verify_for_push)
from verl_sglang_lora.runtime.sync.adapter_push import AdapterPush
from verl_sglang_lora.runtime.sync.metrics import SyncStats


ADAPTER = {"base_model.model.layers.0.mlp.down_proj.lora_A.weight": torch.ones(2, 4)}


def _push(fields: dict) -> AdapterPush:
    return AdapterPush(7, "fp", 7, fields, SyncStats(version=7))


def test_the_verify_names_the_version_and_only_rides_with_a_load():
    sglang_or_skip("sglang.srt.utils")
    verifier = ResidentRequests(torch.device("cpu"))
    push = _push({"config_dict": {}})
    call = verify_for_push(verifier, push, ADAPTER, "verl_lora_v7")
    assert call.op == "verify" and push.verify == {"name": "verl_lora_v7", "blobs": call.blobs}
    again = verify_for_push(verifier, _push({"config_dict": {}}), ADAPTER, "verl_lora_v8")
    assert again.status is call.status  # one status pair for every version's verify, not one per name
    assert verify_for_push(verifier, _push({}), ADAPTER, "verl_lora_v7") is None  # an in-place push: no load
    attach = _push({"config_dict": {}})
    attach.resident = {"attach": [], "slot_fields": {}}  # its slot is compared with SGLang's own load instead
    assert verify_for_push(verifier, attach, ADAPTER, "verl_lora_v7") is None and attach.verify is None
    no_loader = _push({"config_dict": {}})
    assert verify_for_push(None, no_loader, ADAPTER, "verl_lora_v7") is None and no_loader.verify is None


def test_a_mismatch_or_an_undecided_check_keeps_the_version_from_being_served():
    sglang_or_skip("sglang.srt.utils")
    call = verify_for_push(ResidentRequests(torch.device("cpu")), _push({"config_dict": {}}), ADAPTER, "verl_lora_v7")
    result = {"version": 7, "name": "verl_lora_v7", "verify": {"ran": True}}
    P.write_status(call.status, {P.STATE: P.OK, P.SEQ: call.seq, P.N_COPIES: 1, P.VERIFIED_BY: P.BY_PAIRS})
    check_load_verify(result, call)  # the loader's answer: equal
    P.write_message(call.message, "the pool's bytes for 'verl_lora_v7': 1 of 1 blocks differ from the trainer's bytes")
    P.write_status(call.status, {P.STATE: P.FAILED, P.ERROR: 12, P.SEQ: call.seq})
    with pytest.raises(LoadVerifyError, match=r"verl_lora_v7 with other bytes.*differ from the trainer's bytes"):
        check_load_verify(result, call)
    with pytest.raises(LoadVerifyError, match="could not be verified.*launched without the plugin's loader"):
        check_load_verify({"version": 7, "name": "verl_lora_v7",
                           "verify": {"ran": False, "reason": "this server was launched without the plugin's loader"}},
                          call)
    P.write_message(call.message, "No available buffer slots")  # the loader could not decide: not a mismatch
    P.write_status(call.status, {P.STATE: P.FAILED, P.ERROR: 2, P.SEQ: call.seq})
    with pytest.raises(LoadVerifyError, match="did not decide.*No available buffer slots"):
        check_load_verify(result, call)
    P.write_status(call.status, {P.STATE: P.OK, P.SEQ: call.seq - 1})  # an older request's answer
    with pytest.raises(LoadVerifyError, match="never answered request"):
        check_load_verify(result, call)
    check_load_verify({"version": 7, "verify": None}, call)  # an in-place sync: nothing to check


def test_a_load_served_at_another_scaling_is_not_served():
    """Equal bytes are not enough: SGLang's lora_alpha / r for the loaded version must be the trainer's scaling (for
    an expert adapter the bytes check itself multiplies by SGLang's scaling, so only this catches a wrong one)."""
    sglang_or_skip("sglang.srt.utils")
    call = verify_for_push(ResidentRequests(torch.device("cpu")), _push({"config_dict": {}}), ADAPTER, "verl_lora_v7")
    result = {"version": 7, "name": "verl_lora_v7", "verify": {"ran": True}}
    P.write_status(call.status, {P.STATE: P.OK, P.SEQ: call.seq, P.N_COPIES: 1, P.VERIFIED_BY: P.BY_PAIRS,
                                 P.SCALING_BITS: P.float_to_bits(2.0), P.LORA_R: 8})
    check_load_verify(result, call, 2.0)
    check_load_verify(result, call)  # no trainer scaling given: the bytes decide
    with pytest.raises(LoadVerifyError, match=r"has the trainer's bytes, but SGLang serves .* at scaling 0\.5.* 2"):
        P.write_status(call.status, {P.STATE: P.OK, P.SEQ: call.seq, P.N_COPIES: 1, P.VERIFIED_BY: P.BY_PAIRS,
                                     P.SCALING_BITS: P.float_to_bits(0.5), P.LORA_R: 8})
        check_load_verify(result, call, 2.0)
