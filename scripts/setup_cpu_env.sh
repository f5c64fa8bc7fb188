#!/usr/bin/env bash
# Create/refresh the CPU test environment in <repo>/.venv (idempotent).
#
#   bash scripts/setup_cpu_env.sh                 # fast no-op when already done
#   VSL_FORCE=1 bash scripts/setup_cpu_env.sh     # redo every install step
#   VSL_INSTALLER=pip bash scripts/setup_cpu_env.sh   # pip only (default: uv, installed with pip; pip if that fails)
#
# Prerequisites, checked first (one message, exit 2, nothing built):
#   - Python 3.11 exactly (`python3.11` on PATH, or PYTHON=/path/to/python3.11): the CPU torch wheel the suite
#     runs on is built per interpreter and the CI machine carries it for CPython 3.11 only
#     (torch-2.13.0+cpu-cp311-*.whl); the suite is checked on 3.11 (verl 0.9.1 / SGLang 0.5.12 allow 3.10-3.12).
#   - pip for that interpreter (it builds the venv and fetches uv).
#   - torch 2.13.0's CPU wheel for cp311 in a pip find-links dir (pip config, PIP_FIND_LINKS, or
#     VSL_TORCH_FIND_LINKS=DIR). torch comes only from there: PyPI's Linux torch is the multi-GB CUDA build.
#     Without it: `pip download --no-deps --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 -d DIR`.
#
# What it installs (docs/cpu_environment.md has the why of each line):
#   1. torch==2.13.0, the CPU wheel from find-links (--no-index: a CUDA torch is never downloaded), then its deps.
#   2. One resolver run: verl==0.9.1 with its normal dependencies (transformers >=5.5.3,<5.11,!=5.6.0), peft,
#      ray[default], hydra-core, pytest, pytest-asyncio, pytest-xdist -- under the constraint torch==2.13.0 --
#      plus cachetools (verl 0.9.1's trainer imports it, undeclared) and the dependencies SGLang needs to import
#      its request structs / ServerArgs / LoRA utils / MultiprocessingSerializer on CPU, found by trial:
#      pybase64 fastapi ipython pyzmq openai partial_json_parser sentencepiece einops compressed-tensors gguf
#      msgspec, triton (imports fine without a GPU), torchvision==0.28.0 (the PyPI build; see the shim),
#      uvloop and setproctitle (SGLang's tokenizer manager imports them). Frozen into .venv/vsl-constraints.txt.
#   3. The repo itself: install -e ".[test]" under that frozen set (it may add packages, never move one).
#   4. sglang==0.5.12 with --no-deps (last, so the "sglang requires <GPU package>" report fires once, filtered).
#   5. scripts/cpu_env/vsl_cpu_shim.py as _vsl_cpu_shim.py + a .pth in site-packages: lets the real PyPI
#      torchvision import beside CPU torch (defines 2 op schemas; see the file).
#   6. Verifies what the suite cannot tell itself: torch is the CPU build, and the installed versions (read from
#      the dist-info, no import) are the pinned ones. The SGLang / verl surfaces are checked where they are
#      used, by the suite (the contract tests fail on a broken install; importing them here as well cost ~28 s
#      of a fresh CI run). VSL_VENV_PROBE=1 runs the full import probe here too
#      (scripts/cpu_env/sglang_probe.py --expect 0.5.12, verl's registries).
# The installer is uv (parallel downloads, a resolver run in seconds instead of minutes), pointed at the same
# indexes, find-links and constraint files as pip's configuration; bytecode is compiled at install as pip does
# (with PYTHONDONTWRITEBYTECODE=1 nothing else would write it, and every test subprocess would recompile).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
VPY="$VENV/bin/python"
SGLANG_MAIN=0.5.12
TORCH_VERSION=2.13.0
TORCH_PIN="torch==$TORCH_VERSION"
PY_WANT=3.11

log() { printf '[setup_cpu_env %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[setup_cpu_env] ERROR: %s\n' "$*" >&2; exit 1; }
t_start=$SECONDS
step() { log "$1 ($((SECONDS - t_start))s elapsed)"; }

# ---------------------------------------------------------------- prerequisites (before anything is built)
PYBASE="${PYTHON:-}"
if [ -z "$PYBASE" ]; then
  if command -v python3.11 >/dev/null 2>&1; then PYBASE=python3.11; else PYBASE=python3; fi
