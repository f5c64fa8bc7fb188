"""The newest served adapter, kept on the server's node so a restarted server can serve it again.

Adapters reach SGLang as CUDA-IPC handles straight from the trainer, so neither SGLang nor the server actor holds
a copy that survives a crash. With recovery enabled the weight-sync client writes the adapter it just activated
here, in the PEFT layout SGLang's ``/load_lora_adapter`` reads from disk (``adapter_model.safetensors`` +
``adapter_config.json``) plus ``snapshot.json`` (name, version, fingerprint, global step). Writes are atomic (a new
directory, then a rename of the pointer file); older versions are removed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

import torch

from verl_sglang_lora.runtime.sync.device import to_device_owned

POINTER = "latest.json"


@dataclass(frozen=True)
class AdapterSnapshot:
    name: str
    version: int
    fingerprint: str
    global_steps: int | None
    path: str  # the directory /load_lora_adapter reads


def snapshot_root(base: str, job_id: str, actor_name: str, node_id: str = "") -> Path:
    """Per job and server actor: a restarted actor (same name, same job, same node) finds its own snapshot.

    Job ids restart at 01000000 in every Ray cluster; the node id (new for every raylet) keeps two clusters on one
    host apart.
    """
    run = f"job_{job_id}" + (f"_node_{node_id[:12]}" if node_id else "")
    return Path(base or tempfile.gettempdir()) / "verl_sglang_lora" / run / actor_name


def write_snapshot(root: Path, *, name: str, version: int, fingerprint: str, global_steps: int | None,
                   tensors: Mapping[str, torch.Tensor], peft_config: Mapping) -> AdapterSnapshot:
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    target = root / name
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
    try:
        # host tensors that own their memory: safetensors refuses tensors sharing storage (views into one buffer)
        host = {k: to_device_owned(t, "cpu").contiguous() for k, t in tensors.items()}
        save_file(host, str(staging / "adapter_model.safetensors"))
        (staging / "adapter_config.json").write_text(json.dumps(dict(peft_config)))
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    snap = AdapterSnapshot(name, int(version), fingerprint, global_steps, str(target))
    pointer_tmp = root / f".{POINTER}.tmp"
    pointer_tmp.write_text(json.dumps(asdict(snap)))
    os.replace(pointer_tmp, root / POINTER)
    for old in root.iterdir():  # keep only what the pointer names
        if old.is_dir() and old.name != name and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    return snap


def read_snapshot(root: Path) -> AdapterSnapshot | None:
    """The newest complete snapshot, or None when there is none (no adapter was ever synced)."""
    pointer = root / POINTER
    if not pointer.is_file():
        return None
    snap = AdapterSnapshot(**json.loads(pointer.read_text()))
    if not (Path(snap.path) / "adapter_model.safetensors").is_file():
        raise FileNotFoundError(f"adapter snapshot {snap.name} is named by {pointer} but {snap.path} is incomplete")
    return snap


def clear_snapshots(root: Path) -> None:
    """A fresh (not restarted) server starts with no snapshot of an earlier actor of the same name."""
    shutil.rmtree(root, ignore_errors=True)
