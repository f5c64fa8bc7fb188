"""The cached stand-in for SGLang 0.5.23's per-request derived-weight-cache check: its own rules (opt-out, the
signature it accepts, the model=None part that stays live, one entry per live model). SGLang's real function is
driven in tests/test_resident_slot_on_cpu.py (the 0.5.23 selfcheck)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from verl_sglang_lora.runtime.resident import update_check_cache as U


@pytest.fixture
def release(monkeypatch):
    """A module under a private name holding a check with SGLang's signature; counts the model walks."""
    mod = types.ModuleType("verl_sglang_lora_test_weight_updater")
    mod.walks, mod.gemm_flag = 0, None

    def check(model=None):
        if model is not None:
            mod.walks += 1
            for m in model.modules():
                reason = getattr(m, "_derived_weight_cache_error", None)
                if reason is not None:
                    return reason
        return mod.gemm_flag

    mod._unsupported_derived_weight_cache_error = check
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(U, "TARGET_MODULE", mod.__name__)
    monkeypatch.delenv(U.OPT_OUT_ENV, raising=False)
    return mod


def test_one_walk_per_model_and_the_model_free_part_stays_live(release):
    assert U.install() == U.KEPT and U.install() == U.KEPT  # once per process
    cached = U.installed()
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    assert [cached(model) for _ in range(10)] == [None] * 10 and release.walks == 1
    release.gemm_flag = "gemm split on"  # SGLang's model=None part is asked on every call
    assert cached(model) == "gemm split on" and cached() == "gemm split on" and release.walks == 1
    other = torch.nn.Linear(2, 2)
    other._derived_weight_cache_error = "model cache"
    assert cached(other) == "model cache" and cached(other) == "model cache" and release.walks == 2


def test_a_changed_answer_gives_sglang_its_function_back(release):
    U.install()
    cached = U.installed()
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    cached(model)
    model[0]._derived_weight_cache_error = "appeared late"
    answers = [cached(model) for _ in range(U.REVALIDATE_EVERY)]
    first = answers.index("appeared late")  # caught at the next revalidation, SGLang's answer from then on
    assert set(answers[:first]) == {None} and set(answers[first:]) == {"appeared late"}
    assert release._unsupported_derived_weight_cache_error is cached.original and "appeared late" in cached.stale
    assert cached(model) == "appeared late"  # a stand-in still held by someone answers as SGLang does


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
    assert U.install() == "absent"
