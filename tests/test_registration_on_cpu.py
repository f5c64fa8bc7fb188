"""`sglang_lora` is known to both verl registries in a fresh interpreter and inside a real Ray worker, with
only `pip install` done (verl's `verl.plugins` entry point)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = (
    "import json, verl\n"
    "from verl.workers.rollout.base import _ROLLOUT_REGISTRY\n"
    "from verl.workers.rollout.replica import RolloutReplicaRegistry\n"
    "print(json.dumps({'replica': 'sglang_lora' in RolloutReplicaRegistry._registry,"
    " 'adapter': _ROLLOUT_REGISTRY.get(('sglang_lora', 'async'))}))\n"
)


def _entry_points_supported() -> bool:
    import inspect

    import verl

    return "verl.plugins" in inspect.getsource(verl)


def test_fresh_interpreter_sees_both_registries():
    pytest.importorskip("verl")
    if not _entry_points_supported():
        pytest.skip("this verl release has no verl.plugins entry points (0.8.0): external_lib covers it")
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=True)
    state = json.loads(out.stdout.strip().splitlines()[-1])
    assert state == {"replica": True, "adapter": "verl_sglang_lora.runtime.sync_client.SGLangLoRAServerAdapter"}


def test_external_lib_module_registers_on_import():
    """The Hydra overlay's external_lib / VERL_USE_EXTERNAL_MODULES path (works on verl 0.8.0 too)."""
    pytest.importorskip("verl")
    code = "import os; os.environ['VERL_USE_EXTERNAL_PLUGINS']='none'\n" + PROBE.replace(
        "import json, verl\n", "import json, verl, verl_sglang_lora.register\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1])["replica"] is True


def test_ray_worker_sees_both_registries():
    ray = pytest.importorskip("ray")
    pytest.importorskip("verl")
    if not _entry_points_supported():
        pytest.skip("no verl.plugins entry points in this verl release")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:

        @ray.remote
        def probe():
            import verl  # noqa: F401  (loads verl.plugins entry points)
            from verl.workers.rollout.base import _ROLLOUT_REGISTRY
            from verl.workers.rollout.replica import RolloutReplicaRegistry

            return (
                "sglang_lora" in RolloutReplicaRegistry._registry,
                _ROLLOUT_REGISTRY.get(("sglang_lora", "async")),
                RolloutReplicaRegistry._registry["sglang_lora"].__module__,
            )

        replica, adapter, loader_module = ray.get(probe.remote(), timeout=300)
    finally:
        ray.shutdown()
    assert replica and adapter == "verl_sglang_lora.runtime.sync_client.SGLangLoRAServerAdapter"
    assert loader_module == "verl_sglang_lora.verl_glue.registration"


def test_registration_is_idempotent():
    pytest.importorskip("verl")
    from verl_sglang_lora.verl_glue.registration import register, registration_state

    register()
    register()
    assert registration_state() == {"RolloutReplicaRegistry": True, "_ROLLOUT_REGISTRY": True}
