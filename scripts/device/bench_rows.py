"""Rows for docs/benchmarks/h200.json from resident_check.py results (one row per measured path).

    python3 scripts/device/bench_rows.py SHAPE=RESULT.json [SHAPE=RESULT.json ...] > docs/benchmarks/h200.json

Each row: shape, rank, path, p50_ms, p95_ms, max_ms, first_batch_penalty_ms (null where not measured), correct
(the byte-exact compare of the in-place slot against SGLang's own load; null for paths it does not apply to),
sglang, n, and for the in-place rows the server-side copy p50.
"""

from __future__ import annotations

import json
import sys

PATHS = {"write": "inplace", "write+checksum": "inplace+checksum", "write+verify": "inplace+verify",
         "d2d_floor": "d2d_copy_floor", "pinned_h2d_floor": "pinned_h2d_copy_floor",
         "sglang_disk_load+first_use": "disk_load+first_use"}
SKIP = ("first_request_after_write", "request_steady_state")  # inputs of the penalty, not paths


def rows(shape: str, result: dict) -> list[dict]:
    out = []
    exact = result.get("checks", {}).get("byte_exact", {}).get("ok")
    penalty = result.get("first_batch_penalty_ms")
    transport = result.get("args", {}).get("transport", "http")
    for label, t in result.get("timings", {}).items():
        if label in SKIP:
            continue
        e = t["end_to_end_ms"]
        path = PATHS.get(label, label)
        out.append({
            "shape": shape, "rank": result["adapter"]["rank"], "path": path, "sglang": result.get("sglang_version"),
            "n": e["n"], "p50_ms": round(e["p50"], 3), "p95_ms": round(e["p95"], 3), "max_ms": round(e["max"], 3),
            # the disk row includes its first use (a 1-token generate); the in-place rows fill no lazy pool
            "first_batch_penalty_ms": round(penalty, 3) if penalty is not None and path.startswith("inplace") else None,
            "correct": exact if path.startswith("inplace") else None,
            "transport": transport, "cuda_graph": bool(result.get("args", {}).get("cuda_graph")),
            **({f"{k}_p50": round(t[k]["p50"], 3) for k in ("server_copy_ms", "server_verify_ms", "client_checksum_ms",
                                                            "loader_total_ms") if k in t}),
        })
    return out


def main(argv: list[str]) -> int:
    table = []
    for arg in argv:
        shape, path = arg.split("=", 1)
        table += rows(shape, json.load(open(path)))
    print(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
