"""docs/stock_vs_plugin.png from docs/results/stock_vs_plugin.json: per step, SGLang's GPU memory (GiB) and the sync
phase (ms), verl's stock LoRA path against the plugin, the newest run of each trainer x path.

    python scripts/plot_stock_vs_plugin.py [--out docs/stock_vs_plugin.png]      # needs matplotlib
"""

from __future__ import annotations

from plots import out_path, pyplot, save
from records import RESULTS, ROOT, load, newest_runs

KEY = ("trainer", "path")  # one line per trainer x path: its newest run
PANELS = (("sglang_gpu_gib", "SGLang GPU memory (GiB, nvidia-smi, step peak)"),
          ("sync_ms", "sync phase (ms, verl timing_s/update_weights)"))


def points(values: list[float | None]) -> tuple[list[int], list[float]]:
    """(steps, values) of a per-step list, steps counted from 1, the steps without a value left out."""
    pairs = [(i + 1, v) for i, v in enumerate(values) if v is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def main(argv: list[str] | None = None) -> int:
    out = out_path(__doc__, ROOT / "docs" / "stock_vs_plugin.png", argv)
    plt = pyplot()

    runs = newest_runs(load(RESULTS), "stock_vs_plugin", KEY)
    if not runs:
        raise SystemExit("no stock_vs_plugin records in docs/results/stock_vs_plugin.json")
    fig, axes = plt.subplots(1, len(PANELS), figsize=(13, 4.5))
    for ax, (key, label) in zip(axes, PANELS):
        for r in runs:
            f = r["figures"]
            xs, ys = points(f[key])
            ax.plot(xs, ys, marker=".", linestyle="-" if f["path"] == "plugin" else "--",
                    label=f"{f['path']} ({f['trainer']}, {r.get('gpu') or '-'})")
        ax.set(xlabel="verl step", ylabel=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("verl's stock rollout.name=sglang vs rollout.name=sglang_lora, same seed")
    return save(fig, out)


if __name__ == "__main__":
    raise SystemExit(main())
