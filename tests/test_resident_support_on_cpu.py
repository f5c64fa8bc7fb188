"""Per supported SGLang release, read from that release's own code: whether the resident in-place path applies (the
answer docs/compatibility.md gives), whether the server primes the scheduler after launch, and that the launch
wrapper keeps the release's ServerArgs fields; plus the refusals of the resident setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl_sglang_lora.releases import SGLANG_RELEASES

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "scripts" / "cpu_env" / "sgl_kernel_stub"
# None: the path runs; else a word of the reason it does not
EXPECTED = {"0.5.8": None, "0.5.12": None, "0.5.18": None, "0.5.23": "weight-update session"}
# whether the server primes the scheduler after launch: not where a tensor update outside a weight-update session is
# refused (0.5.23), whose adapter load applies the torch patch itself (docs/compatibility.md)
PRIMES = {"0.5.8": True, "0.5.12": True, "0.5.18": True, "0.5.23": False}


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_resident_support_per_release(version: str) -> None:
    release = ROOT / ".cache" / "sglang" / version
    if not release.is_dir():
        if os.environ.get("VERL_SGLANG_LORA_REQUIRE_SGLANG") == "1":
            pytest.fail(f"{release} missing (scripts/sglang_release.sh {version})")
        pytest.skip(f"no {release}")
    code = ("import sglang\nfrom verl_sglang_lora.runtime.resident.support import unsupported_reason\n"
            "from verl_sglang_lora.sglang_contract.ipc_reducers import needs_priming\n"
            "print(sglang.__version__); print(unsupported_reason('auto', 1)); print(unsupported_reason('auto', 2)); "
            "print(needs_priming())\n"
            "from sglang.srt.server_args import ServerArgs\nfrom verl_sglang_lora.verl_glue.server_args import wrap_server_args\n"
            "w = wrap_server_args(ServerArgs, {'enable_lora': True, 'custom_weight_loader': ['x']})\n"
            "print(sorted(getattr(w, '__dataclass_fields__', None) or getattr(w, '__struct_fields__', ())) == "
            "sorted(getattr(ServerArgs, '__dataclass_fields__', None) or getattr(ServerArgs, '__struct_fields__', ())))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(release), str(STUB), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got_version, one_rank, two_ranks, primes, wrapped_fields = proc.stdout.strip().splitlines()[-5:]
    assert got_version == version
    assert (one_rank == "None") if EXPECTED[version] is None else (EXPECTED[version] in one_rank)
    assert "scheduler ranks" in two_ranks  # TP x DP > 1: the client cannot place per-rank sources yet
    assert primes == str(PRIMES[version])
    assert wrapped_fields == "True"  # the launch wrapper keeps the release's ServerArgs fields (dataclass or msgspec)


def test_resident_setting_on_refuses_where_it_cannot_run() -> None:
    from verl_sglang_lora.runtime.resident.support import resident_enabled

    with pytest.raises(ValueError, match=r"engine_kwargs\.sglang_lora\.resident=on.*Fix: set it to auto"):
        resident_enabled("on", 2)
    with pytest.raises(ValueError, match=r"resident must be one of"):
        resident_enabled("sometimes", 1)
    assert resident_enabled("off", 1) is False and resident_enabled("auto", 2) is False
