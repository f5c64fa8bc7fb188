#!/usr/bin/env bash
# verl's own LoRA rollout (rollout.name=sglang: each step it unloads the adapter and loads the new tensors into
# SGLang under one name) against the plugin (rollout.name=sglang_lora): the same GRPO example on the offline task
# (tools/offline_reward.py), same seed, LoRA rank 32, path=stock then path=plugin, one after the other so that each
# run is alone on the GPU and its memory figures are its own; then one record per run in
# $OUT/results/stock_vs_plugin.json (scripts/records.py stock_vs_plugin).
#   VSL_COMMIT=<sha> TRAINER=fsdp STEPS=50 SEED=1 bash scripts/device/stock_vs_plugin.sh
#   VSL_COMMIT=<sha> TRAINER=megatron STEPS=4 bash scripts/device/stock_vs_plugin.sh
# The two 50-step runs take longer than one 600 s remote command: run the script detached through scripts/device/bg.sh,
#   bash scripts/device/bg.sh start svp env VSL_COMMIT=<sha> TRAINER=fsdp bash scripts/device/stock_vs_plugin.sh
#   bash scripts/device/bg.sh wait svp          # again while it says "still running"; the last wait copies $OUT
# Settings: learning.sh's adapter arm (the example's offline-task defaults, LR 2e-4, seed S in data.seed and
# rollout.seed, one agent-loop and one reward worker), with actor_rollout_ref.rollout.name=sglang on the stock run
# and the GPU share MEM (0.5, the example's own: each run has the GPU to itself). STEPS defaults to 50 with FSDP and
# to 4 with Megatron (whose steps are slower; the Megatron learning run crosses reward 0.8 near step 12).
# PATHS="stock plugin" by default; PATHS=plugin runs one. Each run is stopped after RUN_TIMEOUT seconds (default
# STEPS x 8 + 420); the next starts once the GPU's memory is released (up to 60 s).
# Beside each run: scripts/device/mem_sampler.py (per-process GPU memory and host RSS every second) and
# scripts/device/lora_sampler.py (the adapters SGLang's /v1/models lists, every 2 s), each row tagged with the step.
# Needs the offline bundle and the plugin installed first, in the call that starts it (scripts/offline_bundle/
# install.sh /tmp/whl /tmp/site; scripts/device/install_plugin.sh); Megatron needs its stack
# (scripts/device/megatron_env.sh, docs/megatron_gpu.md).
set -uo pipefail
source scripts/device/env.sh
PY=${PYTHON:-python3}
TRAINER=${TRAINER:-fsdp}
case $TRAINER in fsdp) steps_default=50 ;; megatron) steps_default=4 ;;
*) echo "TRAINER=$TRAINER: fsdp or megatron" >&2; exit 2 ;; esac
STEPS=${STEPS:-$steps_default}; SEED=${SEED:-1}; LR=${LR:-2e-4}; MEM=${MEM:-0.5}; PATHS=${PATHS:-stock plugin}
# ~3 min to the first step and ~5 s a step alone on one GPU: a hung run must not take the other path's time
RUN_TIMEOUT=${RUN_TIMEOUT:-$((STEPS * 8 + 420))}
LOGS=${SVP_LOGS:-/tmp/svp_logs}; ASSETS_ROOT=${SVP_ASSETS:-/tmp/svp_assets}
EXAMPLE=examples/run_qwen3_lora_$TRAINER.sh
read -ra paths <<< "$PATHS"
for p in "${paths[@]}"; do
    case $p in stock | plugin) ;; *) echo "PATHS: stock and/or plugin, not $p" >&2; exit 2 ;; esac
done
[ -n "${VSL_COMMIT:-}" ] || { echo "set VSL_COMMIT=<sha>: the records name the commit that ran" >&2; exit 2; }
if [ "$TRAINER" = megatron ]; then source scripts/device/megatron_env.sh || exit 1; fi
mkdir -p "$LOGDIR/results" "$LOGS"

path_args() {
    case $1 in
    stock) echo "actor_rollout_ref.rollout.name=sglang" ;;
    plugin) ;;  # the example's own rollout.name=sglang_lora
    esac
}
run_args() {
    echo "data.seed=$SEED actor_rollout_ref.rollout.seed=$SEED actor_rollout_ref.rollout.gpu_memory_utilization=$MEM"
    echo "actor_rollout_ref.rollout.agent.num_workers=1 reward.num_workers=1"
}
for path in "${paths[@]}"; do
    name=svp_${TRAINER}_${path}_s$SEED
    log=$LOGS/$name.log; mem=$LOGS/${name}_mem.csv; lora=$LOGS/${name}_lora.csv
    START=$(date +%s)
    # shellcheck disable=SC2046
    PYTHON=$PY LORA_RANK=32 STEPS=$STEPS LR=$LR EXP=$name ASSETS=$ASSETS_ROOT/$path timeout -k 30 "$RUN_TIMEOUT" \
        bash "$EXAMPLE" "${SGLANG_GPU_ARGS[@]}" $(path_args "$path") $(run_args) > "$log" 2>&1 &
    run=$!
    "$PY" scripts/device/mem_sampler.py sample --log "$log" --csv "$mem" --interval 1 --until-pid "$run" &
    sampler=$!
    "$PY" scripts/device/lora_sampler.py sample --log "$log" --csv "$lora" --interval 2 --until-pid "$run" &
    lora_sampler=$!
    wait "$run"; rc=$?
    wait "$sampler" "$lora_sampler"  # each ends within one interval of the run
    # what a run leaves of Ray and SGLang (a timeout kills only the example) must not hold GPU memory in the next
    "$PY" -m ray.scripts.scripts stop --force > /dev/null 2>&1
    # the next path starts once the GPU is free again (up to 60 s), so its memory figures are its own
    for _ in $(seq 12); do
        used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
        [ -z "$used" ] || [ "$used" -lt 2048 ] && break
        sleep 5
    done
    echo "== $path rc=$rc wall=$(( $(date +%s) - START ))s"
    "$PY" scripts/records.py stock_vs_plugin "$log" --path "$path" --trainer "$TRAINER" --mem-samples "$mem" \
        --lora-samples "$lora" --out "$LOGDIR/results" \
        --command "TRAINER=$TRAINER STEPS=$STEPS SEED=$SEED LR=$LR MEM=$MEM bash scripts/device/stock_vs_plugin.sh: LORA_RANK=32 bash $EXAMPLE $(path_args "$path") $(run_args | tr '\n' ' ')(triton attention, pytorch sampling, eager)"
    grep -E "Traceback|Error" "$log" | grep -v "UserWarning\|warnings.warn" | tail -3
    tar czf "$LOGDIR/stock_vs_plugin_logs.tgz" -C "$LOGS" .  # after each path: a finished path's logs are kept
done
