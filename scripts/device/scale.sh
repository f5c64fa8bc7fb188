#!/usr/bin/env bash
# Step time and memory of the FSDP GRPO example at a real model's shape on one GPU, per arm, one run after the
# other, then one record per run in $OUT/results/scale.json (scripts/records.py scale).
#   VSL_COMMIT=<sha> SHAPE=qwen3-8b STEPS=5 RESP=256 ARMS="adapter merge no_lora" bash scripts/device/scale.sh
# Arms: adapter = rollout.name=sglang_lora serving the LoRA adapter (the example as it is); merge = the same with
# lora.merge=True (merged weights pushed to SGLang); no_lora = full fine-tuning (LORA_RANK=0) with verl's own
# rollout.name=sglang, the actor's parameters and optimizer offloaded to host memory.
# The model: benchmarks.write_checkpoint(SHAPE, live=True) -- the shape's layers, hidden size and vocab (151936),
# random embeddings / lm_head, the other weights zero -- with the offline tokenizer (vocab 568,
# tools/offline_assets.py) beside it. Every id that tokenizer produces is < the shape's vocab, so each prompt is a
# valid input; sampled ids above it decode to nothing. A dense layer costs the same whatever its values, and the
# responses have a fixed length (below), so the step's time and memory are those of the shape.
# Fixed length: rollout.ignore_eos=True is passed, and the stop tokens' lm_head rows are zero, which puts their
# probability near 1e-7 per sampled token (the rollout's SGLang path takes no ignore_eos); every response then runs
# to RESP tokens (the record keeps response_length/clip_ratio to show it).
# The checkpoint is written once under SCALE_DIR and reused. Each arm runs under RUN_TIMEOUT seconds; ARMS=one
# arm runs just that one.
set -uo pipefail
source scripts/device/env.sh
PY=${PYTHON:-python3}
SHAPE=${SHAPE:-qwen3-8b}; STEPS=${STEPS:-5}; RESP=${RESP:-256}; ARMS=${ARMS:-adapter merge no_lora}
BATCH=${BATCH:-16}; N=${N:-4}; MEM=${MEM:-0.5}; RUN_TIMEOUT=${RUN_TIMEOUT:-900}
SCALE_DIR=${SCALE_DIR:-/tmp/scale}; SCALE_LOGS=${SCALE_LOGS:-/tmp/scale_logs}
EXAMPLE=examples/run_qwen3_lora_fsdp.sh
MODEL=$SCALE_DIR/$SHAPE; DATA=$SCALE_DIR/offline/testset
mkdir -p "$LOGDIR/results" "$SCALE_LOGS"
read -ra arms <<< "$ARMS"

"$PY" -m verl_sglang_lora.tools.offline_assets --out "$SCALE_DIR/offline" > /dev/null || exit 1
"$PY" - "$SHAPE" "$MODEL" "$SCALE_DIR/offline/model" <<'PYEOF' || exit 1
import json, shutil, sys
from pathlib import Path

shape, model, tiny = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
if not (model / "model.safetensors.index.json").exists():
    from verl_sglang_lora.tools.benchmarks import write_checkpoint

    write_checkpoint(shape, model, live=True)
    # the stop tokens' output rows to zero: their logit 0 against the others' spread, so responses run full length
    tiny_cfg = json.loads((tiny / "config.json").read_text())
    gen = json.loads((tiny / "generation_config.json").read_text())
    stops = sorted({tiny_cfg["eos_token_id"], tiny_cfg["pad_token_id"], *gen["eos_token_id"]})
    cfg = json.loads((model / "config.json").read_text())
    head = "embed_tokens.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"
    index = json.loads((model / "model.safetensors.index.json").read_text())
    name = next(n for n in index["weight_map"] if n.endswith(head))
    from safetensors.torch import load_file, save_file

    shard = model / index["weight_map"][name]
    tensors = load_file(str(shard))
    tensors[name][stops] = 0
    save_file(tensors, str(shard), metadata={"format": "pt"})
for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
    shutil.copy(tiny / f, model / f)
cfg = json.loads((model / "config.json").read_text())
tiny_cfg = json.loads((tiny / "config.json").read_text())
cfg.update({k: tiny_cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")})
(model / "config.json").write_text(json.dumps(cfg, indent=2))
PYEOF

# SGLang's LoRA backend as the run uses it: LORA_BACKEND when given, else SGLang's default
backend=${LORA_BACKEND:-$("$PY" -c "from sglang.srt.server_args import ServerArgs; print(ServerArgs.lora_backend)" 2>/dev/null)}
common_args() {
    echo "actor_rollout_ref.rollout.ignore_eos=True data.max_response_length=$RESP data.train_batch_size=$BATCH"
    echo "actor_rollout_ref.actor.ppo_mini_batch_size=$BATCH actor_rollout_ref.rollout.gpu_memory_utilization=$MEM"
    echo "actor_rollout_ref.ref.fsdp_config.param_offload=True data.dataloader_num_workers=0"
    echo "reward.custom_reward_function.path=pkg://verl_sglang_lora.tools.offline_reward"
    echo "reward.custom_reward_function.name=compute_score"
    [ -n "${LORA_BACKEND:-}" ] && echo "++actor_rollout_ref.rollout.engine_kwargs.sglang.lora_backend=$LORA_BACKEND"
}
arm_args() {
    case $1 in
    adapter) ;;
    merge) echo "actor_rollout_ref.model.lora.merge=True" ;;
    no_lora) echo "actor_rollout_ref.rollout.name=sglang actor_rollout_ref.actor.fsdp_config.param_offload=True"
             echo "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True" ;;
    *) echo "unknown arm $1" >&2; return 1 ;;
    esac
}
for arm in "${arms[@]}"; do
    rank=32; [ "$arm" = no_lora ] && rank=0
    log=$SCALE_LOGS/scale_${SHAPE}_$arm.log
    extra=$(arm_args "$arm") || exit 2
    START=$(date +%s)
    # shellcheck disable=SC2046
    PYTHON=$PY MODEL_PATH=$MODEL DATA=$DATA LORA_RANK=$rank STEPS=$STEPS N=$N EXP=scale_${SHAPE}_$arm \
        timeout "$RUN_TIMEOUT" bash "$EXAMPLE" "${SGLANG_GPU_ARGS[@]}" $(common_args) $extra > "$log" 2>&1
    echo "== $arm rc=$? wall=$(( $(date +%s) - START ))s"
    lb=$backend; [ "$arm" = adapter ] || lb=
    "$PY" scripts/records.py scale "$log" --shape "$SHAPE" --arm "$arm" --trainer fsdp --responses $((BATCH * N)) \
        --lora-backend "$lb" --out "$LOGDIR/results" \
        --command "SHAPE=$SHAPE STEPS=$STEPS RESP=$RESP ARMS=$arm bash scripts/device/scale.sh: LORA_RANK=$rank bash $EXAMPLE $(common_args | tr '\n' ' ')$(echo $extra) (triton attention, pytorch sampling, eager)"
    grep -E "Traceback|Error" "$log" | grep -v "UserWarning\|warnings.warn" | tail -3
done
tar czf "$LOGDIR/scale_logs.tgz" -C "$SCALE_LOGS" .
