#!/usr/bin/env bash
# The FSDP example as a new user runs it on an air-gapped GPU host: no /tmp/site on the path, no
# VSL_SKIP_SETUP -- the example finds the offline bundle by itself (the checkout's .whl/ or /tmp/whl), builds
# .venv-gpu from it once, checks it, runs.
# Then the same command again: the env is reused (its set-up takes seconds). Logs under $OUT.
#   bash scripts/device/example_as_user.sh [BUDGET_S=560]
# (the GPU args: the bundle strips sglang-kernel's FA3 part and flashinfer would JIT-compile -- docs/offline_bundle.md)
set -uo pipefail
BUDGET=${1:-560}
LOGDIR=${OUT:-/tmp/out}
mkdir -p "$LOGDIR"
unset PYTHONPATH VSL_SKIP_SETUP
export TRITON_CACHE_DIR=/tmp/triton_cache NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for t in .whl/triton_cache.tgz; do [ -f "$t" ] && [ ! -d "$TRITON_CACHE_DIR" ] && tar xzf "$t" -C /tmp; done
GPU_ARGS=(++actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=triton
          ++actor_rollout_ref.rollout.engine_kwargs.sglang.sampling_backend=pytorch
          actor_rollout_ref.rollout.enforce_eager=True)
T0=$(date +%s)
STEPS=${STEPS:-4} timeout "$BUDGET" bash examples/run_qwen3_lora_fsdp.sh "${GPU_ARGS[@]}" > "$LOGDIR/example_fsdp.log" 2>&1
RC=$?
echo "== example rc=$RC wall=$(( $(date +%s) - T0 ))s"
grep -E "^(verl-sglang-lora|gpu_env)" "$LOGDIR/example_fsdp.log" | head -20
python3 scripts/device/step_table.py "$LOGDIR/example_fsdp.log"
grep -E "sglang_lora: adapter .* active|RESIDENT|Traceback|Error" "$LOGDIR/example_fsdp.log" | grep -v "UserWarning\|warnings.warn" | tail -12
T1=$(date +%s)
PYTHON=python3 timeout 60 bash -c 'source examples/setup_env.sh; NGPUS=1 vsl_setup; echo "reused env python: $PYTHON"' 2>&1 | tail -3
echo "== second set-up wall=$(( $(date +%s) - T1 ))s"
exit $RC
