#!/usr/bin/env bash
# One verl GRPO run on the GPU host; log to $OUT/<name>.log.  usage: e2e.sh NAME [extra hydra overrides...]
# EXAMPLE picks the example script (default: the FSDP one).
set -uo pipefail
source scripts/device/env.sh
NAME=$1; shift
START=$(date +%s)
STEPS=${STEPS:-4} timeout ${E2E_TIMEOUT:-420} bash "${EXAMPLE:-examples/run_qwen3_lora_fsdp.sh}" "${SGLANG_GPU_ARGS[@]}" "$@" > "$LOGDIR/$NAME.log" 2>&1
RC=$?
echo "== $NAME rc=$RC wall=$(( $(date +%s) - START ))s"
python3 scripts/device/step_table.py "$LOGDIR/$NAME.log"  # printed only: $OUT returns at most 8 files
grep -E "sglang_lora|Error|error:|Traceback" "$LOGDIR/$NAME.log" | grep -v "UserWarning\|warnings.warn" | tail -15
exit $RC
