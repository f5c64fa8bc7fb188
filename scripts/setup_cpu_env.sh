#!/usr/bin/env bash
# Create/refresh the CPU test environment in <repo>/.venv (idempotent).
#
#   bash scripts/setup_cpu_env.sh          # fast no-op when already done
#   VSL_FORCE=1 bash scripts/setup_cpu_env.sh   # redo every install step
#
# What it installs (docs/cpu_environment.md has the why of each line):
#   1. torch==2.13.0, the CPU wheel that lies on disk (pip's find-links); a CUDA torch is refused.
#   2. verl==0.9.1 with its normal dependencies (transformers >=5.5.3,<5.11,!=5.6.0), peft,
#      ray[default], hydra-core, pytest, pytest-asyncio -- all under the constraint torch==2.13.0 --
#      plus cachetools, which verl 0.9.1's trainer modules import but do not declare.
#   3. The dependencies SGLang needs to import its request structs / ServerArgs / LoRA utils /
#      MultiprocessingSerializer on CPU, found by trial (not SGLang's GPU requirement list):
#      pybase64 fastapi ipython pyzmq openai partial_json_parser sentencepiece einops
#      compressed-tensors gguf msgspec, plus triton (imports fine without a GPU) and
#      torchvision==0.28.0 (the PyPI build; see the shim below); uvloop and setproctitle, which SGLang's
#      tokenizer manager imports (the server actor test imports verl's SGLang server module).
#   4. The repo itself: pip install -e ".[test]" (when setup.py / pyproject.toml exists).
#   5. sglang==0.5.12 with --no-deps (installed last so pip's conflict report about SGLang's
#      GPU pins does not fire on every later step).
#   6. scripts/cpu_env/vsl_cpu_shim.py as _vsl_cpu_shim.py + a .pth in site-packages: lets the
#      real PyPI torchvision import beside CPU torch (defines 2 op schemas; see the file).
#   7. Verifies with scripts/cpu_env/sglang_probe.py --expect 0.5.12.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
VPY="$VENV/bin/python"
SGLANG_MAIN=0.5.12
TORCH_PIN="torch==2.13.0"

log() { printf '[setup_cpu_env %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[setup_cpu_env] ERROR: %s\n' "$*" >&2; exit 1; }
# pip, with its "sglang X requires <GPU package>" conflict report filtered out (expected: SGLang
# is installed --no-deps on purpose). Exit status is pip's.
pip_() {
  local st
  set +e
  "$VPY" -m pip --disable-pip-version-check "$@" 2>&1 \
    | grep -vE "^sglang [0-9.]+ requires |^ERROR: pip's dependency resolver does not currently take into account|^WARNING: Location 'file:///"
  st=("${PIPESTATUS[@]}")
  set -e
  return "${st[0]}"
}
t_start=$SECONDS
step() { log "$1 ($((SECONDS - t_start))s elapsed)"; }

# ---------------------------------------------------------------- interpreter + venv
PYBASE="${PYTHON:-}"
if [ -z "$PYBASE" ]; then
  if command -v python3.11 >/dev/null 2>&1; then PYBASE=python3.11; else PYBASE=python3; fi
fi
"$PYBASE" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
  || die "$PYBASE is not Python 3.11 (set PYTHON=/path/to/python3.11)"

# stamps: DEPS_STAMP = what defines the third-party set (the release dirs depend on it);
# STAMP = that plus the repo's own packaging files (a change there re-runs the editable install)
want_deps_stamp="$(cat "$ROOT/scripts/setup_cpu_env.sh" "$ROOT/scripts/cpu_env/vsl_cpu_shim.py" \
  "$ROOT/scripts/cpu_env/sglang_probe.py" | sha256sum | cut -d' ' -f1)"
