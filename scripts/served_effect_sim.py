"""Simulate the served-effect check (verl_sglang_lora/runtime/sync/served_effect.py) over many GRPO steps.

Each simulated step measures its noise floor on one zero-effect step (LoRA B = 0), then judges ``--steps`` steps per
(what SGLang serves, effect-to-noise level). Noise is heavy-tailed: Student-t with 3 degrees of freedom per token,
times a per-sequence scale (log-normal, sigma 0.5); the adapter's effect is Laplace per token times its own
per-sequence scale. The arms: the trained adapter, and every wrong one the check must stop (base model, half and
quarter scale, negated, an unrelated adapter of equal size, the trained adapter plus an equally large unrelated
part). Prints a table (fail / inconclusive rate per arm and level) and writes a JSON record.

    python scripts/served_effect_sim.py --steps 2000 --record      # appends to docs/results/served_effect_sim.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from verl_sglang_lora.runtime.sync import served_effect as se  # noqa: E402

ARMS = ("trained", "base", "half", "quarter", "negated", "unrelated", "trained_plus_unrelated")
LEVELS = (1.0, 2.0, 4.0, 8.0, 16.0, 64.0)  # rms effect-to-noise of the batch


def _heavy(g: torch.Generator, shape: tuple[int, int], dof: float = 3.0) -> torch.Tensor:
    """Student-t draws, scaled to unit variance, times a per-row log-normal scale."""
    z = torch.randn(shape, generator=g, dtype=torch.float64)
    chi2 = torch.distributions.Gamma(dof / 2, 0.5).sample(shape).to(torch.float64)  # uses torch's global RNG
    t = z / torch.sqrt(chi2 / dof) / (dof / (dof - 2)) ** 0.5
    return t * torch.exp(0.5 * torch.randn(shape[0], 1, generator=g, dtype=torch.float64))


def _effect(g: torch.Generator, shape: tuple[int, int]) -> torch.Tensor:
    lap = torch.distributions.Laplace(0.0, 2 ** -0.5).sample(shape).to(torch.float64)
    return lap * torch.exp(0.5 * torch.randn(shape[0], 1, generator=g, dtype=torch.float64))


def step(arm: str, level: float, g: torch.Generator, batch: int, length: int) -> dict[str, torch.Tensor]:
    """One batch of log-probs: ``level`` is the rms of the trained effect over the rms of the numerics noise."""
    shape = (batch, length)
    lengths = torch.randint(length // 4, length + 1, (batch,), generator=g)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    ref = -torch.rand(shape, generator=g, dtype=torch.float64) * 4
    e = level * _effect(g, shape)
    u = level * _effect(g, shape)
    served = {"trained": e, "base": 0 * e, "half": 0.5 * e, "quarter": 0.25 * e, "negated": -e, "unrelated": u,
              "trained_plus_unrelated": e + u, "zero": 0 * e}[arm]
    if arm == "zero":
        e = 0 * e
    return {se.REF: ref, se.OLD: ref + e, se.ROLLOUT: ref + served + _heavy(g, shape), se.MASK: mask}


def simulate(steps: int, batch: int, length: int, seed: int = 0, arms=ARMS, levels=LEVELS,
             min_snr: float | None = None) -> list[dict]:
    """Fail and inconclusive counts per (arm, level); each step's check has its own freshly measured floor."""
    from verl_sglang_lora.runtime.settings import PluginSettings

    min_snr = PluginSettings().served_effect_min_snr if min_snr is None else min_snr
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    rows = []
    for arm in arms:
        for level in levels:
            fails = inconclusive = 0
            for _ in range(steps):
                check = se.ServedEffectCheck(min_snr)
                check.step(step("zero", level, g, batch, length))  # step 1: LoRA B = 0, the floor
                verdict = check.step(step(arm, level, g, batch, length)).verdict
                fails += verdict == "fail"
                inconclusive += verdict == "inconclusive"
            rows.append({"arm": arm, "level": level, "steps": steps, "fails": fails, "inconclusive": inconclusive,
                         "passes": steps - fails - inconclusive})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--shapes", default="32x64,64x256,8x256", help="batch x response length, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--record", action="store_true", help="append a record to docs/results/served_effect_sim.json")
    args = ap.parse_args()
    results = []
    print(f"{'shape':>8} {'arm':>24} " + " ".join(f"snr={lv:<7g}" for lv in LEVELS))
    for shape in args.shapes.split(","):
        b, t = (int(x) for x in shape.split("x"))
        rows = simulate(args.steps, b, t, args.seed)
        results.append({"batch": b, "length": t, "rows": rows})
        for arm in ARMS:
            cells = [r for r in rows if r["arm"] == arm]
            key = "fails" if arm == "trained" else "passes"
            print(f"{shape:>8} {arm:>24} " + " ".join(
                f"{c[key] / c['steps']:.4f}/{c['inconclusive'] / c['steps']:.2f}".ljust(12) for c in cells))
    print("cells: the wrong verdict's rate (trained: fail; every other arm: pass) / the inconclusive rate")
    if args.record:
        sys.path.insert(0, str(ROOT / "scripts"))
        import records

        figures = {"settings": {"error_tol": se.ERROR_TOL, "noise_allowance": se.NOISE_ALLOWANCE, "groups": se.GROUPS},
                   "results": results}
        print(records.append(records.make_record("served_effect_sim", "python scripts/served_effect_sim.py "
                                                 + " ".join(sys.argv[1:]), figures)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
