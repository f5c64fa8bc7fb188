#!/usr/bin/env python3
"""Build the offline wheel bundle for the GPU host (no network there).


1. Downloads every pin of requirements.lock ([core] + [verl]) for
   CPython 3.12 / manylinux x86_64 with `pip download --no-deps --only-binary=:all:` into OUT/raw
   (pure-Python packages marked `!sdist` are built with `pip wheel`).
2. Repacks sglang-kernel without the parts an H200 does not load (see STRIP below) into OUT/dist;
   every other wheel is linked into OUT/dist unchanged.
3. Splits each wheel into parts of at most --part-mb MiB under OUT/parts (a wheel that fits stays
   whole) and writes OUT/parts/SHA256SUMS (of the whole wheels, checked by install.sh after
   reassembly) and OUT/SIZES.tsv.

Then scripts/offline_bundle/carry_plan.sh groups OUT/parts into batches for the device tool, and
scripts/offline_bundle/install.sh reassembles and installs them on the device.
"""
from __future__ import annotations

import argparse
import fnmatch
import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LOCK = os.path.join(HERE, "requirements.lock")

PY_VERSION = "3.12"
# pip matches manylinux_2_N exactly, so list every N the host's glibc (>= 2.34) can run.
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (34, 31, 28, 27, 24, 18, 17)] + [
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]

# Parts of three wheels that nothing on this path loads (measured sizes are compressed):
# - sglang-kernel 0.4.2.post2 (322 MB wheel, 1.1 GiB unpacked): on sm90 sgl_kernel loads
#   sm90/common_ops only; flash_ops (FA3, 1022 MiB unpacked, used only by attention_backend=fa3),
#   flashmla_ops (MLA models), sm100/common_ops (Blackwell / no GPU) and the static mscclpp archives
#   (for C++ linking) are dropped.
# - ray 2.60.0: ray/jars/ray_dist.jar (30.7 MB, Java workers) and the dashboard's web client.
# - xgrammar 0.2.0: xgrammar/lib/libxgrammar.a (29.7 MB, static library for C++ users).
STRIP = {
    "sglang_kernel": [
        "sgl_kernel/flash_ops.abi3.so",
        "sgl_kernel/flashmla_ops.abi3.so",
        "sgl_kernel/sm100/*",
        "lib/*.a",
    ],
    "ray": ["ray/jars/*", "ray/dashboard/client/build/*"],
    "xgrammar": ["xgrammar/lib/*.a"],
    # triton (only in a bundle that carries its own torch, requirements-sglang0.5.23.lock): the Blackwell ptxas,
    # nvdisasm (disassembly only) and the static CUPTI/nvperf archives (for C++ linking).
    "triton": [
        "triton/backends/nvidia/bin/ptxas-blackwell",
        "triton/backends/nvidia/bin/nvdisasm",
        "triton/backends/nvidia/lib/cupti/*.a",
    ],
}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def read_lock(groups, lock=LOCK):
    """Pins of the given [groups] of a lock file; groups=None takes every group in the file."""
    pins, group = [], None
    with open(lock) as f:
        for raw in f:
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.fullmatch(r"\[(\w+)\]", line)
            if m:
                group = m.group(1)
                continue
            if groups is not None and group not in groups:
                continue
            sdist = line.endswith("!sdist")
            spec = line.replace("!sdist", "").strip()
            name, version = spec.split("==")
            pins.append((name.strip(), version.strip(), sdist))
    return pins


def bundle_groups(lock):
    """The groups the bundle installs from ``lock``: the default lock keeps its historical [core] + [verl]; another
    lock is read whole ([torch], [core], [verl], ...). None stands for every group."""
    return {"core", "verl"} if os.path.abspath(lock) == LOCK else None


def find_wheel(directory, name, version):
    prefix = f"{norm(name)}-{version}-".lower()
    hits = [f for f in os.listdir(directory) if f.endswith(".whl") and f.lower().startswith(prefix)]
    return os.path.join(directory, sorted(hits)[0]) if hits else None


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(pins, raw):
    os.makedirs(raw, exist_ok=True)
    for name, version, sdist in pins:
        if find_wheel(raw, name, version):
            continue
        spec = f"{name}=={version}"
        if sdist:
            cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", raw, spec]
        else:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--python-version", PY_VERSION, "--implementation", "cp", "-d", raw, spec]
            for p in PLATFORMS:
                cmd += ["--platform", p]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        if not find_wheel(raw, name, version):
            sys.exit(f"no wheel for {spec} in {raw} after download")


def assemble(pins, raw, dist):
    if os.path.isdir(dist):
        shutil.rmtree(dist)
    os.makedirs(dist)
    wheels = []
    for name, version, _ in pins:
        src = find_wheel(raw, name, version)
        dst = os.path.join(dist, os.path.basename(src))
        globs = STRIP.get(norm(name))
        if globs and not any(fnmatch.fnmatch(n, g) for n in zipfile.ZipFile(src).namelist() for g in globs):
            globs = None  # e.g. xgrammar 0.2.7 ships no static library: nothing to strip, keep it as published
        if globs:
            subprocess.run([sys.executable, os.path.join(HERE, "strip_wheel.py"), src, dst, *globs], check=True)
        else:
            os.link(src, dst)
        wheels.append(dst)
    names = [norm(os.path.basename(w).split("-")[0]) for w in wheels]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        sys.exit(f"two versions of {sorted(dup)} in the bundle")
    return wheels


def split(wheels, parts, part_mb):
    if os.path.isdir(parts):
        shutil.rmtree(parts)
    os.makedirs(parts)
    limit = part_mb * 2**20
    sums = []
    for w in wheels:
        base = os.path.basename(w)
        sums.append(f"{sha256(w)}  {base}")
        size = os.path.getsize(w)
        if size <= limit:
            os.link(w, os.path.join(parts, base))
            continue
        with open(w, "rb") as f:
            i = 0
            while True:
                chunk = f.read(limit)
                if not chunk:
                    break
                with open(os.path.join(parts, f"{base}.part{i:02d}"), "wb") as g:
                    g.write(chunk)
                i += 1
    with open(os.path.join(parts, "SHA256SUMS"), "w") as f:
        f.write("\n".join(sums) + "\n")


def report(wheels, out):
    rows = sorted(((os.path.getsize(w), os.path.basename(w)) for w in wheels), reverse=True)
    total = sum(s for s, _ in rows)
    with open(os.path.join(out, "SIZES.tsv"), "w") as f:
        f.write("bytes\tMiB\twheel\n")
        for s, n in rows:
            f.write(f"{s}\t{s / 2**20:.2f}\t{n}\n")
        f.write(f"{total}\t{total / 2**20:.2f}\tTOTAL ({len(rows)} wheels)\n")
    print(f"{len(rows)} wheels, {total / 2**20:.1f} MiB; largest:")
    for s, n in rows[:8]:
        print(f"  {s / 2**20:7.2f} MiB  {n}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, ".whl"))
    ap.add_argument("--part-mb", type=int, default=50)
    ap.add_argument("--lock", default=LOCK,
                    help="lock file (default requirements.lock, SGLang 0.5.12); e.g. requirements-sglang0.5.23.lock "
                         "with --out .whl/sglang-0.5.23")
    args = ap.parse_args()
    pins = read_lock(bundle_groups(args.lock), args.lock)
    raw, dist, parts = (os.path.join(args.out, d) for d in ("raw", "dist", "parts"))
    fetch(pins, raw)
    wheels = assemble(pins, raw, dist)
    split(wheels, parts, args.part_mb)
    report(wheels, args.out)


if __name__ == "__main__":
    main()