stamp_inputs=()
for f in setup.py setup.cfg pyproject.toml; do [ -f "$ROOT/$f" ] && stamp_inputs+=("$ROOT/$f"); done
want_stamp="$( { echo "$want_deps_stamp"; cat "${stamp_inputs[@]+"${stamp_inputs[@]}"}" </dev/null; } | sha256sum | cut -d' ' -f1)"
STAMP="$VENV/.vsl_cpu_env_stamp"
DEPS_STAMP="$VENV/.vsl_cpu_deps_stamp"
if [ -z "${VSL_FORCE:-}" ] && [ -x "$VPY" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want_stamp" ]; then
  log "up to date ($VENV)"
  exit 0
fi

# only the repo's packaging changed: redo just the editable install
if [ -z "${VSL_FORCE:-}" ] && [ -x "$VPY" ] && [ -f "$DEPS_STAMP" ] && [ "$(cat "$DEPS_STAMP")" = "$want_deps_stamp" ] \
   && [ -f "$VENV/vsl-constraints.txt" ]; then
  if [ -f "$ROOT/setup.py" ] || [ -f "$ROOT/pyproject.toml" ]; then
    step "packaging files changed: pip install -e .[test] only"
    pip_ install -q --progress-bar off -c "$VENV/vsl-constraints.txt" -e "$ROOT[test]"
  fi
  echo "$want_stamp" > "$STAMP"
  step "done"
  exit 0
fi

if [ ! -x "$VPY" ]; then
  step "creating $VENV with $("$PYBASE" --version)"
  "$PYBASE" -m venv "$VENV"
fi
rm -f "$STAMP" "$DEPS_STAMP"

# ---------------------------------------------------------------- 1. CPU torch from disk
step "1/7 torch (CPU wheel from pip's find-links)"
# The CPU wheel (torch-2.13.0+cpu) lies on pip's find-links (pip config / PIP_FIND_LINKS; add
# another dir with VSL_TORCH_FIND_LINKS).  First take torch itself with --no-index, so a machine
# without that wheel fails here at once instead of downloading PyPI's multi-GB CUDA build; then
# the plain install brings torch's own dependencies (torch itself is already satisfied).
torch_links=()
[ -n "${VSL_TORCH_FIND_LINKS:-}" ] && torch_links=(--find-links "$VSL_TORCH_FIND_LINKS")
if ! "$VPY" -c 'import torch' >/dev/null 2>&1; then
  pip_ install -q --progress-bar off --no-index --no-deps "${torch_links[@]+"${torch_links[@]}"}" "$TORCH_PIN" \
    || die "no $TORCH_PIN CPU wheel on pip's find-links (set VSL_TORCH_FIND_LINKS=DIR); refusing PyPI's CUDA build"
fi
pip_ install -q --progress-bar off "${torch_links[@]+"${torch_links[@]}"}" "$TORCH_PIN"
"$VPY" -W ignore - <<'EOF' || die "installed torch is not the 2.13.0 CPU build (is the CPU wheel on pip's find-links?)"
import torch, sys
print("torch", torch.__version__, "cuda:", torch.version.cuda)
sys.exit(0 if torch.__version__.startswith("2.13.0") and torch.version.cuda is None else 1)
EOF
CONS="$VENV/vsl-constraints.txt"
echo "$TORCH_PIN" > "$CONS"

# ---------------------------------------------------------------- 2+3. verl + sglang CPU deps
step "2/7 verl 0.9.1 + test deps + SGLang's CPU-import deps (one resolver run)"
pip_ install -q --progress-bar off -c "$CONS" \
  "verl==0.9.1" "transformers>=5.5.3,<5.11,!=5.6.0" peft "ray[default]" hydra-core cachetools \
  pytest pytest-asyncio \
  pybase64 fastapi ipython "pyzmq>=25.1.2" "openai==2.6.1" partial_json_parser sentencepiece \
  einops compressed-tensors gguf msgspec triton "torchvision==0.28.0" uvloop setproctitle
# freeze what was resolved: later installs (the repo's own extras) may not move any of it
"$VPY" -m pip freeze --exclude-editable 2>/dev/null | grep -viE '^(sglang|verl[-_]sglang[-_]lora)[=@ ]' > "$CONS"

# ---------------------------------------------------------------- 4. the repo itself
if [ -f "$ROOT/setup.py" ] || [ -f "$ROOT/pyproject.toml" ]; then
  step "3/7 pip install -e .[test] (constrained to the frozen set)"
  pip_ install -q --progress-bar off -c "$CONS" -e "$ROOT[test]"
else
  step "3/7 no setup.py / pyproject.toml yet: skipping the editable install"
fi

# ---------------------------------------------------------------- 5. sglang --no-deps
step "4/7 sglang==$SGLANG_MAIN --no-deps"
pip_ install -q --progress-bar off --no-deps "sglang==$SGLANG_MAIN"

# ---------------------------------------------------------------- 6. torchvision shim
step "5/7 torchvision CPU shim (.pth)"
SITE="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cp "$ROOT/scripts/cpu_env/vsl_cpu_shim.py" "$SITE/_vsl_cpu_shim.py"
echo "import _vsl_cpu_shim" > "$SITE/_vsl_cpu_shim.pth"

# ---------------------------------------------------------------- 7. verify
step "6/7 verify: torch CPU, verl registries, SGLang $SGLANG_MAIN surface"
"$VPY" - <<'EOF'
import warnings; warnings.filterwarnings("ignore")
import torch, transformers, verl
from verl.workers.rollout.replica import RolloutReplicaRegistry  # noqa: F401
assert torch.version.cuda is None, torch.__version__
print("torch", torch.__version__, "| transformers", transformers.__version__, "| verl", verl.__version__)
EOF
mkdir -p "$ROOT/.cache/sglang"
"$VPY" "$ROOT/scripts/cpu_env/sglang_probe.py" --expect "$SGLANG_MAIN" \
  --out "$ROOT/.cache/sglang/venv-probe.json" >/dev/null 2>"$ROOT/.cache/sglang/venv-probe.err" \
  || { cat "$ROOT/.cache/sglang/venv-probe.json" "$ROOT/.cache/sglang/venv-probe.err" >&2 || true; die "SGLang $SGLANG_MAIN probe failed in .venv"; }
log "sglang $SGLANG_MAIN in .venv: imports + LoRA check + serializer OK"

echo "$want_deps_stamp" > "$DEPS_STAMP"
echo "$want_stamp" > "$STAMP"
step "7/7 done"
