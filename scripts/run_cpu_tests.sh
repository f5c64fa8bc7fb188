#!/usr/bin/env bash
# The README test command: build (or reuse) the CPU test environment, then run the CPU tests.
#
#   bash scripts/run_cpu_tests.sh                 # pytest tests -q -m "not gpu" -n <cores> --dist loadfile
#   bash scripts/run_cpu_tests.sh -k lora -x      # extra pytest arguments are appended
#   VSL_TEST_WORKERS=1 bash scripts/run_cpu_tests.sh   # one pytest process, no xdist
#
# Prerequisites (checked first by scripts/setup_cpu_env.sh, one message and exit 2 if missing): Python 3.11
# exactly (python3.11 or PYTHON=...), its pip, and torch 2.13.0's CPU wheel (cp311) in a pip find-links dir.
# Environment: .venv (scripts/setup_cpu_env.sh), .cache/sglang/<each SGLang release>
# (scripts/sglang_release.sh), .cache/verl/<each verl release but the venv's> (scripts/verl_release_env.sh),
# .cache/megatron_bridge/<the Megatron carry's> (scripts/megatron_bridge_release.sh);
# the releases are listed once, in verl_sglang_lora/releases.json. The release dirs are built side by side (as
# many at a time as there are cores). Every step is idempotent and takes about a second when already done.
# Tests run on pytest-xdist workers, one per core, a test file per worker (--dist loadfile: module fixtures that
# start subprocesses run once; tests/conftest.py hands the slowest files out first and keeps the three in-process
# doctor files on one worker). pytest's exit code 5 (no tests collected) counts as success.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
say() { printf '[run_cpu_tests %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
CORES="$(nproc 2>/dev/null || echo 2)"
WORKERS="${VSL_TEST_WORKERS:-$CORES}"

# the release lists: verl_sglang_lora/releases.json (the venv's own verl needs no release dir)
releases() { python3 -c "import json,sys; d=json.load(open('verl_sglang_lora/releases.json')); print(' '.join(v for v in d[sys.argv[1]] if v != d.get('venv_' + sys.argv[1])))" "$1"; }
read -r -a SGLANG_RELEASES <<< "$(python3 -c "import json; print(' '.join(json.load(open('verl_sglang_lora/releases.json'))['sglang']))")"
read -r -a VERL_RELEASES <<< "$(releases verl)"

t0=$SECONDS
say "1/3 CPU test environment .venv (scripts/setup_cpu_env.sh; a fresh machine: ~1-2 min, mostly downloads)"
bash scripts/setup_cpu_env.sh

say "2/3 release dirs under .cache/: SGLang ${SGLANG_RELEASES[*]}, verl ${VERL_RELEASES[*]}, megatron-bridge ($CORES at a time; each installed and its version checked: the compat tests import it)"
LOGS="$ROOT/.cache/logs"
mkdir -p "$LOGS"
jobs_=()
for v in "${SGLANG_RELEASES[@]}"; do jobs_+=("sglang_release.sh $v"); done
for v in "${VERL_RELEASES[@]}"; do jobs_+=("verl_release_env.sh $v"); done
# megatron-bridge (the Megatron carry's) under SGLang 0.5.23's transformers: the registration guard's test
jobs_+=("megatron_bridge_release.sh $(sed -n 's/^megatron-bridge==\([^ ]*\).*/\1/p' scripts/offline_bundle/requirements-megatron.lock)")
for j in "${jobs_[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$CORES" ]; do wait -n || true; done
  read -r script version <<< "$j"
  log="$LOGS/${script%.sh}-$version.log"
  rm -f "$log.rc"
  { rc=0; bash "scripts/$script" "$version" > "$log" 2>&1 || rc=$?; echo "$rc" > "$log.rc"; } &
done
wait
failed=0
for j in "${jobs_[@]}"; do  # the logs in order, each whole
  read -r script version <<< "$j"
  log="$LOGS/${script%.sh}-$version.log"
  if [ "$(cat "$log.rc" 2>/dev/null)" = 0 ]; then
    cat "$log"
  else
    cat "$log" >&2
    say "FAILED: scripts/$j (log: .cache/logs/${script%.sh}-$version.log)" >&2
    failed=1
  fi
done
[ "$failed" -eq 0 ] || exit 1
say "environment ready in $((SECONDS - t0))s"

if [ ! -d tests ]; then
  say "no tests/ directory"
  exit 0
fi
xdist=()
if [ "$WORKERS" -gt 1 ]; then xdist=(-n "$WORKERS" --dist loadfile); fi
say "3/3 pytest tests -m 'not gpu' on $WORKERS worker(s) (~5-6 min on 2 cores; the slowest tests are listed at the end)"
set +e
# SGLang contract tests must not skip here: a broken SGLang install fails them instead.
VERL_SGLANG_LORA_REQUIRE_SGLANG=1 .venv/bin/python -m pytest tests -q -m "not gpu" --durations=10 \
  "${xdist[@]+"${xdist[@]}"}" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  say "pytest collected no tests (exit 5): treated as success"
  rc=0
fi
say "total $((SECONDS - t0))s, pytest exit $rc"
exit "$rc"
