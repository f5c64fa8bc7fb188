#!/usr/bin/env bash
# Prepare .cache/sglang/VERSION/: a `pip install --no-deps --target` dir of one SGLang release,
# to be used with the main .venv's python:
#
#   bash scripts/sglang_release.sh 0.5.23
#   PYTHONPATH=.cache/sglang/0.5.23 .venv/bin/python -c 'import sglang; print(sglang.__version__)'
#
# Idempotent (a stamp records the inputs; re-run is instant).  VSL_FORCE=1 rebuilds.
# VSL_WHEEL_DIR=/some/dir adds a local --find-links for the sglang wheels (default: PyPI only).
#
# Per release, on top of the main .venv (docs/cpu_environment.md has the evidence):
#   0.5.8   sgl_kernel CPU stub (scripts/cpu_env/sgl_kernel_stub): 0.5.8 imports
#           sgl_kernel.silu_and_mul and sgl_kernel.kvcacheio.* at module level on the
#           io_struct import chain; sgl-kernel is a CUDA-only binary.
#   0.5.12  nothing.
#   0.5.18  xgrammar==0.2.1 + apache-tvm-ffi==0.1.11 (function_call parser imports xgrammar at
#           module level; xgrammar imports tvm_ffi).  Both import fine on CPU.
#   0.5.23  apache-tvm-ffi==0.1.11 (sglang.kernels.ops.communication imports tvm_ffi).
# Those extras go into the target dir (--no-deps, pinned to SGLang's own pins), never into .venv.
set -euo pipefail

VERSION="${1:?usage: scripts/sglang_release.sh VERSION   (0.5.8, 0.5.12, 0.5.18, 0.5.23)}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VPY="$ROOT/.venv/bin/python"
TARGET="$ROOT/.cache/sglang/$VERSION"
STAMP="$TARGET/.vsl_release_stamp"
# shellcheck source=cpu_env/release_dir.sh
source "$ROOT/scripts/cpu_env/release_dir.sh"
# the installer setup_cpu_env.sh chose: uv with pip's indexes (.venv/vsl-uv-args), else pip
UV=""
UV_ARGS=()
if [ "${VSL_INSTALLER:-uv}" = uv ] && [ -x "$ROOT/.venv/bin/uv" ] && [ -f "$ROOT/.venv/vsl-uv-args" ]; then
  UV="$ROOT/.venv/bin/uv"
  mapfile -t UV_ARGS < "$ROOT/.venv/vsl-uv-args"
  # shellcheck disable=SC1091
  source "$ROOT/.venv/vsl-uv-args.env"
fi

log() { printf '[sglang_release %s %s] %s\n' "$VERSION" "$(date +%H:%M:%S)" "$*"; }
die() { printf '[sglang_release %s] ERROR: %s\n' "$VERSION" "$*" >&2; exit 1; }
[ -x "$VPY" ] || die "no $VPY: run scripts/setup_cpu_env.sh first"

EXTRA_PKGS=()
STUB_DIRS=()
case "$VERSION" in
  0.5.8)  STUB_DIRS=("$ROOT/scripts/cpu_env/sgl_kernel_stub/sgl_kernel") ;;
  0.5.12) ;;
  0.5.18) EXTRA_PKGS=("xgrammar==0.2.1" "apache-tvm-ffi==0.1.11") ;;
  0.5.23) EXTRA_PKGS=("apache-tvm-ffi==0.1.11") ;;
  *) log "WARNING: untested release; installing sglang==$VERSION with no extras" ;;
esac

stamp_inputs=("$ROOT/scripts/sglang_release.sh" "$ROOT/scripts/cpu_env/release_dir.sh" "$ROOT/scripts/cpu_env/vsl_cpu_shim.py")
for d in "${STUB_DIRS[@]+"${STUB_DIRS[@]}"}"; do
  while IFS= read -r f; do stamp_inputs+=("$f"); done < <(find "$d" -name '*.py' | sort)
done
want_stamp="$(release_stamp "${stamp_inputs[@]}")"
if release_up_to_date "$want_stamp"; then
  log "up to date ($TARGET)"
  exit 0
fi

t0=$SECONDS
release_begin
pip_target() {
  if [ -z "$UV" ]; then release_pip "$@"; return; fi
  # no bytecode (UV_COMPILE_BYTECODE=0), as pip --no-compile: compiling the whole release costs more (~20 s for 0.5.23
  # on 2 cores) than its test subprocesses gain (~1 s each: torch, transformers and verl come compiled from the venv)
  UV_COMPILE_BYTECODE=0 "$UV" pip install -q --python "$VPY" "${UV_ARGS[@]}" --no-deps --target "$TMP" \
    "${find_links[@]+"${find_links[@]}"}" "$@" 2>&1
}

log "pip install --no-deps --target $TMP sglang==$VERSION ${EXTRA_PKGS[*]+"${EXTRA_PKGS[*]}"}"
pip_target "sglang==$VERSION" "${EXTRA_PKGS[@]+"${EXTRA_PKGS[@]}"}"
rm -rf "$TMP/bin"   # console scripts pointing at .venv's python; not needed
for d in "${STUB_DIRS[@]+"${STUB_DIRS[@]}"}"; do
  log "adding CPU-test stub $(basename "$d") (see its docstring)"
  cp -r "$d" "$TMP/"
done
t_install=$((SECONDS - t0))

# What the release declares is checked where it is used: tests/test_compat_matrix_on_cpu.py imports it through the
# plugin's compat probe (a broken dir fails those tests with the probe's traceback; an import check here as well cost
# ~8 CPU-s per release, the same imports again). VSL_RELEASE_PROBE=1 runs scripts/cpu_env/sglang_probe.py here too.
found="$(release_dist_version "$TMP" sglang || true)"
[ "$found" = "$VERSION" ] || die "installed sglang $found into $TMP, expected $VERSION"
if [ "${VSL_RELEASE_PROBE:-0}" = 1 ]; then
  log "verifying with scripts/cpu_env/sglang_probe.py"
  if ! PYTHONPATH="$TMP" "$VPY" "$ROOT/scripts/cpu_env/sglang_probe.py" --expect "$VERSION" \
        --out "$TMP/probe.json" >/dev/null 2>"$TMP/probe.err"; then
    cat "$TMP/probe.json" >&2 2>/dev/null || true
    tail -30 "$TMP/probe.err" >&2 || true
    die "probe failed for sglang $VERSION"
  fi
fi
release_finish "$want_stamp"
log "ready in $((SECONDS - t0))s (install ${t_install}s): $TARGET"
