#!/usr/bin/env python3
"""Does a tested pair's install recipe resolve, from the package index, to exactly the pins of its constraints file?

    python constraints/check_resolve.py --python python3.12 [--json OUT] [PAIR ...]   # default: every pair

For each pair it runs the recipe's resolver step as a dry run (``pip install --dry-run --ignore-installed --report``,
nothing installed) with the given interpreter -- the GPU host's Python, since SGLang's wheels are per interpreter --
and compares what pip would install with the file's pins: every pin that is not ``--no-deps`` must be chosen at its
version. The ``--no-deps`` packages are installed by the recipe's second step without a resolve, so they are only
listed. Needs the package index; not part of the CPU suite.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NO_DEPS_MARK = "# --no-deps"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(constraints: Path) -> tuple[dict[str, str], list[str]]:
    """({name: version} resolved by pip, [names installed --no-deps]) of a constraints file."""
    resolved, no_deps = {}, []
    for raw in constraints.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, version = line.split("#", 1)[0].strip().split("==")
        if NO_DEPS_MARK in line:
            no_deps.append(_norm(name))
        else:
            resolved[_norm(name)] = version
    return resolved, no_deps


def resolver_step(constraints: Path) -> list[str]:
    """The recipe's resolver step, as pip arguments: the requirements file where the pair has one, else the extra."""
    requires = HERE / "requires" / constraints.name
    if requires.is_file():
        return ["-c", str(constraints), "-r", str(requires)]
    return ["-c", str(constraints), f"{ROOT}[gpu]"]


def check(python: str, constraints: Path) -> dict:
    wanted, no_deps = pins(constraints)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
               *resolver_step(constraints)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            return {"pair": constraints.stem, "resolves": False, "error": proc.stderr.strip()[-2000:]}
        chosen = {_norm(item["metadata"]["name"]): item["metadata"]["version"]
                  for item in json.loads(report.read_text())["install"]}
    off = {n: {"pinned": v, "chosen": chosen.get(n)} for n, v in wanted.items() if chosen.get(n) != v}
    return {"pair": constraints.stem, "resolves": True, "pins": len(wanted), "pins_off": off,
            "installed": len(chosen), "beyond_pins": sorted(set(chosen) - set(wanted) - {"verl-sglang-lora"}),
            "no_deps_step": no_deps, "no_deps_already_chosen": sorted(n for n in no_deps if n in chosen)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="the interpreter whose pip resolves (the GPU host's)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("pairs", nargs="*", help="e.g. verl0.9.1-sglang0.5.23 (default: every constraints file)")
    args = ap.parse_args(argv)
    files = [HERE / f"{p}.txt" for p in args.pairs] or sorted(HERE.glob("verl*-sglang*.txt"))
    results = [check(args.python, f) for f in files]
    print(f"{'pair':28} {'resolves':8} {'pins':>4} {'off':>3} {'installed':>9}  no-deps step")
    for r in results:
        if not r["resolves"]:
            print(f"{r['pair']:28} {'no':8}  {r['error'].splitlines()[-1]}")
            continue
        print(f"{r['pair']:28} {'yes':8} {r['pins']:>4} {len(r['pins_off']):>3} {r['installed']:>9}  "
              f"{' '.join(r['no_deps_step'])}")
        for name, v in r["pins_off"].items():
            print(f"    {name}: pinned {v['pinned']}, pip chose {v['chosen']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(r["resolves"] and not r["pins_off"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
