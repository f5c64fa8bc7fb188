#!/usr/bin/env bash
# Prepare .cache/megatron_bridge/VERSION/: megatron-bridge VERSION with the transformers SGLang 0.5.23 pins (and
# the tokenizers that transformers declares), plus the Megatron carry's megatron-core, nvidia-modelopt and pulp,
# `pip install --no-deps --target`, for the CPU tests of the Megatron path under that transformers
# (tests/test_bridge_registrations_on_cpu.py, tests/test_megatron_bridge_lora_on_cpu.py):
#
#   bash scripts/megatron_bridge_release.sh 0.5.1
#
# The pins are read from the GPU bundle's locks (the Megatron carry's, SGLang 0.5.23's transformers): the set that
# meets on the H200. scipy (modelopt imports it; the GPU image has its own, so no lock names it) is pinned here.
# megatron-bridge declares Python >= 3.12 (the GPU host's); its code on the tested path runs on the venv's 3.11
# (the test supplies typing.override), so the wheel is installed with --ignore-requires-python.
# Idempotent (a stamp records the inputs). VSL_FORCE=1 rebuilds.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MEGATRON_LOCK="$ROOT/scripts/offline_bundle/requirements-megatron.lock"
SGLANG_LOCK="$ROOT/scripts/offline_bundle/requirements-sglang0.5.23.lock"
pin() { sed -n "s/^\($2==[^ ]*\).*/\1/p" "$1" | head -1; }
VERSION="${1:-$(pin "$MEGATRON_LOCK" megatron-bridge | cut -d= -f3)}"
VPY="$ROOT/.venv/bin/python"
TARGET="$ROOT/.cache/megatron_bridge/$VERSION"
STAMP="$TARGET/.vsl_release_stamp"
# shellcheck source=cpu_env/release_dir.sh
source "$ROOT/scripts/cpu_env/release_dir.sh"

log() { printf '[megatron_bridge_release %s %s] %s\n' "$VERSION" "$(date +%H:%M:%S)" "$*"; }
die() { printf '[megatron_bridge_release %s] ERROR: %s\n' "$VERSION" "$*" >&2; exit 1; }
[ -x "$VPY" ] || die "no $VPY: run scripts/setup_cpu_env.sh first"
TRANSFORMERS="$(pin "$SGLANG_LOCK" transformers)"
[ -n "$TRANSFORMERS" ] || die "no transformers== pin in $SGLANG_LOCK"
MEGATRON_PINS=()
for dist in megatron-core nvidia-modelopt pulp; do
  p="$(pin "$MEGATRON_LOCK" "$dist")"
  [ -n "$p" ] || die "no $dist== pin in $MEGATRON_LOCK"
  MEGATRON_PINS+=("$p")
done
SCIPY="scipy==1.17.1"

want_stamp="$(release_stamp "$0" "$ROOT/scripts/cpu_env/release_dir.sh" "$MEGATRON_LOCK" "$SGLANG_LOCK")"
if release_up_to_date "$want_stamp"; then
  log "up to date ($TARGET)"
  exit 0
fi
t0=$SECONDS
release_begin
# one pip call: megatron-bridge and megatron-core share the top-level megatron/ (a second --target call skips it)
log "pip install --no-deps --target $TMP megatron-bridge==$VERSION ${MEGATRON_PINS[*]} $SCIPY (Python >= 3.12 not enforced)"
release_pip --ignore-requires-python "megatron-bridge==$VERSION" "${MEGATRON_PINS[@]}" "$SCIPY"
log "pip install --no-deps --target $TMP $TRANSFORMERS"
release_pip "$TRANSFORMERS"
TOKENIZERS="$(sed -n 's/^Requires-Dist: \(tokenizers[^;]*\)$/\1/p' "$TMP"/transformers-*.dist-info/METADATA | head -1 | tr -d ' ')"
[ -n "$TOKENIZERS" ] || die "transformers in $TMP declares no tokenizers requirement"
log "pip install --no-deps --target $TMP $TOKENIZERS (transformers' own requirement)"
release_pip "$TOKENIZERS"
rm -rf "$TMP/bin"
found="$(release_dist_version "$TMP" megatron_bridge || true)"
[ "$found" = "$VERSION" ] || die "installed megatron-bridge $found into $TMP, expected $VERSION"
found="$(release_dist_version "$TMP" megatron_core || true)"
[ "$found" = "${MEGATRON_PINS[0]#megatron-core==}" ] || die "installed megatron-core $found into $TMP, expected ${MEGATRON_PINS[0]}"
[ -d "$TMP/megatron/core" ] && [ -d "$TMP/megatron/bridge" ] || die "$TMP/megatron lacks core/ or bridge/"
release_finish "$want_stamp"
log "ready in $((SECONDS - t0))s: $TARGET ($(ls -d "$TARGET"/*.dist-info | xargs -n1 basename | tr '\n' ' '))"