fi
prereq_fail() {
  printf '[setup_cpu_env] PREREQUISITE MISSING: %s\n' "$*" >&2
  printf '[setup_cpu_env] needs: Python %s (PYTHON=/path/to/python%s) with pip, and torch %s'"'"'s CPU wheel for cp311 in a pip find-links dir (README, Tests)\n' \
    "$PY_WANT" "$PY_WANT" "$TORCH_VERSION" >&2
  exit 2
}
command -v "$PYBASE" >/dev/null 2>&1 || prereq_fail "no interpreter '$PYBASE' (set PYTHON=/path/to/python$PY_WANT)"
"$PYBASE" -c "import sys; sys.exit(sys.version_info[:2] != (${PY_WANT/./, }))" 2>/dev/null || prereq_fail \
  "$PYBASE is Python $("$PYBASE" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo '?'), not $PY_WANT: the torch $TORCH_VERSION CPU wheel the suite runs on is the cp311 build (set PYTHON=/path/to/python$PY_WANT)"

if [ ! -x "$VPY" ] || ! "$VPY" -c 'import torch' >/dev/null 2>&1; then
  "$PYBASE" -m pip --version >/dev/null 2>&1 || prereq_fail "$PYBASE has no pip (python -m ensurepip, or the distribution's python3-pip)"
  # Where torch comes from: a local find-links dir holding the CPU wheel. A find-links URL cannot be listed here,
  # so it passes this check and the --no-index install below says whether it holds the wheel.
  TORCH_SOURCE="$("$PYBASE" - "$TORCH_VERSION" "${VSL_TORCH_FIND_LINKS:-}" <<'EOF'
import glob, os, subprocess, sys
version, extra = sys.argv[1], sys.argv[2]
out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
links = [extra] if extra else []
links += os.environ.get("PIP_FIND_LINKS", "").split()
for line in out.splitlines():
    key, _, value = line.partition("=")
    if key.endswith(".find-links"):
        links += value.strip().strip("'\"").split()
for link in dict.fromkeys(links):
    path = link[len("file://"):] if link.startswith("file://") else link
    if "://" in path:
        print(f"url {link}"); sys.exit(0)
    hits = sorted(glob.glob(os.path.join(path, f"torch-{version}+cpu-cp311-*.whl")))
    if hits:
        print(f"file {hits[0]}"); sys.exit(0)
print(f"none {' '.join(links) or '(no find-links configured)'}")
EOF
)"
  case "$TORCH_SOURCE" in
    file\ *) log "prerequisites OK: $("$PYBASE" --version), torch from ${TORCH_SOURCE#file }" ;;
    url\ *)  log "prerequisites: $("$PYBASE" --version); torch to be taken from find-links ${TORCH_SOURCE#url }" ;;
    *) prereq_fail "no torch-$TORCH_VERSION+cpu-cp311 wheel in pip's find-links (${TORCH_SOURCE#none }); fetch it with: pip download --no-deps --index-url https://download.pytorch.org/whl/cpu $TORCH_PIN -d DIR, then VSL_TORCH_FIND_LINKS=DIR" ;;
  esac
fi

# ---------------------------------------------------------------- stamps
# DEPS_STAMP = what defines the third-party set (the release dirs depend on it);
# STAMP = that plus the repo's own packaging files (a change there re-runs the editable install)
want_deps_stamp="$(cat "$ROOT/scripts/setup_cpu_env.sh" "$ROOT/scripts/cpu_env/vsl_cpu_shim.py" \
  "$ROOT/scripts/cpu_env/sglang_probe.py" | sha256sum | cut -d' ' -f1)"
