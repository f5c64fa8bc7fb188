"""docs/learning.png from docs/results/learning.json: mean reward per step, one line per run, the merge arm's seed
band shaded (scripts/records.py band), one panel per trainer, the newest commit's runs.

    python scripts/plot_learning.py [--out docs/learning.png]      # needs matplotlib
"""

from __future__ import annotations

from plots import out_path, pyplot, save
from records import RESULTS, ROOT, band, learning_runs, load

COLORS = {"adapter": "tab:blue", "merge": "tab:orange", "reference": "tab:green"}


def main(argv: list[str] | None = None) -> int:
    out = out_path(__doc__, ROOT / "docs" / "learning.png", argv)
    plt = pyplot()

    records = load(RESULTS)
    groups = learning_runs(records)
    if not groups:
        raise SystemExit("no learning records in docs/results/learning.json")
    newest = records["learning"][-1]["commit"]
    trainers = sorted({t for c, t, _ in groups if c == newest})
    fig, axes = plt.subplots(1, len(trainers), figsize=(6 * len(trainers), 4), squeeze=False)
    for ax, trainer in zip(axes[0], trainers):
        merge = groups.get((newest, trainer, "merge"))
        if merge:
            lo, hi = band([r["figures"]["rewards"] for r in merge])
            ax.fill_between(range(1, len(lo) + 1), lo, hi, color=COLORS["merge"], alpha=0.15, label="merge band")
        for (commit, t, arm), runs in groups.items():
            if commit != newest or t != trainer:
                continue
            for r in runs:
                rw = r["figures"]["rewards"]
                ax.plot(range(1, len(rw) + 1), rw, color=COLORS[arm], marker=".",
                        linestyle="-" if r["figures"]["seed"] % 2 else "--", label=f"{arm} seed {r['figures']['seed']}")
        gpu = next(r.get("gpu") for runs in groups.values() for r in runs)
        ax.set(title=f"{trainer}, commit {newest}, {gpu}", xlabel="GRPO step", ylabel="mean reward", ylim=(0, 1.05))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return save(fig, out)


if __name__ == "__main__":
    raise SystemExit(main())
