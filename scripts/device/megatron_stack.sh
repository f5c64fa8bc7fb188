#!/usr/bin/env bash
# Megatron + LoRA on the GPU host (docs/megatron_gpu.md): install the Megatron wheels carried in /tmp/mcore
# (the TE core wheel split in <= 60 MiB parts: transformer_engine_cu13-*.whl.partNN), build TransformerEngine's
# PyTorch extension from its sdist on the host (no wheel exists; nvcc 13.0 is there), then run the Megatron example.
#   bash scripts/device/megatron_stack.sh build    # -> $OUT/transformer_engine_torch-*.whl (carry it next time)
#   bash scripts/device/megatron_stack.sh run      # STEPS=4, log $OUT/e2e_megatron.log
# Untested on the device so far: written from the facts in docs/megatron_gpu.md.
set -uo pipefail
source scripts/device/env.sh
MC=${MCORE_DIR:-/tmp/mcore}
install_carried() {
    (cd "$MC" && for first in *.whl.part00; do [ -e "$first" ] || continue; base=${first%.part00}
        [ -f "$base" ] || cat "$base".part[0-9][0-9] > "$base"; done)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site --upgrade "$MC"/*.whl 2>&1 \
        | grep -v "Target directory" || true
}
case "${1:-}" in
build)
    install_carried
    START=$(date +%s)
    NVTE_FRAMEWORK=pytorch NVTE_CUDA_ARCHS=90 MAX_JOBS=16 timeout "${BUILD_TIMEOUT:-540}" \
        python3 -m pip wheel -q --no-index --no-build-isolation --no-deps -w "$LOGDIR" \
        "$MC"/transformer_engine_torch-*.tar.gz > "$LOGDIR/te_build.log" 2>&1
    echo "== TE torch build rc=$? in $(( $(date +%s) - START ))s"; tail -5 "$LOGDIR/te_build.log"; ls -la "$LOGDIR"/*.whl 2>/dev/null
    ;;
run)
    install_carried
    python3 -c "import transformer_engine.pytorch, megatron.bridge, megatron.core; print('megatron stack imports')" || exit 1
    START=$(date +%s)
    STEPS=${STEPS:-4} timeout "${E2E_TIMEOUT:-540}" bash examples/run_qwen3_lora_megatron.sh "${SGLANG_GPU_ARGS[@]}" \
        ++actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend=fused \
        > "$LOGDIR/e2e_megatron.log" 2>&1
    echo "== e2e_megatron rc=$? wall=$(( $(date +%s) - START ))s"
    python3 scripts/device/step_table.py "$LOGDIR/e2e_megatron.log"
    grep -E "sglang_lora|Error|Traceback" "$LOGDIR/e2e_megatron.log" | grep -v "UserWarning" | tail -15
    ;;
*) echo "usage: megatron_stack.sh build|run" >&2; exit 2 ;;
esac
