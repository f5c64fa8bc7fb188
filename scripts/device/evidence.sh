#!/usr/bin/env bash
# The GPU evidence runs, each ending in a record under $OUT/results/<kind>.json (scripts/records.py); merge them here
# with `python scripts/records.py merge <files_at>/results && python scripts/records.py render`.
#   VSL_COMMIT=<sha> bash scripts/device/evidence.sh gpu_tests e2e matrix faults
# Needs the offline bundle in /tmp/whl (docs/offline_bundle.md); installs it once per machine.
set -uo pipefail
mkdir -p "${OUT:-/tmp/out}/results"
[ -d /tmp/site/sglang ] || bash scripts/offline_bundle/install.sh /tmp/whl /tmp/site > "${OUT:-/tmp/out}/install.log" 2>&1
bash scripts/device/install_plugin.sh 2>&1 | tail -1
source scripts/device/env.sh
RES="$LOGDIR/results"
CG_FLAG=$(python3 -m verl_sglang_lora.sglang_contract.installed cuda-graph-flag)
for step in "$@"; do
    echo "== $step $(date +%T)"
    case $step in
    gpu_tests)
        timeout "${GPU_TESTS_TIMEOUT:-240}" python3 -m pytest tests/gpu -q -p no:cacheprovider > "$LOGDIR/gpu_tests.log" 2>&1
        summary=$(tail -1 "$LOGDIR/gpu_tests.log"); echo "$summary"
        python3 scripts/records.py text gpu_tests "$summary" --command "python -m pytest tests/gpu -q" --out "$RES" ;;
    e2e)
        STEPS=${E2E_STEPS:-4} E2E_TIMEOUT=${E2E_TIMEOUT:-420} bash scripts/device/e2e.sh e2e_fsdp
        python3 scripts/records.py e2e "$LOGDIR/e2e_fsdp.log" --title "FSDP2 example, rollout.name=sglang_lora" \
            --command "STEPS=${E2E_STEPS:-4} bash examples/run_qwen3_lora_fsdp.sh (triton attention, pytorch sampling, eager)" --out "$RES" ;;
    matrix)
        # an idle gap before each sync, as in a training run (the sync follows the update, not a request): with none,
        # the sync can wait in the scheduler's socket for a decode step its previous request left in flight
        args="${MATRIX_ARGS:---shape qwen3-0.6b --shape qwen3-8b --rank 32} --settle-ms ${MATRIX_SETTLE_MS:-50}"
        timeout "${MATRIX_TIMEOUT:-540}" python3 -m verl_sglang_lora.benchmarks $args --iters "${MATRIX_ITERS:-30}" \
            --engine-arg attention_backend=triton --engine-arg sampling_backend=pytorch --engine-arg "${CG_FLAG#--}=8" \
            --json "$LOGDIR/matrix.json" > "$LOGDIR/matrix.log" 2>&1
        grep "^|" "$LOGDIR/matrix.log" | tail -20
        [ -s "$LOGDIR/matrix.json" ] && python3 scripts/records.py json sync_matrix "$LOGDIR/matrix.json" \
            --command "python -m verl_sglang_lora.benchmarks $args --iters ${MATRIX_ITERS:-30} --engine-arg attention_backend=triton --engine-arg sampling_backend=pytorch --engine-arg ${CG_FLAG#--}=8" --out "$RES" ;;
    faults)
        # three actor relaunches (20-30 s each) and the first step's compiles: ~470 s on an H200; run it through bg.sh
        STEPS=${FAULT_STEPS:-12} E2E_TIMEOUT=${FAULTS_TIMEOUT:-900} bash scripts/device/faults.sh | tail -6
        python3 scripts/records.py faults "$LOGDIR/e2e_faults.log" --steps "${FAULT_STEPS:-12}" --out "$RES" \
            --command "STEPS=${FAULT_STEPS:-12} bash scripts/device/faults.sh (the FSDP example, four faults injected in one run; triton attention, pytorch sampling, eager)" ;;
    *) echo "no step $step" >&2 ;;
    esac
done