stamp_inputs=()
for f in setup.py setup.cfg pyproject.toml verl_sglang_lora/__init__.py constraints/*.txt; do [ -f "$ROOT/$f" ] && stamp_inputs+=("$ROOT/$f"); done  # __init__.py: the version
want_stamp="$( { echo "$want_deps_stamp"; cat "${stamp_inputs[@]+"${stamp_inputs[@]}"}" </dev/null; } | sha256sum | cut -d' ' -f1)"
STAMP="$VENV/.vsl_cpu_env_stamp"
DEPS_STAMP="$VENV/.vsl_cpu_deps_stamp"
if [ -z "${VSL_FORCE:-}" ] && [ -x "$VPY" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want_stamp" ]; then
  log "up to date ($VENV)"
  exit 0
fi

# ---------------------------------------------------------------- the installer: uv, or pip
# inst ARGS...: `pip install ARGS` into the venv, through uv when set up, else pip. Output: uv's summary lines and
# errors (its per-package lines are dropped); pip's "sglang X requires <GPU package>" report is filtered out
# (expected: SGLang is installed --no-deps on purpose). Exit status is the installer's.
UV=""
UV_ARGS=()
inst() {
  local st
  set +e
  if [ -n "$UV" ]; then
    "$UV" pip install --python "$VPY" "${UV_ARGS[@]}" "$@" 2>&1 | grep -vE '^ [-+~] '
  else
    "$VPY" -m pip --disable-pip-version-check install -q --progress-bar off "$@" 2>&1 \
      | grep -vE "^sglang [0-9.]+ requires |^ERROR: pip's dependency resolver does not currently take into account|^WARNING: Location 'file:///"
  fi
  st=("${PIPESTATUS[@]}")
  set -e
  return "${st[0]}"
}
# setup_uv: install uv into the venv with pip and translate pip's configuration (index, extra indexes,
# find-links, constraint files, CA bundle, timeout) into uv arguments, saved in .venv/vsl-uv-args for the
# release scripts. Any failure leaves UV empty: pip does the work instead.
setup_uv() {
  [ "${VSL_INSTALLER:-uv}" = uv ] || { log "installer: pip (VSL_INSTALLER=${VSL_INSTALLER})"; return 0; }
  if ! "$VENV/bin/uv" --version >/dev/null 2>&1; then
    "$VPY" -m pip --disable-pip-version-check install -q --progress-bar off uv >/dev/null 2>&1 \
      || { log "installer: pip (uv could not be installed with pip)"; return 0; }
  fi
  "$VPY" - "$VENV/vsl-uv-args" <<'EOF' || { log "installer: pip (pip's configuration could not be read)"; rm -f "$VENV/vsl-uv-args"; return 0; }
import os, subprocess, sys
out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True).stdout
conf: dict[str, list[str]] = {}
for line in out.splitlines():  # "global.find-links='/opt/wheels'", ":env:.cert='...'"; env beats install beats global
    key, _, value = line.partition("=")
    scope, _, name = key.rpartition(".")
    rank = {":env:": 0, "install": 1}.get(scope, 2)
    conf.setdefault(name, []).append((rank, value.strip().strip("'\"")))
def values(name: str) -> list[str]:  # every scope's entries (list options accumulate in pip too)
    return list(dict.fromkeys(v for _, joined in sorted(conf.get(name, [])) for v in joined.split()))
def first(name: str) -> str | None:
    return sorted(conf[name])[0][1] if name in conf else None
args = ["--index-strategy", "unsafe-best-match"]  # pip's rule: the best version across all indexes
if first("index-url"):
    args += ["--index-url", first("index-url")]
for url in values("extra-index-url"):
    args += ["--extra-index-url", url]
for link in values("find-links") + os.environ.get("VSL_TORCH_FIND_LINKS", "").split():
    args += ["--find-links", link]
for path in values("constraint"):
    args += ["--constraint", path]
with open(sys.argv[1], "w") as f:
    f.write("\n".join(args) + "\n")
# environment for uv: pip's CA bundle and timeout
env = {}
if first("cert"):
    env["SSL_CERT_FILE"] = first("cert")
if first("timeout") or first("default-timeout"):
    env["UV_HTTP_TIMEOUT"] = first("timeout") or first("default-timeout")
with open(sys.argv[1] + ".env", "w") as f:
    f.write("".join(f"export {k}={v!r}\n" for k, v in env.items()))
EOF
  mapfile -t UV_ARGS < "$VENV/vsl-uv-args"
  # shellcheck disable=SC1091
  source "$VENV/vsl-uv-args.env"
  export UV_COMPILE_BYTECODE=1 UV_NO_PROGRESS=1
  UV="$VENV/bin/uv"
  log "installer: $("$UV" --version) (VSL_INSTALLER=pip for pip)"
}

# only the repo's packaging changed: redo just the editable install
if [ -z "${VSL_FORCE:-}" ] && [ -x "$VPY" ] && [ -f "$DEPS_STAMP" ] && [ "$(cat "$DEPS_STAMP")" = "$want_deps_stamp" ] \
   && [ -f "$VENV/vsl-constraints.txt" ]; then
  setup_uv
  step "packaging files changed: install -e .[test] only"
  inst -c "$VENV/vsl-constraints.txt" -e "$ROOT[test]"
  echo "$want_stamp" > "$STAMP"
  step "done"
  exit 0
fi

if [ ! -x "$VPY" ]; then
  step "creating $VENV with $("$PYBASE" --version)"
  "$PYBASE" -m venv "$VENV"
fi
rm -f "$STAMP" "$DEPS_STAMP"
setup_uv

# ---------------------------------------------------------------- 1. CPU torch from disk
step "1/6 torch $TORCH_VERSION (the CPU wheel from find-links; ~0.2 GB wheel, 0.75 GB installed)"
torch_links=()
[ -n "${VSL_TORCH_FIND_LINKS:-}" ] && torch_links=(--find-links "$VSL_TORCH_FIND_LINKS")
if ! "$VPY" -c 'import torch' >/dev/null 2>&1; then
  inst --no-index --no-deps "${torch_links[@]+"${torch_links[@]}"}" "$TORCH_PIN" \
    || die "no $TORCH_PIN CPU wheel on pip's find-links (set VSL_TORCH_FIND_LINKS=DIR); refusing PyPI's CUDA build"
fi
inst "${torch_links[@]+"${torch_links[@]}"}" "$TORCH_PIN"
"$VPY" -W ignore - <<'EOF' || die "installed torch is not the 2.13.0 CPU build (is the CPU wheel on pip's find-links?)"
import torch, sys
print("torch", torch.__version__, "cuda:", torch.version.cuda)
sys.exit(0 if torch.__version__.startswith("2.13.0") and torch.version.cuda is None else 1)
EOF
CONS="$VENV/vsl-constraints.txt"
echo "$TORCH_PIN" > "$CONS"

# ---------------------------------------------------------------- 2. verl + test deps + SGLang CPU deps
step "2/6 verl 0.9.1 + test deps + SGLang's CPU-import deps: one resolver run, then ~160 packages (~2.3 GB) downloaded and installed"
inst -c "$CONS" \
  "verl==0.9.1" "transformers>=5.5.3,<5.11,!=5.6.0" peft "ray[default]" hydra-core cachetools \
  pytest pytest-asyncio pytest-xdist \
  pybase64 fastapi ipython "pyzmq>=25.1.2" "openai==2.6.1" partial_json_parser sentencepiece \
  einops compressed-tensors gguf msgspec triton "torchvision==0.28.0" uvloop setproctitle
# freeze what was resolved: later installs (the repo's own extras) may not move any of it
"$VPY" -m pip freeze --exclude-editable 2>/dev/null | grep -viE '^(sglang|verl[-_]sglang[-_]lora)[=@ ]' > "$CONS"
log "$(wc -l < "$CONS") packages frozen into $CONS"

# ---------------------------------------------------------------- 3. the repo itself
step "3/6 install -e .[test] (constrained to the frozen set)"
inst -c "$CONS" -e "$ROOT[test]"

# ---------------------------------------------------------------- 4. sglang --no-deps
step "4/6 sglang==$SGLANG_MAIN --no-deps"
inst --no-deps "sglang==$SGLANG_MAIN"

# ---------------------------------------------------------------- 5. torchvision shim
SITE="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cp "$ROOT/scripts/cpu_env/vsl_cpu_shim.py" "$SITE/_vsl_cpu_shim.py"
echo "import _vsl_cpu_shim" > "$SITE/_vsl_cpu_shim.pth"

# ---------------------------------------------------------------- 6. verify
step "5/6 verify: torch is the CPU build; torch / transformers / verl / sglang versions from their dist-info"
"$VPY" - "$SGLANG_MAIN" <<'EOF'
import sys
from importlib.metadata import version
import torch
assert torch.version.cuda is None, f"torch {torch.__version__} is a CUDA build: the suite needs the CPU wheel"
found = {name: version(name) for name in ("transformers", "verl", "sglang")}
assert found["verl"] == "0.9.1" and found["sglang"] == sys.argv[1], found
print("torch", torch.__version__, "|", " | ".join(f"{k} {v}" for k, v in found.items()))
EOF
if [ "${VSL_VENV_PROBE:-0}" = 1 ]; then
  "$VPY" -c "from verl.workers.rollout.replica import RolloutReplicaRegistry" || die "verl's rollout registry does not import"
  mkdir -p "$ROOT/.cache/sglang"
  "$VPY" "$ROOT/scripts/cpu_env/sglang_probe.py" --expect "$SGLANG_MAIN" \
    --out "$ROOT/.cache/sglang/venv-probe.json" >/dev/null 2>"$ROOT/.cache/sglang/venv-probe.err" \
    || { cat "$ROOT/.cache/sglang/venv-probe.json" "$ROOT/.cache/sglang/venv-probe.err" >&2 || true; die "SGLang $SGLANG_MAIN probe failed in .venv"; }
  log "sglang $SGLANG_MAIN in .venv: imports + LoRA check + serializer OK"
fi

echo "$want_deps_stamp" > "$DEPS_STAMP"
echo "$want_stamp" > "$STAMP"
step "6/6 done"
