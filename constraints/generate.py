#!/usr/bin/env python3
"""Write the constraints file of each tested verl x SGLang pair from the lock its GPU runs install.

    python constraints/generate.py            # (re)write constraints/verl<V>-sglang<S>.txt, one per lock
    python constraints/generate.py --check    # exit 1 if a file is missing or stale

The pins are every group the offline bundle installs from the lock, read with its own reader
(scripts/offline_bundle/build.py: read_lock), so the constraints and the bundle cannot disagree. From the lock's header:
- the host's torch, torchvision and triton (preinstalled on the GPU host, so not among the pins) where the lock carries
  none: `import sglang` imports all three (srt/utils/common.py), and an install of SGLang with --no-deps brings
  neither torchvision nor triton, so a machine without them gets them from these pins;
- ``# no-deps: NAME...``: packages whose own metadata pins a stack verl cannot resolve (sglang 0.5.12 pins
  transformers==5.6.0, which verl 0.9.1 excludes), marked ``# --no-deps`` and left out of the pair's extra; the lock
  pins what they need;
- ``# no-deps keep-requires: NAME...``: the same mark, for a package whose other requirements must still be installed
  (verl 0.9.1 beside SGLang 0.5.18's transformers 5.12.1 or 0.5.23's 5.19). No resolver can install such a pair with
  this plugin (whose own requirement on verl brings verl's ranges back), so the pair gets a requirements file too,
  constraints/requires/<pair>.txt: the pins but the --no-deps ones, plus those packages' other requirements (read from
  their installed metadata, or their wheels in .whl/). Its header says the two commands.
The default pair's file (requirements.lock's) says ``# extra: gpu``: setup.py makes its pins the ``gpu`` extra.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import re
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUNDLE = ROOT / "scripts" / "offline_bundle"
BUILD = BUNDLE / "build.py"
LOCK = BUNDLE / "requirements.lock"  # the default pair's: the `gpu` extra
LOCKS = (LOCK, BUNDLE / "requirements-sglang0.5.18.lock", BUNDLE / "requirements-sglang0.5.23.lock")
# Preinstalled on the GPU host (the lock's header names their versions); the GPU runs used them.
HOST_PACKAGES = ("torch", "torchvision", "triton")
NO_DEPS_MARK = "# --no-deps"
EXTRA_MARK = "# extra:"
DEFAULT_EXTRA = "gpu"


def _bundle_reader() -> ModuleType:
    """build.py is a script, not a package module: load it by path for its read_lock."""
    spec = importlib.util.spec_from_file_location("_vsl_offline_bundle_build", BUILD)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _header(lock_text: str) -> str:
    """The leading comment block of a lock."""
    lines = []
    for line in lock_text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines)


def host_pins(lock_text: str, lock: Path = LOCK) -> dict[str, str]:
    """The host's versions of HOST_PACKAGES, as the lock's header comment states them (`torch 2.11.0+cu130`,
    `torchvision 0.26.0`)."""
    text, pins = _header(lock_text), {}
    for name in HOST_PACKAGES:
        m = re.search(rf"\b{re.escape(name)} (\d+(?:\.\d+)+)", text)
        if not m:
            raise SystemExit(f"{lock}: its header names no version of the host's {name}")
        pins[name] = m.group(1)
    return pins


def no_deps(lock_text: str) -> tuple[list[str], list[str]]:
    """(packages installed --no-deps, those of them whose other requirements are kept), from the lock's header."""
    marked, keep = [], []
    for m in re.finditer(r"^# no-deps( keep-requires)?: (.+)$", _header(lock_text), re.M):
        names = [_norm(n) for n in m.group(2).split()]
        marked += names
        keep += names if m.group(1) else []
    return marked, keep


def _declared_requirements(name: str, version: str) -> list[str]:
    """``Requires-Dist`` of ``name==version``: the installed distribution's, else its wheel's under .whl/."""
    try:
        dist = md.distribution(name)
        if dist.version == version:
            return list(dist.requires or [])
    except md.PackageNotFoundError:
        pass
    for wheel in sorted((ROOT / ".whl").glob(f"**/{name.replace('-', '_')}-{version}-*.whl")):
        return wheel_requirements(wheel)
    raise SystemExit(f"the requirements of {name}=={version} are needed: install it "
                     f"(pip install --no-deps {name}=={version}) or build the bundle into .whl/, then run this again")


def wheel_requirements(wheel: Path) -> list[str]:
    """``Requires-Dist`` of a wheel, from its METADATA."""
    with zipfile.ZipFile(wheel) as z:
        metas = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        if len(metas) != 1:
            raise SystemExit(f"{wheel}: expected one .dist-info/METADATA, found {metas}")
        text = z.read(metas[0]).decode()
    return re.findall(r"^Requires-Dist: (.+)$", text, re.M)


