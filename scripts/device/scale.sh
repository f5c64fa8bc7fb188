#!/usr/bin/env bash
# Step time and memory of a GRPO example at a real model's shape on one GPU, per arm, one run after the other, then
# one record per run in $OUT/results/scale.json (scripts/records.py scale).
#   VSL_COMMIT=<sha> SHAPE=qwen3-8b STEPS=5 RESP=256 ARMS="adapter merge no_lora" bash scripts/device/scale.sh
#   VSL_COMMIT=<sha> SHAPE=qwen3-30b-a3b-8l bash scripts/device/scale.sh
#   VSL_COMMIT=<sha> TRAINER=megatron SHAPE=qwen3-8b bash scripts/device/scale.sh
# Needs the offline bundle and the plugin installed (scripts/device/evidence.sh installs them).
# TRAINER: fsdp (examples/run_qwen3_lora_fsdp.sh, the default) or megatron (examples/run_qwen3_lora_megatron.sh).
# ARMS defaults to all three with FSDP on a dense shape, else to adapter. Megatron needs its stack carried into
# MCORE_DIR (/tmp/mcore) with TE's PyTorch extension built there or carried as a wheel (docs/megatron_gpu.md:
# megatron_carry.sh, megatron_stack.sh build-bg); the stack is installed into MCORE_SITE (/tmp/mcore_site,
# megatron_stack.sh install) unless it is there already, then put on PYTHONPATH with TE attention unfused
# (megatron_env.sh). The Megatron example recomputes no activations, where the FSDP example checkpoints them.
# Arms: adapter = rollout.name=sglang_lora serving the LoRA adapter (the example as it is); merge = the same with
# lora.merge=True (merged weights pushed to SGLang); no_lora = full fine-tuning (LORA_RANK=0) with verl's own
# rollout.name=sglang, the actor's parameters and optimizer offloaded to host memory.
# The model: benchmarks.write_checkpoint(SHAPE, live=True) -- the shape's layers, hidden size and vocab (151936),
# random embeddings / lm_head (and router, on a mixture-of-experts shape), the other weights zero -- with the
# offline tokenizer (vocab 568, tools/offline_assets.py) beside it. Every id that tokenizer produces is < the
# shape's vocab, so each prompt is a valid input; sampled ids above it decode to nothing. A dense layer costs the
# same whatever its values, and the responses have a fixed length (below), so the step's time and memory are those
# of the shape. A mixture-of-experts shape trains an attention-only adapter (model.target_modules=[q_proj,k_proj,
# v_proj,o_proj]; Megatron: model.lora.target_modules=[linear_qkv,linear_proj]): MLP targets are refused
# before any worker starts (verl_glue/config_guards.py). EXPERT_LORA=1 (FSDP, a mixture-of-experts shape) adds
# +actor_rollout_ref.model.target_parameters=[mlp.experts.gate_up_proj,mlp.experts.down_proj]: the experts' LoRA,
# served as SGLang's expert LoRA where the installed SGLang and the rollout allow it (docs/configuration.md).
# Fixed length: rollout.ignore_eos=True is passed, and the stop tokens' lm_head rows are zero, which puts their
# probability near 1e-7 per sampled token (the rollout's SGLang path takes no ignore_eos); every response then runs
# to RESP tokens (the record keeps response_length/clip_ratio to show it).
# GPU memory: scripts/device/mem_sampler.py samples every second during each arm (nvidia-smi's per-process figure,
# by process title); the record's peak_gpu_gib holds the trainer's and SGLang's largest.
# The checkpoint is written once under SCALE_DIR and reused. Each arm runs under RUN_TIMEOUT seconds; ARMS=one
# arm runs just that one; ARMS=none only writes the checkpoint (CPU and disk work that can overlap another GPU job).
# An 8B arm can run longer than one 600 s remote command: run it detached through scripts/device/bg.sh, e.g.
# bg.sh start m8 env SHAPE=qwen3-8b ARMS=merge bash scripts/device/scale.sh, then bg.sh wait m8.
set -uo pipefail
source scripts/device/env.sh
PY=${PYTHON:-python3}
TRAINER=${TRAINER:-fsdp}
case $TRAINER in fsdp | megatron) ;; *) echo "TRAINER=$TRAINER: fsdp or megatron" >&2; exit 2 ;; esac
SHAPE=${SHAPE:-qwen3-8b}; STEPS=${STEPS:-5}; RESP=${RESP:-256}
moe=$("$PY" -c "from verl_sglang_lora.tools.benchmarks import SHAPES; print(int('num_experts' in SHAPES['$SHAPE']))") \
    || { echo "SHAPE=$SHAPE is not a shape of verl_sglang_lora/tools/benchmarks.py" >&2; exit 2; }
# every arm on FSDP with a dense shape; the adapter arm elsewhere (merged weights of an MoE model are refused with
# FSDP, verl_glue/config_guards.py)
if [ "$TRAINER" = fsdp ] && [ "$moe" = 0 ]; then ARMS=${ARMS:-adapter merge no_lora}; else ARMS=${ARMS:-adapter}; fi
EXPERT_LORA=${EXPERT_LORA:-0}
BATCH=${BATCH:-16}; N=${N:-4}; MEM=${MEM:-0.5}; RUN_TIMEOUT=${RUN_TIMEOUT:-900}
SCALE_DIR=${SCALE_DIR:-/tmp/scale}; SCALE_LOGS=${SCALE_LOGS:-/tmp/scale_logs}
EXAMPLE=examples/run_qwen3_lora_$TRAINER.sh
MODEL=$SCALE_DIR/$SHAPE; DATA=$SCALE_DIR/offline/testset
mkdir -p "$LOGDIR/results" "$SCALE_LOGS"
arms=(); [ "$ARMS" = none ] || read -ra arms <<< "$ARMS"

