#!/usr/bin/env bash
# The memory soak on the GPU: a STEPS=50 GRPO run of the FSDP example (the plugin's defaults) with memory sampled
# in the background every SOAK_INTERVAL (2) s by scripts/device/mem_sampler.py: host RSS per process class (by the
# titles Ray and SGLang give their processes: ray::WorkerDict = trainer, ray::SGLangLoRARollout = server actor,
# sglang::scheduler, ...), GPU memory per class where nvidia-smi's pids are ours, and the whole GPU. Afterwards a
# table per series (min / median / max, growth = last-10-steps mean - first-10-steps-after-warm-up mean, the rule
# that calls growth beyond noise) and a plot, under $OUT.
#   bash scripts/device/soak.sh        (log $OUT/e2e_soak.log, $OUT/soak_mem.csv, $OUT/soak_mem.png)
# Time: ~180 s to step 1 + ~5 s a step, so 50 steps ~ 430 s (at 6 s a step ~ 480 s): inside one 580 s call. Where the
# timeout ends the run first, the report covers the steps done (it needs SOAK_WARMUP + 2 x SOAK_WINDOW of them).
set -uo pipefail
source scripts/device/env.sh
LOG="$LOGDIR/e2e_soak.log"
CSV="$LOGDIR/soak_mem.csv"
STEPS=${STEPS:-50}
WARMUP=${SOAK_WARMUP:-5}      # step 1 compiles and the allocators grow to their working size in the first steps
WINDOW=${SOAK_WINDOW:-10}
REPORT_S=20                   # kept from E2E_TIMEOUT for the report and the plot
RUN_TIMEOUT=$(( ${E2E_TIMEOUT:-575} - REPORT_S ))
expected=$(( 180 + 5 * STEPS ))
echo "== soak: STEPS=$STEPS (expected ~${expected}s at ~5 s a step), run timeout ${RUN_TIMEOUT}s"
[ "$expected" -gt "$RUN_TIMEOUT" ] && echo "== soak: WARNING ${STEPS} steps may not fit in ${RUN_TIMEOUT}s; lower STEPS (SOAK_STEPS in validate_all.sh)"
if [ $(( WARMUP + 2 * WINDOW )) -gt "$STEPS" ]; then
    echo "soak.sh: STEPS=$STEPS is fewer than warm-up $WARMUP + two windows of $WINDOW" >&2
    exit 2
fi
: > "$LOG"
START=$(date +%s)
STEPS=$STEPS timeout "$RUN_TIMEOUT" bash examples/run_qwen3_lora_fsdp.sh "${SGLANG_GPU_ARGS[@]}" ${SOAK_OVERRIDES:-} >> "$LOG" 2>&1 &
RUN=$!
python3 scripts/device/mem_sampler.py sample --log "$LOG" --csv "$CSV" --interval "${SOAK_INTERVAL:-2}" --until-pid "$RUN" &
SAMPLER=$!
wait "$RUN"; RC=$?
wait "$SAMPLER"  # it ends within one interval of the run
echo "== soak run rc=$RC wall=$(( $(date +%s) - START ))s steps=$(grep -c "step:[0-9]* - " "$LOG")/$STEPS"
python3 scripts/device/step_table.py "$LOG" timing_s/step sglang_lora/sync_version sglang_lora/sync_inplace \
    sglang_lora/base_policy_samples actor/perf/max_memory_reserved_gb actor/perf/cpu_memory_used_gb | tail -8
grep -aE "Traceback|Error|error:" "$LOG" | grep -v "UserWarning\|warnings.warn" | tail -5
python3 scripts/device/mem_sampler.py report --csv "$CSV" --warmup "$WARMUP" --window "$WINDOW" \
    --png "$LOGDIR/soak_mem.png" --log "$LOG"
