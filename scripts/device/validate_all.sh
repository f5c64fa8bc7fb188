#!/usr/bin/env bash
# The GPU validation still owed (docs/validation.md), logs under $OUT.
#   bash scripts/device/validate_all.sh [FIRST_STEP=1] [BUDGET_S=570]        steps FIRST..11 in order
#   ONLY="7 6" bash scripts/device/validate_all.sh 1 570                       just these, in this order
# Steps: 1 FSDP2 adapter run (resident in-place sync on by default: resident=auto), 2 stock sglang, 3 merge, 4 no LoRA,
# 5 tests/gpu, 6 benchmarks, 7 kill-and-recover, 8 Megatron (needs the Megatron wheels in /tmp/mcore and the TE torch
# build: scripts/device/megatron_stack.sh), 9 resident slot checks (0.6B and 8B shapes, r32; RESIDENT_SHAPES)
# (7 is also a trained-adapter run: 6 steps with the graded offline reward, the server killed after version 3),
# 10 fault run (item 3: one 12-step run, four faults at successive versions; FAULT_STEPS), 11 memory soak
# (item 4: SOAK_STEPS=50 steps, ~180 s + ~5 s a step = ~430 s; lower SOAK_STEPS if steps run slower).
# 12 the sync matrix (item 4: python -m verl_sglang_lora.benchmarks, ranks 8/32/128, both shapes; MATRIX_ARGS).
# 13/14 the served-effect proof (item 1: proof_run.sh pass / misscaled).
# 10-14 each need a call of their own: ONLY="10" ... 1 580, then ONLY="11" ... 1 580, ONLY="12" ... 1 580.
# Each step gets min(its own cap, what is left of BUDGET_S); a step that would get < 90 s is left for the next
# call, printed as "NEXT_STEPS=..." (a device call is limited to 600 s). A verl run needs ~3 min to its first
# step on a warm machine: 240 s caps end merge / no LoRA before step 1.
set -uo pipefail
FIRST=${1:-1}
BUDGET=${2:-570}
T0=$(date +%s)
# the bundle once per machine, the plugin every time (the checkout may have changed)
[ -d /tmp/site/sglang ] || bash scripts/offline_bundle/install.sh /tmp/whl /tmp/site > "${OUT:-/tmp/out}/install.log" 2>&1
bash scripts/device/install_plugin.sh 2>&1 | tail -1
source scripts/device/env.sh
# the decode CUDA-graph batch cap under the installed SGLang's own flag name (split in two by 0.5.18)
CG_FLAG=$(python3 -m verl_sglang_lora.sglang_contract.installed cuda-graph-flag)

gpu_tests() { timeout "$STEP_TIMEOUT" python3 -m pytest tests/gpu -q -p no:cacheprovider > "$LOGDIR/gpu_tests.log" 2>&1; tail -5 "$LOGDIR/gpu_tests.log"; }
benchmarks() {
    timeout "$STEP_TIMEOUT" python3 -m verl_sglang_lora.tools.benchmarks ${BENCH_ARGS:---shape qwen3-0.6b --shape qwen3-8b} \
        --json "$LOGDIR/bench.json" > "$LOGDIR/bench.log" 2>&1; tail -30 "$LOGDIR/bench.log"
}
matrix() {  # every path, ranks 8/32/128, both shapes, one engine per shape and rank (tools/sync_matrix.py)
    timeout "$STEP_TIMEOUT" python3 -m verl_sglang_lora.benchmarks ${MATRIX_ARGS:---shape qwen3-0.6b --shape qwen3-8b} \
        --iters "${MATRIX_ITERS:-30}" --settle-ms "${MATRIX_SETTLE_MS:-50}" --engine-arg attention_backend=triton --engine-arg sampling_backend=pytorch \
        --engine-arg "${CG_FLAG#--}=8" --json "$LOGDIR/matrix.json" > "$LOGDIR/matrix.log" 2>&1
    grep "^|" "$LOGDIR/matrix.log" | tail -40
}
# step N -> "CAP CMD..."
step() {
    case $1 in
    1) run 520 env STEPS="${E2E_STEPS:-4}" bash scripts/device/e2e.sh e2e_plugin_fsdp2_adapter ;;
    2) run 200 env STEPS=2 bash scripts/device/e2e.sh e2e_stock_sglang actor_rollout_ref.rollout.name=sglang ;;
    3) run 330 env STEPS=2 bash scripts/device/e2e.sh e2e_plugin_merge actor_rollout_ref.model.lora.merge=True ;;
    4) run 330 env STEPS=2 bash scripts/device/e2e.sh e2e_plugin_nolora actor_rollout_ref.model.lora_rank=0 ;;
    5) run 300 gpu_tests ;;
    6) run 500 benchmarks ;;
    7) run 480 env STEPS="${KILL_STEPS:-6}" KILL_AFTER_VERSION="${KILL_AFTER_VERSION:-3}" bash scripts/device/kill_recover.sh ;;
    8) if [ -d "${MCORE_DIR:-/tmp/mcore}" ]; then run 480 bash scripts/device/megatron_stack.sh run
       else echo "== step 8 skipped: no Megatron wheels in ${MCORE_DIR:-/tmp/mcore} (docs/megatron_gpu.md)"; fi ;;
    9) echo "== step 9: the in-place write is measured by step 12 (the sync matrix)" ;;
    10) run 575 env STEPS="${FAULT_STEPS:-12}" bash scripts/device/faults.sh ;;
    11) run 575 env STEPS="${SOAK_STEPS:-50}" bash scripts/device/soak.sh ;;
    12) run 575 matrix ;;
    13) run 520 bash scripts/device/proof_run.sh pass ;;
    14) run 520 bash scripts/device/proof_run.sh misscaled ;;
    *) echo "no step $1" >&2 ;;
    esac
}
# run CAP CMD...: CMD under "timeout T", T = min(CAP, time left); returns 3 when deferred
run() {
    local cap=$1; shift
    local left=$(( BUDGET - ($(date +%s) - T0) ))
    local t=$(( cap < left ? cap : left ))
    if [ "$t" -lt 90 ]; then echo "== deferred (${left}s left): $*"; return 3; fi
    echo "== (timeout ${t}s): $*"
    E2E_TIMEOUT=$t STEP_TIMEOUT=$t "$@"
    return 0
}

steps=${ONLY:-$(seq -s ' ' "$FIRST" 14)}
left_over=()
for n in $steps; do
    if [ ${#left_over[@]} -gt 0 ]; then left_over+=("$n"); continue; fi  # keep the order after a deferral
    echo "== step $n"
    step "$n"; [ $? -eq 3 ] && left_over+=("$n")
done
[ -d "$TRITON_CACHE_DIR" ] && tar czf "$LOGDIR/triton_cache.tgz" -C "$(dirname "$TRITON_CACHE_DIR")" "$(basename "$TRITON_CACHE_DIR")"
echo "NEXT_STEPS=${left_over[*]:-none}"
