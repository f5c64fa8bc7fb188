"""Restart recovery (engine_kwargs.sglang_lora.server_max_restarts): the snapshot a restarted server loads, and
the Ray mechanics around it.

- the snapshot is a PEFT adapter directory: peft loads it onto the real model, SGLang's own LoRAConfig reads it;
- the real ``SGLangLoRARollout`` in a real Ray actor with the plugin's restart options, built by verl's own
  ``SGLangHttpServer.__init__`` from the composed config, dies in a generate (os._exit, as SGLang's watchdog ends
  the actor process); Ray re-sends that call to the restarted actor, which recovers with ``RestartRecovery`` /
  ``recover_server`` before serving it: relaunch, then ``load_lora_adapter`` of the newest snapshot under its
  versioned name (the request is the installed SGLang's own struct). SGLang's tokenizer manager is a stand-in
  (tests/server_probe.py): the real one needs a running SGLang scheduler, which needs a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import sglang_or_skip
from verl_sglang_lora.sglang_contract.peft_config import normalize_peft_config
from verl_sglang_lora.runtime.sync.snapshot import clear_snapshots, read_snapshot, snapshot_root, write_snapshot

RANK = 4


def _peft_adapter(model_path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    import peft
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(model_path)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=RANK, lora_alpha=2 * RANK, target_modules="all-linear"))
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p))
    config = normalize_peft_config(lora.peft_config["default"].to_dict())
    return config, dict(peft.get_peft_model_state_dict(lora))


def test_snapshot_is_a_peft_adapter_dir_sglang_and_peft_read(tiny_qwen3, tmp_path) -> None:
    import peft
    import transformers

    config, tensors = _peft_adapter(tiny_qwen3)
    root = snapshot_root(str(tmp_path), "01000000", "sglang_server_0_0")
    first = write_snapshot(root, name="verl_lora_v1", version=1, fingerprint="a", global_steps=1,
                           tensors=tensors, peft_config=config)
    snap = write_snapshot(root, name="verl_lora_v2", version=2, fingerprint="b", global_steps=2,
                          tensors=tensors, peft_config=config)
    assert read_snapshot(root) == snap and not Path(first.path).exists()  # only the newest is kept

    lora_config = sglang_or_skip("sglang.srt.lora.lora_config").LoRAConfig(snap.path)  # SGLang's disk reader
    assert lora_config.r == RANK and lora_config.lora_alpha == 2 * RANK

    base = transformers.AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    loaded = peft.PeftModel.from_pretrained(base, snap.path)
    state = peft.get_peft_model_state_dict(loaded)
    assert set(state) == set(tensors)
    assert all(torch.equal(state[k], tensors[k]) for k in tensors)

    clear_snapshots(root)
    assert read_snapshot(root) is None


_RAY_PROBE = r"""
import json, os, sys
from pathlib import Path
from verl_sglang_lora.tools.compat_probe import stub_inert_modules
stub_inert_modules()
import ray, torch
from verl_sglang_lora.runtime.sync.snapshot import write_snapshot
from tests.server_probe import push_down_proj_version, start_probe_server

# the real SGLangLoRARollout, built by verl's SGLangHttpServer.__init__ from the composed ppo_trainer config with
# server_max_restarts=1; SGLang's tokenizer manager is a stand-in (no SGLang engine without a GPU) that ends the actor
# process in its first generate, as SGLang's watchdog does when the scheduler crashes
cfg, srv = start_probe_server(sys.argv[1], sys.argv[2])
push_down_proj_version(srv, 7)
root = Path(ray.get(srv.state.remote())["snapshot_root"])
snap = write_snapshot(root, name="verl_lora_v7", version=7, fingerprint="fp7", global_steps=7,
                      tensors={"base_model.model.model.layers.0.mlp.down_proj.lora_A.weight": torch.ones(8, 128)},
                      peft_config={"r": 8, "lora_alpha": 16, "target_modules": ["down_proj"], "peft_type": "LORA"})
sample = ray.get(srv.generate.remote(prompt_ids=[5, 6, 7, 8], sampling_params={"temperature": 1.0}, request_id="r1"),
                 timeout=120)
state = ray.get(srv.state.remote())
out = {"served_by": sample.extra_fields["adapter_version"], "state": state, "snapshot_path": snap.path,
       "metrics": ray.get(srv.drain_metrics.remote())}
print(json.dumps(out))
ray.shutdown()
"""


def test_dead_server_actor_is_restarted_and_serves_the_newest_adapter(tiny_qwen3, tmp_path) -> None:
    from tests.server_probe import run_probe_script

    pytest.importorskip("ray")
    pytest.importorskip("verl")
    out = run_probe_script(_RAY_PROBE, str(tiny_qwen3), str(tmp_path), extra_env={"PROBE_DIE_IN_GENERATE": "1"})
    state = out["state"]
    # the in-flight generate was re-sent to the restarted actor, which relaunched once (on the checkpoint's weights)
    # and loaded the snapshot under its versioned name before serving it
    assert state["launches"] == ["relaunch"] and state["restarts"] == 1
    assert out["served_by"] == 7 and state["global_steps"] == 7 and state["active"] == "verl_lora_v7"
    assert state["loaded_from_disk"] == [{"lora_name": "verl_lora_v7", "lora_path": out["snapshot_path"]}]
    assert out["snapshot_path"].startswith(str(tmp_path))
    assert out["metrics"]["sglang_lora/server_restarts"] == 1
