"""Adapter export with collectives inside the producer must not hang when only one rank sends.

Megatron's adapter export (megatron-bridge ``export_adapter_weights``) gathers across actor TP/PP ranks while
it yields; verl 0.9.1 iterates it on the rollout-TP leader only, so with rollout TP > 1 the other ranks never
enter the collective. The plugin's client drains the stream on non-leaders in lockstep. This test runs that
pattern on a real 2-process gloo group: a producer doing an all_reduce per tensor, the leader collecting with
the plugin's own pipeline, the other rank draining.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from verl_sglang_lora.runtime.sync.flat_adapter import AdapterCollector


def _producer(rank: int):
    for layer in range(3):
        for ab, shape in (("A", (4, 16)), ("B", (16, 4))):
            t = torch.full(shape, float(rank + 1))
            dist.all_reduce(t)  # the collective inside the export
            yield f"base_model.model.model.layers.{layer}.self_attn.q_proj.lora_{ab}.weight", t


def _resolve(name: str):
    module, ab = name.rsplit(".lora_", 1)
    return name, module, ab[0]


def _worker(rank: int, port: int, result):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=__import__("datetime").timedelta(seconds=60))
    try:
        if rank == 0:
            adapter = AdapterCollector().collect(_producer(rank), _resolve)
            result[rank] = (len(adapter.tensors), adapter.nbytes, float(next(iter(adapter.tensors.values()))[0, 0]))
        else:
            for _ in _producer(rank):  # what SGLangLoRAServerAdapter._sync_adapter does off the leader
                pass
            result[rank] = "drained"
    finally:
        dist.destroy_process_group()


def test_leader_collects_while_other_rank_drains_in_lockstep():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager = mp.Manager()
    result = manager.dict()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(r, port, result)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
    assert not alive, "export hung: a rank never entered the producer's collective"
    assert result[1] == "drained"
    tensors, nbytes, value = result[0]
    assert tensors == 6 and nbytes == 6 * 64 * 4 and value == 3.0  # 1 + 2 summed across ranks
