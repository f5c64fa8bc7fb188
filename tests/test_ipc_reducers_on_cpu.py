"""Why the server sends an empty base update after every launch (``sglang_contract.ipc_reducers``).

On the H200 a relaunched SGLang 0.5.12 died at its first adapter load with ``module 'torch.multiprocessing.reductions'
has no attribute '_rebuild_cuda_tensor_original'``. These tests replay that with SGLang's real ``patch_torch`` in a
fresh interpreter (the patch is process-global) and check the priming request the plugin builds.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import sglang_or_skip  # noqa: E402

_REPLAY = r"""
import json
from torch.multiprocessing import reductions
from sglang.srt.utils import patch_torch

out = {"patched_at_start": hasattr(reductions, "_rebuild_cuda_tensor_original")}
# what a scheduler runs for a CUDA tensor pickled by a patched producer (the pickle names this function); the
# device argument (index 6) is a UUID on a GPU host, an index here since no UUID resolves on a CPU host
args = (None,) * 6 + (0,) + (None,) * 5
try:
    patch_torch._rebuild_cuda_tensor_modified(*args)
except AttributeError as exc:
    out["unpatched_error"] = str(exc)
patch_torch.monkey_patch_torch_reductions()  # what SGLang's update_weights_from_tensor runs first
out["patched_after"] = hasattr(reductions, "_rebuild_cuda_tensor_original")
print(json.dumps(out))
"""


def test_unpatched_scheduler_cannot_rebuild_a_patched_producers_tensor() -> None:
    sglang_or_skip("sglang.srt.utils.patch_torch")
    proc = subprocess.run([sys.executable, "-c", _REPLAY], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["patched_at_start"] is False
    assert "has no attribute '_rebuild_cuda_tensor_original'" in out["unpatched_error"]  # the H200 error
    assert out["patched_after"] is True


@pytest.mark.parametrize("tp_size", [1, 4])
def test_priming_update_carries_no_tensors_for_each_rank(tp_size: int) -> None:
    sglang_or_skip("sglang.srt.managers.io_struct")
    from sglang.srt.managers.io_struct import UpdateWeightsFromTensorReqInput
    from sglang.srt.utils import MultiprocessingSerializer

    from verl_sglang_lora.sglang_contract.ipc_reducers import empty_tensor_update

    req = empty_tensor_update(tp_size)
    assert isinstance(req, UpdateWeightsFromTensorReqInput)
    assert [MultiprocessingSerializer.deserialize(b) for b in req.serialized_named_tensors] == [[]] * tp_size
    assert req.flush_cache is False and req.load_format is None
    with pytest.raises(ValueError, match="tp_size"):
        empty_tensor_update(0)


def test_a_refused_priming_update_is_an_error_with_sglangs_message() -> None:
    sglang_or_skip("sglang.srt.managers.io_struct")
    import asyncio

    from verl_sglang_lora.sglang_contract.ipc_reducers import needs_priming, prime_scheduler_reducers

    class Refusing:
        calls = 0

        async def update_weights_from_tensor(self, obj, request=None):
            Refusing.calls += 1
            return False, "dp_size must be 1 or dp attention must be enabled"

    if not needs_priming():  # SGLang 0.5.23+: its adapter load patches torch itself; an update outside a session fails
        asyncio.run(prime_scheduler_reducers(Refusing(), 1))
        assert Refusing.calls == 0
        return
    with pytest.raises(RuntimeError, match="dp_size must be 1"):
        asyncio.run(prime_scheduler_reducers(Refusing(), 1))
