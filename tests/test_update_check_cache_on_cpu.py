"""The cached stand-in for SGLang 0.5.23's per-request derived-weight-cache check: its own rules (which caller it
answers, the model=None part that stays live, one kept answer per live model, revalidation, give-back, re-install,
the benchmark's switch, opt-out, signatures). SGLang's real function and callers are driven in
tests/test_resident_slot_on_cpu.py (the 0.5.23 selfcheck)."""

from __future__ import annotations

import gc
import sys
import types

import pytest
import torch

from verl_sglang_lora.runtime.resident import LOADER_PATH
from verl_sglang_lora.runtime.resident import protocol as P
from verl_sglang_lora.runtime.resident import update_check_cache as U
from verl_sglang_lora.runtime.resident.loader import apply


def update_weights_from_tensor(model, load_format=LOADER_PATH):
    """Named and shaped as SGLang's caller, which the cached check reads off its frame."""
    return getattr(sys.modules[U.TARGET_MODULE], U.TARGET)(model)


@pytest.fixture
def release(monkeypatch):
    """A module under a private name holding a check with SGLang's signature; counts the model walks."""
    mod = types.ModuleType("verl_sglang_lora_test_weight_updater")
    mod.walks, mod.flag = 0, None

    def check(model=None):
        if model is not None:
            mod.walks += 1
            for m in model.modules():
                reason = getattr(m, "_derived_weight_cache_error", None)
                if reason is not None:
                    return reason
        return mod.flag

    mod._unsupported_derived_weight_cache_error = check
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(U, "TARGET_MODULE", mod.__name__)
    monkeypatch.setattr(U, "_INSTALLED", None)
    monkeypatch.delenv(U.OPT_OUT_ENV, raising=False)
    return mod


def model(reason=None):
    m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    if reason is not None:
        m[1]._derived_weight_cache_error = reason
    return m


def test_loader_writes_walk_once_per_model_and_the_model_free_part_stays_live(release):
    assert U.install() == U.KEPT and U.install() == U.KEPT  # once per process
    m = model()
    assert [update_weights_from_tensor(m) for _ in range(10)] == [None] * 10 and release.walks == 1
    release.flag = "gemm split on"  # SGLang's model=None part is asked on every call
    assert update_weights_from_tensor(m) == "gemm split on" and release.walks == 1
    blocked, empty = model("model cache"), model("")  # "" is a refusal too: SGLang tests `is not None`
    assert [update_weights_from_tensor(blocked) for _ in range(3)] == ["model cache"] * 3
    release.flag = None
    assert [update_weights_from_tensor(empty) for _ in range(3)] == [""] * 3 and release.walks == 3


def test_other_updates_run_sglangs_check_and_drop_the_kept_answer(release):
    U.install()
    m = model()
    update_weights_from_tensor(m)
    assert [update_weights_from_tensor(m, load_format=None) for _ in range(2)] == [None, None]  # a base update
    assert release.walks == 3
    m[0]._derived_weight_cache_error = "re-derived by the base update"  # e.g. fp8's process_weights_after_loading
    assert update_weights_from_tensor(m) == "re-derived by the base update" and release.walks == 4
    assert U.installed()(m) == "re-derived by the base update" and release.walks == 5  # not SGLang's caller: walks


def test_revalidation_per_model_catches_a_changed_answer_and_gives_sglang_its_function_back(release):
    U.install()
    cached = U.installed()
    a, b = model(), model()
    for _ in range(U.REVALIDATE_EVERY):  # two models interleaved: each is re-checked on its own count
        update_weights_from_tensor(a), update_weights_from_tensor(b)
    assert release.walks == 2
    update_weights_from_tensor(a), update_weights_from_tensor(b)
    assert release.walks == 4 and cached.stale is None  # agreeing revalidations give nothing back
    a[0]._derived_weight_cache_error = "appeared late"
    answers = [update_weights_from_tensor(a) for _ in range(U.REVALIDATE_EVERY)]
    first = answers.index("appeared late")  # caught at a's next revalidation, SGLang's answer from then on
    assert set(answers[:first]) == {None} and set(answers[first:]) == {"appeared late"}
    assert release._unsupported_derived_weight_cache_error is cached.original and "appeared late" in cached.stale
    assert U.install().startswith("given back: ") and U.installed() is None  # a later attach does not re-install
    assert U.select(True).startswith("given back: ") and U.installed() is None


def test_a_model_gone_is_not_confused_with_a_new_one_at_its_address(release):
    U.install()
    m = model("first model")
    assert update_weights_from_tensor(m) == "first model"
    kept = U.installed()._kept
    entry = kept.pop(id(m))
    del m
    gc.collect()
    assert entry.model() is None
    new = model()
    kept[id(new)] = entry  # the gone model's answer under the new one's address, as a reused id would leave it
    walks = release.walks
    assert update_weights_from_tensor(new) is None and release.walks == walks + 1  # the weakref says: another model


def test_select_switches_only_between_its_own_two(release):
    U.install()
    cached = U.installed()
    assert U.select(False) == "SGLang's own" and release._unsupported_derived_weight_cache_error is cached.original
    assert U.install() == U.KEPT and U.installed() is cached  # the same instance back in place
    assert U.select(True) == "cached"
    other = lambda model=None: None  # noqa: E731 - someone else replaced SGLang's function
    release._unsupported_derived_weight_cache_error = other
    assert U.select(False).startswith("left as is: replaced by") and release._unsupported_derived_weight_cache_error is other


def test_the_loaders_ping_switches_and_refuses_other_values(release):
    U.install()

    def ping(mode):
        status, message = P.new_status(), P.new_message(512)
        apply(None, P.request_tensors("ping", status, None, message, slot="verl_lora_slot0", seq=3, update_check=mode))
        return P.read_status(status)["ok"], P.read_message(message)

    assert ping(0) == (True, "pong; SGLang's per-request update check: SGLang's own") and U.installed() is None
    assert ping(1) == (True, "pong; SGLang's per-request update check: cached") and U.installed() is not None
    ok, message = ping("yes")
    assert not ok and "update_check='yes'" in message and U.installed() is not None


def test_opt_out_and_unexpected_signatures_leave_sglang_as_is(release, monkeypatch, caplog):
    monkeypatch.setenv(U.OPT_OUT_ENV, "0")
    assert U.OPT_OUT_ENV in U.install() and U.installed() is None
    monkeypatch.delenv(U.OPT_OUT_ENV)
    release._unsupported_derived_weight_cache_error = lambda model, strict=True: None
    assert U.install().startswith("left as is: unexpected signature") and U.installed() is None
    assert "left as is" in caplog.text
    release._unsupported_derived_weight_cache_error = lambda: None  # 0.5.18: a flag, no model walk
    assert U.install() == "absent"
    monkeypatch.setattr(U, "TARGET_MODULE", "verl_sglang_lora_test_no_such_module")
    assert U.install() == "absent" and U.select(True) == "absent"
