#!/usr/bin/env bash
# Fetch the Megatron stack for the air-gapped GPU host (docs/megatron_gpu.md) and group it into carry batches.
#   bash scripts/device/megatron_carry.sh [OUT_DIR=.whl/mcore] [LIMIT_MIB=58]
# The wheels are scripts/offline_bundle/requirements-megatron.lock, fetched, split into parts and checksummed by
# build.py as the SGLang bundle is; TransformerEngine's PyTorch extension exists only as an sdist, added here. Writes
# OUT_DIR/{raw,dist,parts,m0,m1,...}: every batch fits one device call beside the repo; each call copies its batch
# into /tmp/mcore (cp -a .whl/mcore/mN/. /tmp/mcore/), which megatron_stack.sh build-bg / run read.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${1:-$ROOT/.whl/mcore}
LIMIT_MIB=${2:-58}
PY=${PYTHON:-python3}
"$PY" "$ROOT/scripts/offline_bundle/build.py" --lock "$ROOT/scripts/offline_bundle/requirements-megatron.lock" \
    --out "$DEST" --part-mb "$LIMIT_MIB"
# the sdist straight from the index's simple page (pip download would build its metadata, which needs CUDA torch),
# its sha256 checked against the index's and added to the parts' SHA256SUMS
"$PY" - "$DEST" transformer-engine-torch 2.17.1 <<'PY'
import hashlib, os, re, sys, urllib.request
dest, name, version = sys.argv[1:]
page = urllib.request.urlopen(f"https://pypi.org/simple/{name}/").read().decode()
fname = f"{name.replace('-', '_')}-{version}.tar.gz"
url, sha = re.search(r'href="([^"]*/' + re.escape(fname) + r')#sha256=([0-9a-f]+)"', page).groups()
path = os.path.join(dest, "raw", fname)
if not os.path.exists(path) or hashlib.sha256(open(path, "rb").read()).hexdigest() != sha:
    data = urllib.request.urlopen(url).read()
    if hashlib.sha256(data).hexdigest() != sha:
        sys.exit(f"{fname}: sha256 differs from the index's")
    open(path, "wb").write(data)
os.link(path, os.path.join(dest, "parts", fname))
with open(os.path.join(dest, "parts", "SHA256SUMS"), "a") as f:
    f.write(f"{sha}  {fname}\n")
print(fname, os.path.getsize(path), "bytes, sha256 matches the index")
PY
BATCH_PREFIX=m DEVICE_DIR=/tmp/mcore INSTALL_HINT="bash scripts/device/megatron_stack.sh build-bg /tmp/mcore" \
    bash "$ROOT/scripts/offline_bundle/carry_plan.sh" "$DEST/parts" "$LIMIT_MIB"
