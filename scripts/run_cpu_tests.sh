#!/usr/bin/env bash
# The README test command: build (or reuse) the CPU test environment, then run the CPU tests.
#
#   bash scripts/run_cpu_tests.sh                 # pytest tests -q -m "not gpu"
#   bash scripts/run_cpu_tests.sh -k lora -x      # extra pytest arguments are appended
#
# Environment: .venv (scripts/setup_cpu_env.sh), .cache/sglang/<each SGLang release>
# (scripts/sglang_release.sh), .cache/verl/<each verl release but the venv's> (scripts/verl_release_env.sh);
# the releases are listed once, in verl_sglang_lora/releases.json.
# Every step is idempotent and takes about a second when already done.
# pytest's exit code 5 (no tests collected) counts as success.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# the release lists: verl_sglang_lora/releases.json (the venv's own verl needs no release dir)
releases() { python3 -c "import json,sys; d=json.load(open('verl_sglang_lora/releases.json')); print(' '.join(v for v in d[sys.argv[1]] if v != d.get('venv_' + sys.argv[1])))" "$1"; }
read -r -a SGLANG_RELEASES <<< "$(python3 -c "import json; print(' '.join(json.load(open('verl_sglang_lora/releases.json'))['sglang']))")"
read -r -a VERL_RELEASES <<< "$(releases verl)"

t0=$SECONDS
bash scripts/setup_cpu_env.sh
for v in "${SGLANG_RELEASES[@]}"; do bash scripts/sglang_release.sh "$v"; done
for v in "${VERL_RELEASES[@]}"; do bash scripts/verl_release_env.sh "$v"; done
echo "[run_cpu_tests] environment ready in $((SECONDS - t0))s"

if [ ! -d tests ]; then
  echo "[run_cpu_tests] no tests/ directory"
  exit 0
fi
set +e
# SGLang contract tests must not skip here: a broken SGLang install fails them instead.
VERL_SGLANG_LORA_REQUIRE_SGLANG=1 .venv/bin/python -m pytest tests -q -m "not gpu" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "[run_cpu_tests] pytest collected no tests (exit 5): treated as success"
  rc=0
fi
echo "[run_cpu_tests] total $((SECONDS - t0))s, pytest exit $rc"
exit "$rc"
