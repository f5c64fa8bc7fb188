#!/usr/bin/env bash
# Optional: prepare .cache/verl/VERSION/, a `pip install --no-deps --target` dir of one verl
# release, used with the main .venv's python (its deps: numpy 2, transformers 5.10, ...):
#
#   bash scripts/verl_release_env.sh 0.8.0
#   PYTHONPATH=.cache/verl/0.8.0 .venv/bin/python -c 'import verl; print(verl.__version__)'
#
# Good for registration and Hydra-composition tests of verl 0.8.0 / 0.9.0 (checked by the compat probe of
# tests/test_compat_matrix_on_cpu.py; VSL_RELEASE_PROBE=1 also runs scripts/cpu_env/verl_probe.py: import verl,
# both rollout registries, compose ppo_trainer and ppo_megatron_trainer).  Not a faithful runtime for training: 0.8.0 declares numpy<2 and runs
# here against numpy 2.x and transformers 5.x.  Idempotent; VSL_FORCE=1 rebuilds.
set -euo pipefail

VERSION="${1:?usage: scripts/verl_release_env.sh VERSION   (0.8.0, 0.9.0, 0.9.1)}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VPY="$ROOT/.venv/bin/python"
TARGET="$ROOT/.cache/verl/$VERSION"
STAMP="$TARGET/.vsl_release_stamp"
# shellcheck source=cpu_env/release_dir.sh
source "$ROOT/scripts/cpu_env/release_dir.sh"
log() { printf '[verl_release_env %s %s] %s\n' "$VERSION" "$(date +%H:%M:%S)" "$*"; }
die() { printf '[verl_release_env %s] ERROR: %s\n' "$VERSION" "$*" >&2; exit 1; }
[ -x "$VPY" ] || die "no $VPY: run scripts/setup_cpu_env.sh first"

want_stamp="$(release_stamp "$ROOT/scripts/verl_release_env.sh" "$ROOT/scripts/cpu_env/release_dir.sh")"
if release_up_to_date "$want_stamp"; then
  log "up to date ($TARGET)"
  exit 0
fi

t0=$SECONDS
release_begin
set +e
if [ "${VSL_INSTALLER:-uv}" = uv ] && [ -x "$ROOT/.venv/bin/uv" ] && [ -f "$ROOT/.venv/vsl-uv-args" ]; then
  # the installer setup_cpu_env.sh chose: uv with pip's indexes
  mapfile -t UV_ARGS < "$ROOT/.venv/vsl-uv-args"
  # shellcheck disable=SC1091
  source "$ROOT/.venv/vsl-uv-args.env"
  UV_COMPILE_BYTECODE=0 "$ROOT/.venv/bin/uv" pip install -q --python "$VPY" "${UV_ARGS[@]}" --no-deps --target "$TMP" \
    "${find_links[@]+"${find_links[@]}"}" "verl==$VERSION" 2>&1
else
  "$VPY" -m pip --disable-pip-version-check install -q --progress-bar off --no-deps --no-compile \
    --target "$TMP" "${find_links[@]+"${find_links[@]}"}" "verl==$VERSION" 2>&1 | grep -v "^WARNING: Location 'file:///"
fi
st=("${PIPESTATUS[@]}")
set -e
[ "${st[0]}" -eq 0 ] || die "install --target failed"
rm -rf "$TMP/bin"
t_install=$((SECONDS - t0))

# checked where it is used: the compat probe of tests/test_compat_matrix_on_cpu.py imports this release, its
# registries and both trainer configs (VSL_RELEASE_PROBE=1: scripts/cpu_env/verl_probe.py here too)
found="$(release_dist_version "$TMP" verl || true)"
[ "$found" = "$VERSION" ] || die "installed verl $found into $TMP, expected $VERSION"
if [ "${VSL_RELEASE_PROBE:-0}" = 1 ]; then
  if ! PYTHONPATH="$TMP" "$VPY" "$ROOT/scripts/cpu_env/verl_probe.py" --expect "$VERSION" \
        >"$TMP/probe.json" 2>"$TMP/probe.err"; then
    cat "$TMP/probe.json" >&2 || true
    tail -30 "$TMP/probe.err" >&2 || true
    die "probe failed for verl $VERSION"
  fi
fi
release_finish "$want_stamp"
log "ready in $((SECONDS - t0))s (install ${t_install}s): $TARGET"
