#!/usr/bin/env bash
# Group the files of a parts folder (.whl/parts, from build.py) into batch folders .whl/b0, .whl/b1, ...
# of at most LIMIT_MIB each (default 60: one batch plus this checkout fits a transport that caps one transfer at
# 64 MiB), first-fit decreasing, and print what to run on the GPU host as each batch arrives there.
#
#   bash scripts/offline_bundle/carry_plan.sh [PARTS=.whl/parts] [LIMIT_MIB=60]
#   BATCH_PREFIX=m DEVICE_DIR=/tmp/mcore INSTALL_HINT="bash scripts/device/megatron_stack.sh build-bg /tmp/mcore" \
#       bash scripts/offline_bundle/carry_plan.sh .whl/mcore/parts 58
#
# Batches are written beside PARTS, named BATCH_PREFIX0, BATCH_PREFIX1, ... (default b). Each batch, once copied to
# the host beside the checkout, goes into DEVICE_DIR (default /tmp/whl). Where PARTS has a SHA256SUMS (from
# build.py), it rides in the last batch, whose line then runs INSTALL_HINT (default: install.sh of the wheel bundle
# into /tmp/site); install.sh checks that every part arrived.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PARTS=${1:-$ROOT/.whl/parts}
LIMIT_MIB=${2:-60}
DEVICE_DIR=${DEVICE_DIR:-/tmp/whl}
INSTALL_HINT=${INSTALL_HINT:-bash scripts/offline_bundle/install.sh $DEVICE_DIR /tmp/site && export PYTHONPATH=/tmp/site && ...}
python3 - "$PARTS" "$LIMIT_MIB" "$ROOT" "${BATCH_PREFIX:-b}" "$DEVICE_DIR" "$INSTALL_HINT" <<'PY'
import os, shutil, sys
parts, limit_mib, root, prefix, device_dir, install_hint = sys.argv[1], float(sys.argv[2]), *sys.argv[3:]
limit = int(limit_mib * 2**20)
base = os.path.dirname(os.path.abspath(parts))
for d in os.listdir(base):
    if d.startswith(prefix) and d[len(prefix):].isdigit():
        shutil.rmtree(os.path.join(base, d))
items = sorted(((os.path.getsize(os.path.join(parts, f)), f) for f in os.listdir(parts) if f != "SHA256SUMS"),
               reverse=True)
bins = []  # [used, [files]]
for size, f in items:
    if size > limit:
        sys.exit(f"{f} is {size / 2**20:.1f} MiB, over the {limit_mib} MiB batch limit: rebuild with smaller parts")
    for b in bins:
        if b[0] + size <= limit:
            b[0] += size; b[1].append(f); break
    else:
        bins.append([size, [f]])
sums = os.path.exists(os.path.join(parts, "SHA256SUMS"))
if sums:
    bins[-1][1].append("SHA256SUMS")  # the last batch carries the checksums install.sh needs
for i, (used, files) in enumerate(bins):
    d = os.path.join(base, f"{prefix}{i}")
    os.makedirs(d)
    for f in files:
        os.link(os.path.join(parts, f), os.path.join(d, f))
rel = os.path.relpath(base, root)
total = sum(b[0] for b in bins)
print(f"{len(bins)} batches, {total / 2**20:.1f} MiB in all:")
for i, (used, files) in enumerate(bins):
    print(f"  {rel}/{prefix}{i}: {used / 2**20:5.1f} MiB, {len(files)} files")
print("\non the GPU host, in the checkout, once each batch folder has been copied there (the last one last):")
for i in range(len(bins)):
    src = f"{rel}/{prefix}{i}"
    cmd = f"mkdir -p {device_dir} && cp -a {src}/. {device_dir}/"
    if sums and i == len(bins) - 1:
        cmd += f" && {install_hint}"
    print(f"  {cmd}")
PY
