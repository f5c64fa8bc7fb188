"""Time the adapter collect's host->device paths on the GPU host: staged (pinned / pageable) vs per tensor."""
import time

import torch

from verl_sglang_lora.sync.buckets import stage_to_device, to_device_owned

gen = torch.Generator().manual_seed(0)
shapes = [(32, 1024), (2048, 32), (32, 1024), (1024, 32)] * 98
ts = [(torch.randn(*s, generator=gen) * 0.01).bfloat16() for s in shapes]
dev = torch.device("cuda")
torch.zeros(1, device=dev)


def timed(label, fn, n=5):
    out = []
    for _ in range(n):
        torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    print(f"{label:28s} " + " ".join(f"{x:8.2f}" for x in out), flush=True)


timed("per-tensor .to(cuda)", lambda: [to_device_owned(t, dev) for t in ts])
timed("staged pinned", lambda: stage_to_device(ts, dev, pin=True))
timed("staged pageable", lambda: stage_to_device(ts, dev, pin=False))
host = torch.empty(sum(t.numel() * 2 for t in ts) + 64 * len(ts), dtype=torch.uint8)
timed("host pack only", lambda: [host[i * 65536 : i * 65536 + t.numel() * 2].copy_(t.reshape(-1).view(torch.uint8)) for i, t in enumerate(ts[:300])])
timed("empty pinned 40MB", lambda: torch.empty(40 << 20, dtype=torch.uint8, pin_memory=True))
print("threads", torch.get_num_threads())
