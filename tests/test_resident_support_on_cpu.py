"""The refusals of the resident setting. What each SGLang release supports is read from the release's own code by
the compat probe (tests/test_compat_matrix_on_cpu.py::test_resident_support_per_release)."""

from __future__ import annotations

import pytest


def test_resident_setting_on_refuses_where_it_cannot_run() -> None:
    from verl_sglang_lora.runtime.resident.support import resident_enabled

    with pytest.raises(ValueError, match=r"engine_kwargs\.sglang_lora\.resident=on.*Fix: set it to auto"):
        resident_enabled("on", 2)
    with pytest.raises(ValueError, match=r"resident must be one of"):
        resident_enabled("sometimes", 1)
    assert resident_enabled("off", 1) is False and resident_enabled("auto", 2) is False
