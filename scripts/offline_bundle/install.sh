#!/usr/bin/env bash
# Device side: reassemble the carried wheel parts and install them, offline, into a target dir.
#
#   bash scripts/offline_bundle/install.sh [WHL_DIR=/tmp/whl] [TARGET=/tmp/site]
#   export PYTHONPATH=/tmp/site        # in every later command (the target shadows the host's
#                                      # transformers 5.17 / tokenizers 0.23.2)
#
# WHL_DIR holds what carry_plan.sh's batches put there: whole wheels, NAME.whl.partNN pieces and
# SHA256SUMS (sha256 of every whole wheel). Each wheel is checked after reassembly; nothing is
# fetched and no dependency is resolved (--no-index --no-deps): the lock file is the resolution.
set -euo pipefail
SRC=${1:-/tmp/whl}
TARGET=${2:-/tmp/site}
cd "$SRC"
[ -f SHA256SUMS ] || { echo "install.sh: $SRC/SHA256SUMS missing (last batch not copied?)" >&2; exit 1; }
rm -rf wheels && mkdir wheels
shopt -s nullglob
for first in *.whl.part00; do
    base=${first%.part00}
    cat "$base".part[0-9][0-9] > "wheels/$base"
done
for w in *.whl; do
    ln -f "$w" "wheels/$w" 2>/dev/null || cp "$w" "wheels/$w"
done
(cd wheels && sha256sum -c --quiet ../SHA256SUMS)
have=$(ls wheels/*.whl | wc -l)
want=$(grep -c . SHA256SUMS)
[ "$have" = "$want" ] || { echo "install.sh: $have wheels here, SHA256SUMS lists $want" >&2; exit 1; }
${PYTHON:-python3} -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$TARGET" wheels/*.whl 2>&1 | grep -v "^WARNING: Target directory" || true
${PYTHON:-python3} - "$TARGET" <<'PY'
import sys, importlib.metadata as md
sys.path.insert(0, sys.argv[1])
names = ["sglang", "sglang-kernel", "transformers", "tokenizers", "verl", "ray", "torch"]
def v(n):
    try:
        return md.version(n)
    except md.PackageNotFoundError:
        return "MISSING"
print("installed:", ", ".join(f"{n}=={v(n)}" for n in names))
PY
# a .pth in the target (nvidia-cutlass-dsl's) is not run from PYTHONPATH: its directory goes on the path too
extra=""; [ -d "$TARGET/nvidia_cutlass_dsl/dsl_packages" ] && extra="$TARGET/nvidia_cutlass_dsl/dsl_packages:"
echo "install.sh: $have wheels in $TARGET; now: export PYTHONPATH=$extra$TARGET"
