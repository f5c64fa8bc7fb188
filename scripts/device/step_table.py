"""Per-step table from a verl console log (lines ``step:N - key:value - ...``), for docs/validation.md.

    python3 scripts/device/step_table.py LOG [KEY ...]

Default keys: the rollout-vs-trainer log-prob gap (verl's ``training/rollout_probs_diff_*``, with
``calculate_log_probs=True``), the reward, the step time, and the plugin's sync figures.
"""

from __future__ import annotations

import re
import sys

DEFAULT_KEYS = [
    "training/rollout_probs_diff_mean", "training/rollout_probs_diff_max", "critic/score/mean",
    "timing_s/step", "timing_s/update_weights", "sglang_lora/sync_total_ms", "sglang_lora/sync_bytes",
    "sglang_lora/sync_version", "sglang_lora/staleness_max", "sglang_lora/base_policy_samples",
    "sglang_lora/server_restarts", "sglang_lora/sync_inplace", "sglang_lora/sync_load_ms",
    "sglang_lora/resident_fallbacks",
]
STEP_RE = re.compile(r"step:(\d+) - (.*)")


def parse(lines: list[str]) -> dict[int, dict[str, str]]:
    steps: dict[int, dict[str, str]] = {}
    for line in lines:
        m = STEP_RE.search(line)
        if not m:
            continue
        fields = dict(part.split(":", 1) for part in m.group(2).split(" - ") if ":" in part)
        steps.setdefault(int(m.group(1)), {}).update({k.strip(): v.strip() for k, v in fields.items()})
    return steps


def table(steps: dict[int, dict[str, str]], keys: list[str]) -> str:
    rows = ["| step | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for step in sorted(steps):
        rows.append(f"| {step} | " + " | ".join(steps[step].get(k, "-") for k in keys) + " |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    with open(argv[0], errors="replace") as f:
        steps = parse(f.readlines())
    print(table(steps, argv[1:] or DEFAULT_KEYS) if steps else "no step lines in the log")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
