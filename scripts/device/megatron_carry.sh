#!/usr/bin/env bash
# Fetch the Megatron stack for the air-gapped GPU host (docs/megatron_gpu.md) and group it into carry batches.
#   bash scripts/device/megatron_carry.sh [OUT_DIR=.whl/mcore] [LIMIT_MIB=58]
# Writes OUT_DIR/{all,m0,m1,...}: every batch fits one device call beside the repo; each call copies its batch into
# /tmp/mcore (cp -a .whl/mcore/mN/. /tmp/mcore/), which megatron_stack.sh build-bg / run read. The TE core wheel
# (~233 MiB) goes in parts named *.whl.partNN, which megatron_stack.sh reassembles. TE's PyTorch extension is an
# sdist only; its build needs cudnn-frontend's headers, carried as cudnn_frontend_include.tgz (include/...).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${1:-$ROOT/.whl/mcore}
LIMIT_MIB=${2:-58}
PY=${PYTHON:-python3}
# the versions session 5 ran (megatron-core 0.18.2 + megatron-bridge 0.5.1, the releases verl 0.9.1's Megatron
# engine calls; modelopt is the version verl pins)
WHEELS=(megatron-core==0.18.2 megatron-bridge==0.5.1 nvidia-modelopt==0.44.0 pulp==3.3.2
        transformer-engine==2.17.1 transformer-engine-cu13==2.17.1)
PLAT=()
for n in 34 31 28 27 24 17; do PLAT+=(--platform "manylinux_2_${n}_x86_64"); done
PLAT+=(--platform manylinux2014_x86_64)

mkdir -p "$DEST/raw" "$DEST/all"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" \
    -d "$DEST/raw" "${WHEELS[@]}" nvidia-cudnn-frontend==1.32.0
# the sdist straight from the index's simple page: pip download would build its metadata, which needs CUDA torch
"$PY" - "$DEST/raw" transformer-engine-torch 2.17.1 <<'PY'
import hashlib, os, re, sys, urllib.request
dest, name, version = sys.argv[1:]
page = urllib.request.urlopen(f"https://pypi.org/simple/{name}/").read().decode()
fname = f"{name.replace('-', '_')}-{version}.tar.gz"
url, sha = re.search(r'href="([^"]*/' + re.escape(fname) + r')#sha256=([0-9a-f]+)"', page).groups()
path = os.path.join(dest, fname)
if not os.path.exists(path) or hashlib.sha256(open(path, "rb").read()).hexdigest() != sha:
    data = urllib.request.urlopen(url).read()
    if hashlib.sha256(data).hexdigest() != sha:
        sys.exit(f"{fname}: sha256 differs from the index's")
    open(path, "wb").write(data)
print(fname, os.path.getsize(path), "bytes, sha256 matches the index")
PY

rm -rf "$DEST"/all/*
tmp=$(mktemp -d)
(cd "$tmp" && unzip -q "$DEST"/raw/nvidia_cudnn_frontend-*.whl 'cudnn/include/*' 'nvidia/cudnn_frontend/include/*' 2>/dev/null || \
    unzip -q "$DEST"/raw/nvidia_cudnn_frontend-*.whl)
inc=$(find "$tmp" -name cudnn_frontend.h -printf '%h\n' | head -1)
[ -n "$inc" ] || { echo "no cudnn_frontend.h in the nvidia-cudnn-frontend wheel" >&2; exit 1; }
mkdir -p "$tmp/pack" && cp -r "$inc" "$tmp/pack/include"
tar czf "$DEST/all/cudnn_frontend_include.tgz" -C "$tmp/pack" include
rm -rf "$tmp"

limit=$((LIMIT_MIB * 1024 * 1024))
for f in "$DEST"/raw/*; do
    case $(basename "$f") in nvidia_cudnn_frontend-*) continue ;; esac
    if [ "$(stat -c %s "$f")" -gt "$limit" ]; then
        split -b "$limit" -d -a 2 "$f" "$DEST/all/$(basename "$f").part"
    else
        cp "$f" "$DEST/all/"
    fi
done
BATCH_PREFIX=m DEVICE_DIR=/tmp/mcore bash "$ROOT/scripts/offline_bundle/carry_plan.sh" "$DEST/all" "$LIMIT_MIB"
