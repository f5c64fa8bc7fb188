#!/usr/bin/env bash
# The GPU validation still owed (docs/validation.md), in priority order, logs under $OUT.
# Run after the bundle batches are copied:  bash scripts/device/validate_all.sh [FIRST_STEP=1] [BUDGET_S=570]
# Steps: 1 FSDP2 adapter run, 2 stock sglang, 3 merge, 4 no LoRA, 5 tests/gpu, 6 benchmarks, 7 kill-and-recover.
# A verl run needs ~3 min to its first step on a warm machine (session 3): 240 s caps ended merge / no LoRA early.
# Each step gets min(its own cap, what is left of BUDGET_S); a step that would get < 90 s is left for the next
# call, whose FIRST_STEP is printed as "NEXT_STEP=N" (a device call is limited to 600 s).
set -uo pipefail
FIRST=${1:-1}
BUDGET=${2:-570}
T0=$(date +%s)
NEXT=$FIRST
# the bundle once per machine, the plugin every time (the checkout may have changed)
[ -d /tmp/site/sglang ] || bash scripts/offline_bundle/install.sh /tmp/whl /tmp/site > "${OUT:-/tmp/out}/install.log" 2>&1
bash scripts/device/install_plugin.sh 2>&1 | tail -1
source scripts/device/env.sh
# Triton kernels from an earlier machine (copy $OUT/triton_cache.tgz of the last call to .whl/ and carry it)
[ -f .whl/triton_cache.tgz ] && [ ! -d "$TRITON_CACHE_DIR" ] && tar xzf .whl/triton_cache.tgz -C "$(dirname "$TRITON_CACHE_DIR")"

# run_step N CAP CMD...: runs CMD under "timeout T" with T = min(CAP, time left) when step N is due
run_step() {
    local n=$1 cap=$2; shift 2
    [ "$n" -lt "$FIRST" ] && return 0
    if [ -n "${ONLY:-}" ]; then [[ " $ONLY " == *" $n "* ]] || return 0; NEXT=$n; fi   # ONLY="1 6": just these
    [ "$NEXT" -ne "$n" ] && return 0   # an earlier step was deferred: keep the order
    local left=$(( BUDGET - ($(date +%s) - T0) ))
    local t=$(( cap < left ? cap : left ))
    if [ "$t" -lt 90 ]; then echo "== step $n deferred (${left}s left)"; return 0; fi
    echo "== step $n (timeout ${t}s): $*"
    E2E_TIMEOUT=$t STEP_TIMEOUT=$t "$@"
    NEXT=$(( n + 1 ))
}
gpu_tests() { timeout "$STEP_TIMEOUT" python3 -m pytest tests/gpu -q -p no:cacheprovider > "$LOGDIR/gpu_tests.log" 2>&1; tail -5 "$LOGDIR/gpu_tests.log"; }
benchmarks() {
    timeout "$STEP_TIMEOUT" python3 -m verl_sglang_lora.benchmarks ${BENCH_ARGS:---shape qwen3-0.6b --shape qwen3-8b} \
        --json "$LOGDIR/bench.json" > "$LOGDIR/bench.log" 2>&1; tail -30 "$LOGDIR/bench.log"
}

run_step 1 520 env STEPS=${E2E_STEPS:-4} bash scripts/device/e2e.sh e2e_plugin_fsdp2_adapter
run_step 2 200 env STEPS=2 bash scripts/device/e2e.sh e2e_stock_sglang actor_rollout_ref.rollout.name=sglang
run_step 3 330 env STEPS=2 bash scripts/device/e2e.sh e2e_plugin_merge actor_rollout_ref.model.lora.merge=True
run_step 4 330 env STEPS=2 bash scripts/device/e2e.sh e2e_plugin_nolora actor_rollout_ref.model.lora_rank=0
run_step 5 300 gpu_tests
run_step 6 500 benchmarks
run_step 7 480 bash scripts/device/kill_recover.sh
[ -d "$TRITON_CACHE_DIR" ] && tar czf "$LOGDIR/triton_cache.tgz" -C "$(dirname "$TRITON_CACHE_DIR")" "$(basename "$TRITON_CACHE_DIR")"
echo "NEXT_STEP=$NEXT"
