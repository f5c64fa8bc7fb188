#!/usr/bin/env bash
# The GPU validation still owed (docs/validation.md, "Not run yet"), in priority order, logs under $OUT.
# Run after the bundle batches are copied: bash scripts/device/validate_all.sh [FIRST_STEP=1] (steps 1-6)
# Each step has its own timeout so one failure does not eat the call's 600 s.
set -uo pipefail
FIRST=${1:-1}
step() { [ "$1" -ge "$FIRST" ]; }
# the bundle once per machine, the plugin every time (the checkout may have changed)
[ -d /tmp/site/sglang ] || bash scripts/offline_bundle/install.sh /tmp/whl /tmp/site > "${OUT:-/tmp/out}/install.log" 2>&1
bash scripts/device/install_plugin.sh 2>&1 | tail -1
step 1 && E2E_TIMEOUT=330 STEPS=4 bash scripts/device/e2e.sh e2e_plugin_fsdp2_adapter
step 2 && E2E_TIMEOUT=240 STEPS=2 bash scripts/device/e2e.sh e2e_stock_sglang actor_rollout_ref.rollout.name=sglang
step 3 && E2E_TIMEOUT=240 STEPS=2 bash scripts/device/e2e.sh e2e_plugin_merge actor_rollout_ref.model.lora.merge=True
step 4 && E2E_TIMEOUT=240 STEPS=2 bash scripts/device/e2e.sh e2e_plugin_nolora actor_rollout_ref.model.lora_rank=0
if step 5; then
    source scripts/device/env.sh
    timeout 300 python3 -m pytest tests/gpu -q -p no:cacheprovider > "$LOGDIR/gpu_tests.log" 2>&1; tail -3 "$LOGDIR/gpu_tests.log"
fi
if step 6; then
    source scripts/device/env.sh
    timeout 500 python3 -m verl_sglang_lora.benchmarks --shape qwen3-0.6b --shape qwen3-8b --json "$LOGDIR/bench.json" 2>&1 | tee "$LOGDIR/bench.log" | tail -20
fi
