#!/usr/bin/env python3
"""Does a tested pair's install recipe resolve, from the package index, to exactly the pins of its constraints file?

    python constraints/check_resolve.py --python python3.12 [--json OUT] [PAIR ...]   # default: every pair

For each pair it runs the recipe's resolver step as a dry run (``pip install --dry-run --ignore-installed --report``,
nothing installed) with the given interpreter -- the GPU host's Python, since SGLang's wheels are per interpreter.
The pins are exact, so a resolve that succeeds chooses them; what this adds is whether it succeeds, what it brings
beyond the pins (versions no GPU run used: the runs used the offline bundle over the host image), and, for the
``--no-deps`` packages the recipe's second step installs without a resolve, which of their declared requirements the
chosen set does not meet (read from their published wheels, downloaded without deps). A pair whose requirements
file names what it overrides fails when another requirement is unmet. Needs the package index; not in the CPU suite.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]  # generate.py (a script beside this one) and the package of this checkout

import generate as GEN  # noqa: E402 - the name rule, the declared requirements
from verl_sglang_lora.tools.gpu_env import requires_file  # noqa: E402
from verl_sglang_lora.tools.preflight import tested_set  # noqa: E402

_norm = GEN._norm


def pins(constraints: Path) -> tuple[dict[str, str], dict[str, str]]:
    """({name: version} resolved by pip, {name: version} installed --no-deps) of a constraints file (read as the
    examples' package check reads it)."""
    resolved, no_deps = {}, {}
    for pin in tested_set(constraints):
        (no_deps if pin.no_deps else resolved)[_norm(pin.name)] = pin.version
    return resolved, no_deps


def resolver_step(constraints: Path) -> list[str]:
    """The recipe's resolver step, as pip arguments: the requirements file where the pair has one, else the extra
    (the same choice as the examples' set-up, tools/gpu_env.py)."""
    requires = requires_file(constraints)
    return ["-c", str(constraints), *(["-r", str(requires)] if requires else [f"{ROOT}[gpu]"])]


def declared_requirements(python: str, name: str, version: str) -> list[str]:
    """``Requires-Dist`` of ``name==version`` as published: its wheel for that interpreter, downloaded without deps."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([python, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, f"{name}=={version}"],
                              capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise SystemExit(f"pip download {name}=={version} failed: {proc.stderr.strip()[-500:]}")
        return GEN.wheel_requirements(wheels[0])


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
    versions = {**chosen, **no_deps}
    unmet = [u for name, v in no_deps.items()
             for u in GEN.unmet_requirements(name, v, versions, declared_requirements(python, name, v))[1]]
    requires = requires_file(constraints)
    declared = ([line.split("overridden: ", 1)[1] for line in requires.read_text().splitlines() if "overridden: " in line]
                if requires else None)
    return {"pair": constraints.stem, "resolves": True, "pins": len(wanted), "pins_off": off,
            "installed": len(chosen), "beyond_pins": sorted(set(chosen) - set(wanted) - {"verl-sglang-lora"}),
            "no_deps_step": sorted(no_deps), "no_deps_already_chosen": sorted(n for n in no_deps if n in chosen),
            "no_deps_unmet": unmet, "unmet_declared": declared,
            "ok": not off and (declared is None or sorted(unmet) == sorted(declared))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="the interpreter whose pip resolves (the GPU host's)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("pairs", nargs="*", help="e.g. verl0.9.1-sglang0.5.23 (default: every constraints file)")
    args = ap.parse_args(argv)
    files = [HERE / f"{p}.txt" for p in args.pairs] or sorted(HERE.glob("verl*-sglang*.txt"))
    results = [check(args.python, f) for f in files]
    print(f"{'pair':24} {'resolves':8} {'pins':>4} {'off':>3} {'beyond pins':>11}  --no-deps step: requirements unmet")
    for r in results:
        if not r["resolves"]:
            print(f"{r['pair']:24} {'no':8}  {r['error'].splitlines()[-1]}")
            continue
        print(f"{r['pair']:24} {'yes':8} {r['pins']:>4} {len(r['pins_off']):>3} {len(r['beyond_pins']):>11}  "
              f"{' '.join(r['no_deps_step'])}: {len(r['no_deps_unmet'])}")
        for name, v in r["pins_off"].items():
            print(f"    {name}: pinned {v['pinned']}, pip chose {v['chosen']}")
        for line in r["no_deps_unmet"]:
            said = "" if r["unmet_declared"] is None else (" (declared)" if line in r["unmet_declared"] else
                                                            " (NOT declared in its requirements file)")
            print(f"    {line}{said}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(r["resolves"] and r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
