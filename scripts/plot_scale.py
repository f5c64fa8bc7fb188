"""docs/scale_parts.png from docs/results/scale.json: the median step time split into its parts (generate, old
log-probs, reference, actor update, weight/adapter sync), one bar per shape x trainer x arm, the newest record of each.

    python scripts/plot_scale.py [--out docs/scale_parts.png]      # needs matplotlib
"""

from __future__ import annotations

from plots import out_path, pyplot, save
from records import RESULTS, ROOT, SCALE_PARTS, load, newest_runs


def main(argv: list[str] | None = None) -> int:
    out = out_path(__doc__, ROOT / "docs" / "scale_parts.png", argv)
    plt = pyplot()

    runs = newest_runs(load(RESULTS), "scale", ("shape", "trainer", "arm"))
    if not runs:
        raise SystemExit("no scale records in docs/results/scale.json")
    labels = [f"{r['figures']['shape']}\n{r['figures']['trainer']} {r['figures']['arm']}\n{r.get('gpu') or '-'}"
              for r in runs]
    fig, ax = plt.subplots(figsize=(2.2 * len(runs) + 3, 4.5))
    bottom = [0.0] * len(runs)
    for part in SCALE_PARTS:
        heights = [r["figures"]["parts_s"].get(part) or 0.0 for r in runs]
        ax.bar(labels, heights, bottom=bottom, label=part)
        bottom = [b + h for b, h in zip(bottom, heights)]
    for i, r in enumerate(runs):  # the step's median, which includes what the parts leave out
        ax.plot([i - 0.4, i + 0.4], [r["figures"]["step_s_p50"]] * 2, color="black")
    ax.set(ylabel="seconds per step (median after the first)", title="GRPO step time by part (black: whole step)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return save(fig, out)


if __name__ == "__main__":
    raise SystemExit(main())
