#!/usr/bin/env bash
# The learning comparison on one GPU: GRPO on the offline task (tools/offline_reward.py) through an example
# (TRAINER=fsdp, the default, or megatron: its carried wheels in /tmp/mcore, docs/megatron_gpu.md),
# every arm x seed at once (each its own Ray instance and SGLang server, GPU memory split between them), then one
# record per run in $OUT/results/learning.json (scripts/records.py learning).
#   VSL_COMMIT=<sha> STEPS=30 LR=2e-4 SEEDS="1 2" ARMS="adapter merge reference" bash scripts/device/learning.sh
# Arms: adapter = rollout.name=sglang_lora serving the LoRA adapter; merge = the same with lora.merge=True (merged
# weights pushed to SGLang, no adapter served); reference = full fine-tuning with verl's own rollout.name=sglang
# (no LoRA, no plugin code on the rollout path). Seed S sets data.seed and rollout.seed.
# Needs the offline bundle installed (scripts/device/evidence.sh installs it).
set -uo pipefail
source scripts/device/env.sh
STEPS=${STEPS:-30}; LR=${LR:-2e-4}; TRAINER=${TRAINER:-fsdp}; EXAMPLE=examples/run_qwen3_lora_$TRAINER.sh; SEEDS=${SEEDS:-1 2}; ARMS=${ARMS:-adapter merge reference}
RUN_TIMEOUT=${RUN_TIMEOUT:-480}
LOGS=${LEARN_LOGS:-/tmp/learn_logs}; ASSETS_ROOT=${LEARN_ASSETS:-/tmp/assets}  # run logs; one assets folder per run
if [ "$TRAINER" = megatron ]; then source scripts/device/megatron_env.sh || exit 1; fi
read -ra arms <<< "$ARMS"; read -ra seeds <<< "$SEEDS"
# each SGLang's mem fraction; SGLang applies it to the free memory it finds at launch, so later starts get less
MEM=$(python3 -c "print(round(0.8 / ${#arms[@]} / ${#seeds[@]}, 3))")
mkdir -p "$LOGDIR/results" "$LOGS"
export RAY_AUTH_MODE=disabled  # concurrent Ray instances would race to write one shared token file
arm_args() {
    case $1 in
    adapter) ;;
    merge) echo "actor_rollout_ref.model.lora.merge=True" ;;
    reference) echo "actor_rollout_ref.rollout.name=sglang" ;;
    esac
}
arm_rank() { if [ "$1" = reference ]; then echo 0; else echo 32; fi; }
log_of() { echo "$LOGS/learn_${TRAINER}_$1_s$2.log"; }
pids=()
for arm in "${arms[@]}"; do
    for seed in "${seeds[@]}"; do
        # one assets folder per run: every example start rewrites its assets
        # shellcheck disable=SC2046
        LORA_RANK=$(arm_rank "$arm") STEPS=$STEPS LR=$LR EXP=learn_${TRAINER}_${arm}_s$seed ASSETS=$ASSETS_ROOT/${arm}_s$seed timeout "$RUN_TIMEOUT" \
            bash "$EXAMPLE" "${SGLANG_GPU_ARGS[@]}" $(arm_args "$arm") data.seed="$seed" \
            actor_rollout_ref.rollout.seed="$seed" actor_rollout_ref.rollout.gpu_memory_utilization="$MEM" \
            actor_rollout_ref.rollout.agent.num_workers=1 reward.num_workers=1 > "$(log_of "$arm" "$seed")" 2>&1 &
        pids+=($!)
        # staggered starts: each Ray instance and SGLang server picks its ports while the last settles, and SGLang
        # sizes its KV pool from the free memory it measures before and after its weight load, so a second server
        # allocating in between makes it miscount ("Not enough memory" at launch: seen with two Megatron runs 5 s
        # apart, whose trainers take longer and less evenly to start)
        sleep "${STAGGER_S:-$([ "$TRAINER" = megatron ] && echo 60 || echo 10)}"
    done
done
for p in "${pids[@]}"; do wait "$p"; done
for arm in "${arms[@]}"; do
    for seed in "${seeds[@]}"; do
        log=$(log_of "$arm" "$seed")
        # the run is one of this script's side-by-side runs: the command that reproduces it is this script's
        python3 scripts/records.py learning "$log" --arm "$arm" --trainer "$TRAINER" --seed "$seed" --out "$LOGDIR/results" \
            --command "TRAINER=$TRAINER STEPS=$STEPS LR=$LR ARMS='$ARMS' SEEDS='$SEEDS' bash scripts/device/learning.sh"
        grep -E "Traceback|Error" "$log" | grep -v "UserWarning\|warnings.warn" | tail -3
    done
done
tar czf "$LOGDIR/learning_logs.tgz" -C "$LOGS" .
