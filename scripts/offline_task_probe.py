"""Is the offline task learnable by a LoRA adapter, and not solved by the base model? A GRPO loop on CPU with
peft and transformers alone (no verl, no SGLang), on the offline assets, with the examples' tiny-default settings:
8 prompts x n=8 samples per step, 32 response tokens, LoRA rank 32 / alpha 32 on all linear layers, AdamW with
weight decay 0.01, gradient clip 1.0, group-normalized advantages, token-mean loss, one update per step.

    python scripts/offline_task_probe.py --seeds 1 2 --steps 25 --lr 2e-4 [--serve merged-bf16] [--record]

``--serve`` picks the policy the samples come from: ``adapter`` (the default) samples from the trained model itself,
base weights plus the LoRA product, as an adapter-serving engine does; ``merged-bf16`` samples from the base weights
with the LoRA product merged in and rounded to bfloat16, as verl's ``lora.merge=True`` sends them (verl casts every
merged weight to bfloat16). The base checkpoint is bfloat16, so a merged delta below half a bfloat16 step of the
weight rounds back to the base weight. Gradients always come from the trained model.

Prints the mean reward per step per seed; ``--record`` appends a record to docs/results/offline_task.json.
It shows the task, not the plugin: the reward curves of runs through the plugin are docs/learning.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


@contextlib.contextmanager
def merged_bf16(model: torch.nn.Module):
    """The peft model serving base + LoRA merged and rounded to bfloat16 (adapters off), restored on exit."""
    from peft.tuners.lora import Linear as LoraLinear

    saved = []
    try:
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, LoraLinear):
                    w = m.base_layer.weight
                    delta = m.lora_B["default"].weight @ m.lora_A["default"].weight * m.scaling["default"]
                    saved.append((w, w.detach().clone()))
                    w.copy_((w + delta).to(torch.bfloat16).to(w.dtype))
        with model.disable_adapter():
            yield
    finally:
        with torch.no_grad():
            for w, original in saved:
                w.copy_(original)


def grpo_curve(assets: Path, seed: int, steps: int, lr: float, batch: int = 8, n: int = 8,
               response_tokens: int = 32, serve: str = "adapter") -> list[float]:
    """Mean reward of each step's samples (before that step's update)."""
    import random

    import pyarrow.parquet as pq
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_sglang_lora.tools.offline_reward import digit_share

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tok = AutoTokenizer.from_pretrained(assets / "model")
    model = AutoModelForCausalLM.from_pretrained(assets / "model", dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=32, lora_alpha=32, target_modules="all-linear"))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
    rows = pq.read_table(assets / "testset" / "train.parquet").to_pylist()
    curve = []
    for _ in range(steps):
        prompts = [tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True)
                   for r in rng.sample(rows, batch) for _ in range(n)]
        enc = tok(prompts, return_tensors="pt", padding=True, padding_side="left")
        with torch.no_grad(), (merged_bf16(model) if serve == "merged-bf16" else contextlib.nullcontext()):
            out = model.generate(**enc, max_new_tokens=response_tokens, do_sample=True, temperature=1.0, top_k=0,
                                 top_p=1.0, pad_token_id=tok.pad_token_id)
        resp = out[:, enc.input_ids.shape[1]:]
        # the offline reward without verl's exact-answer branch: the random model never answers right
        reward = torch.tensor([digit_share(t) for t in tok.batch_decode(resp, skip_special_tokens=True)])
        curve.append(round(reward.mean().item(), 4))
        groups = reward.view(batch, n)
        adv = ((groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-6)).view(-1, 1)
        mask = (resp != tok.pad_token_id).float()
        attn = torch.cat([enc.attention_mask, mask.long()], 1)
        logits = model(input_ids=out, attention_mask=attn).logits[:, enc.input_ids.shape[1] - 1:-1]
        logp = torch.log_softmax(logits, -1).gather(2, resp[..., None]).squeeze(-1)
        loss = -(adv * logp * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        print(f"{serve} seed {seed} step {len(curve)}: reward {curve[-1]}", flush=True)
    return curve


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--serve", choices=("adapter", "merged-bf16"), default="adapter")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args(argv)
    from verl_sglang_lora.tools.offline_assets import write_offline_assets

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        write_offline_assets(tmp)
        curves = {seed: grpo_curve(Path(tmp), seed, args.steps, args.lr, serve=args.serve) for seed in args.seeds}
    print("| seed | step 1 | first step >= 0.8 | last |\n|---|---|---|---|")
    for seed, c in curves.items():
        first = next((i + 1 for i, r in enumerate(c) if r >= 0.8), None)
        print(f"| {seed} | {c[0]} | {first} | {c[-1]} |")
    if args.record:
        import records

        command = f"python scripts/offline_task_probe.py --seeds {' '.join(map(str, args.seeds))} " \
                  f"--steps {args.steps} --lr {args.lr:g} --serve {args.serve}"
        figures = {"lr": args.lr, "steps": args.steps, "serve": args.serve,
                   "rewards": {str(s): c for s, c in curves.items()}}
        print(records.append(records.make_record("offline_task", command, figures)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