if [ "$TRAINER" = megatron ]; then source scripts/device/megatron_env.sh || exit 1; fi

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

# SGLang's LoRA backend as the run uses it: LORA_BACKEND when given, else the plugin's (lora_backends.py)
backend=${LORA_BACKEND:-$("$PY" -c "from verl_sglang_lora.sglang_contract.lora_backends import declared_lora_backends as d, plugin_lora_backend as p; print(p() or d()[1])" 2>/dev/null)}
common_args() {
    echo "actor_rollout_ref.rollout.ignore_eos=True data.max_response_length=$RESP data.train_batch_size=$BATCH"
    echo "actor_rollout_ref.actor.ppo_mini_batch_size=$BATCH actor_rollout_ref.rollout.gpu_memory_utilization=$MEM"
    echo "data.dataloader_num_workers=0"
    echo "reward.custom_reward_function.path=pkg://verl_sglang_lora.tools.offline_reward"
    echo "reward.custom_reward_function.name=compute_score"
    [ -n "${LORA_BACKEND:-}" ] && echo "++actor_rollout_ref.rollout.engine_kwargs.sglang.lora_backend=$LORA_BACKEND"
    # the reference policy's weights in host memory (without LoRA it is a model of its own; with LoRA verl runs
    # the actor without its adapter instead)
    case $TRAINER in
    fsdp) echo "actor_rollout_ref.ref.fsdp_config.param_offload=True" ;;
    megatron) echo "actor_rollout_ref.ref.megatron.param_offload=True" ;;
    esac
    if [ "$moe" = 1 ]; then
        case $TRAINER in
        fsdp) echo "actor_rollout_ref.model.target_modules=[q_proj,k_proj,v_proj,o_proj]"
              [ "$EXPERT_LORA" = 1 ] && \
                  echo "+actor_rollout_ref.model.target_parameters=[mlp.experts.gate_up_proj,mlp.experts.down_proj]" ;;
        megatron) echo "actor_rollout_ref.model.lora.target_modules=[linear_qkv,linear_proj]" ;;
        esac
    fi
}
arm_args() {
    local engine=fsdp_config; [ "$TRAINER" = megatron ] && engine=megatron
    case $1 in
    adapter) ;;
    merge) echo "actor_rollout_ref.model.lora.merge=True" ;;
    no_lora) echo "actor_rollout_ref.rollout.name=sglang actor_rollout_ref.actor.$engine.param_offload=True"
             echo "actor_rollout_ref.actor.$engine.optimizer_offload=True" ;;
    *) echo "unknown arm $1" >&2; return 1 ;;
    esac
}
for arm in "${arms[@]}"; do
    rank=32; [ "$arm" = no_lora ] && rank=0
    name=scale_${TRAINER}_${SHAPE}_$arm; [ "$EXPERT_LORA" = 1 ] && name=${name}_experts
    log=$SCALE_LOGS/$name.log; mem=$SCALE_LOGS/${name}_mem.csv
    extra=$(arm_args "$arm") || exit 2
    START=$(date +%s)
    # shellcheck disable=SC2046
    PYTHON=$PY MODEL_PATH=$MODEL DATA=$DATA LORA_RANK=$rank STEPS=$STEPS N=$N EXP=$name \
        timeout "$RUN_TIMEOUT" bash "$EXAMPLE" "${SGLANG_GPU_ARGS[@]}" $(common_args) $extra > "$log" 2>&1 &
    run=$!
    "$PY" scripts/device/mem_sampler.py sample --log "$log" --csv "$mem" --interval 1 --until-pid "$run" &
    sampler=$!
    wait "$run"; rc=$?
    wait "$sampler"  # it ends within a second of the run
    # a run ended by its timeout leaves Ray's workers and SGLang's processes holding GPU memory: none may count toward
    # (or crowd out) the next arm
    "$PY" -m ray.scripts.scripts stop --force > /dev/null 2>&1
    echo "== $arm rc=$rc wall=$(( $(date +%s) - START ))s"
    lb=$backend; [ "$arm" = adapter ] || lb=
    targets=all-linear; [ "$moe" = 1 ] && targets=attention
    [ "$moe" = 1 ] && [ "$EXPERT_LORA" = 1 ] && [ "$TRAINER" = fsdp ] && targets=attention+experts
    [ "$arm" = no_lora ] && targets=
    how="triton attention, pytorch sampling, eager"; [ "$TRAINER" = megatron ] && how="$how, TE attention $ATTN_BACKEND"
    "$PY" scripts/records.py scale "$log" --shape "$SHAPE" --arm "$arm" --trainer "$TRAINER" \
        --responses $((BATCH * N)) --lora-backend "$lb" --lora-targets "$targets" --mem-samples "$mem" \
        --out "$LOGDIR/results" \
        --command "TRAINER=$TRAINER SHAPE=$SHAPE STEPS=$STEPS RESP=$RESP ARMS=$arm EXPERT_LORA=$EXPERT_LORA bash scripts/device/scale.sh: LORA_RANK=$rank bash $EXAMPLE $(common_args | tr '\n' ' ')$(echo $extra) ($how)"
    grep -E "Traceback|Error" "$log" | grep -v "UserWarning\|warnings.warn" | tail -3
done
[ ${#arms[@]} -gt 0 ] || exit 0
tar czf "$LOGDIR/scale_logs.tgz" -C "$SCALE_LOGS" .