def unmet_requirements(name: str, version: str, chosen: dict[str, str],
                       declared: list[str] | None = None) -> tuple[list[Any], list[str]]:
    """(the unconditional requirements of ``name==version`` that ``chosen`` meets or does not name, one line per
    requirement it does not meet): what a --no-deps install of it leaves to the rest of the set. ``declared``: its
    ``Requires-Dist`` lines where the caller has them (else its installed metadata or its wheel in .whl/)."""
    from packaging.requirements import Requirement

    met, unmet = [], []
    for raw in declared if declared is not None else _declared_requirements(name, version):
        req = Requirement(raw)
        if req.marker is not None and "extra" in str(req.marker):
            continue  # an optional extra of that package
        have = chosen.get(_norm(req.name))
        if have is not None and req.specifier and not req.specifier.contains(have, prereleases=True):
            unmet.append(f"{name} {version} requires {req.name}{req.specifier}; this set has {req.name}=={have}")
        else:
            met.append(req)
    return met, unmet


def render(lock: Path = LOCK) -> dict[Path, str]:
    """{path: text} of the pair's files: its constraints file, and its requirements file where the lock keeps the
    requirements of a --no-deps package."""
    lock_text = lock.read_text()
    reader = _bundle_reader()
    groups = reader.bundle_groups(str(lock))
    pins = {_norm(name): version for name, version, _sdist in reader.read_lock(groups, lock)}
    torch_from = "the torch it carries" if "torch" in pins else "the host packages its header names"
    for name, version in host_pins(lock_text, lock).items():
        pins.setdefault(_norm(name), version)  # a lock that carries its own torch keeps it
    marked, keep = no_deps(lock_text)
    missing = [n for n in ("verl", "sglang", *marked) if n not in pins]
    if missing:
        raise SystemExit(f"{lock}: no pin for {missing}")
    pair = f"verl{pins['verl']}-sglang{pins['sglang']}"
    constraints, requires = f"constraints/{pair}.txt", f"constraints/requires/{pair}.txt"
    head = [f"# verl {pins['verl']} + SGLang {pins['sglang']}: the set the offline bundle installs "
            "(docs/install.md says which pairs ran on a GPU).",
            f"# Generated by constraints/generate.py from scripts/offline_bundle/{lock.name} "
            f"({'[core] + [verl]' if groups else 'every group'}) and",
            f"# {torch_from}; do not edit (tests/test_packaging_on_cpu.py checks it is current)."]
    if keep:
        use = [f"#   pip install -c {constraints} -r {requires}",
               f"#   pip install --no-deps -c {constraints} {' '.join(marked)} .   # . = this plugin"]
    else:
        use = [f"#   pip install '.[{DEFAULT_EXTRA}]' -c {constraints}",
               f"#   pip install --no-deps -c {constraints} {' '.join(marked)}"]
    lines = head + ([f"{EXTRA_MARK} {DEFAULT_EXTRA}"] if lock == LOCK else []) + ["# Use (README, Install):", *use]
    for pkg in sorted(pins):
        line = f"{pkg}=={pins[pkg]}"
        lines.append(f"{line}  {NO_DEPS_MARK}" if pkg in marked else line)
    files = {ROOT / constraints: "\n".join(lines) + "\n"}
    if keep:
        req = [head[0].replace("the set the offline bundle installs", "what pip installs with its resolver"),
               head[1], head[2], "# Use (README, Install):", *use]
        req += [f"{pkg}=={pins[pkg]}" for pkg in sorted(pins) if pkg not in marked]
        for package in keep:
            kept, overridden = unmet_requirements(package, pins[package], pins)
            req += [f"# {package}'s own requirements (installed --no-deps); overridden: {o}" for o in overridden]
            req += [str(r) for r in kept if _norm(r.name) not in pins or r.extras]  # pinned above, but its extras
        files[ROOT / requires] = "\n".join(req) + "\n"
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only check that the files are current")
    args = ap.parse_args(argv)
    stale = 0
    for lock in LOCKS:
        for path, text in render(lock).items():
            if not args.check:
                path.parent.mkdir(exist_ok=True)
                path.write_text(text)
                print(f"wrote {path.relative_to(ROOT)}")
            elif not path.is_file() or path.read_text() != text:
                print(f"{path.relative_to(ROOT)} is stale or missing: run python constraints/generate.py",
                      file=sys.stderr)
                stale += 1
            else:
                print(f"{path.relative_to(ROOT)} is current")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
