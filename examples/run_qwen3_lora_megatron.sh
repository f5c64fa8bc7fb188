#!/usr/bin/env bash
# Megatron + LoRA + SGLang GRPO with rollout.name=sglang_lora.
# Megatron reads model.lora.{rank,alpha}; the config tree is ppo_megatron_trainer.
# With no MODEL_PATH/DATA it uses the tiny offline model + synthetic set and one GPU.
# The served-effect check (docs/reliability.md) needs the rollout's log-probs (rollout.calculate_log_probs=True)
# and the base model's (a reference policy: use_kl_loss=True; kl_loss_coef=0 leaves the loss unchanged).
# Set-up, in this order (README, The two commands): (1) the GPU check, seconds, nothing built: without a usable GPU
# one message and exit code 2; (2) the tested stack: this python if it has it, else an env built once from the
# constraints file or the offline bundle (.venv-gpu, VSL_GPU_ENV=DIR, VSL_BUNDLE=DIR|none) and reused after
# (VSL_SKIP_SETUP=1: use $PYTHON as it is); (3) the package check in that env; (4) the run with its python.
set -euo pipefail

PYTHON=${PYTHON:-python3}
NGPUS=${NGPUS:-1}
ROLLOUT_TP=${ROLLOUT_TP:-1}
ACTOR_TP=${ACTOR_TP:-1}
ACTOR_PP=${ACTOR_PP:-1}
LORA_RANK=${LORA_RANK:-32}
# TE attention: flash (verl's default) needs the flash-attn package; fused is cuDNN; unfused needs neither (the
# H200 run used unfused: fused failed in the backward there with a self-built TE, docs/megatron_gpu.md)
ATTN_BACKEND=${ATTN_BACKEND:-flash}
EXP=${EXP:-qwen3_lora_sglang_megatron}
ASSETS=${ASSETS:-$PWD/.assets/tiny}

source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
vsl_setup --megatron --attn-backend "$ATTN_BACKEND"

if [[ -z "${MODEL_PATH:-}" || -z "${DATA:-}" ]]; then
    "$PYTHON" -m verl_sglang_lora.tools.offline_assets --out "$ASSETS" >/dev/null
    MODEL_PATH=${MODEL_PATH:-$ASSETS/model}
    DATA=${DATA:-$ASSETS/testset}
    BATCH=8; PROMPT=128; RESPONSE=32; MICRO=8
    # the offline task (tools/offline_reward.py): answer in digits; the reward rises from about 0.02 (docs/learning.md)
    STEPS=${STEPS:-20}; LR=${LR:-2e-4}; N=${N:-8}
    # no DataLoader worker processes for 256 rows: their teardown printed a "worker killed" traceback at the end
    REWARD=(reward.custom_reward_function.path=pkg://verl_sglang_lora.tools.offline_reward reward.custom_reward_function.name=compute_score
            data.dataloader_num_workers=0)
else
    BATCH=16; PROMPT=512; RESPONSE=256; MICRO=4
    REWARD=()
fi
STEPS=${STEPS:-4}; LR=${LR:-3e-6}; N=${N:-4}

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false FLASHINFER_DISABLE_VERSION_CHECK=1

exec "$PYTHON" -m verl.trainer.main_ppo \
    --config-name=ppo_megatron_trainer \
    hydra.searchpath=[pkg://verl_sglang_lora.configs] +sglang_lora=default \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=False \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    data.train_batch_size=$BATCH \
    data.max_prompt_length=$PROMPT \
    data.max_response_length=$RESPONSE \
    data.filter_overlong_prompts=True \
    data.truncation=error \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    actor_rollout_ref.model.lora.rank="$LORA_RANK" \
    actor_rollout_ref.model.lora.alpha="$LORA_RANK" \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size="$ACTOR_TP" \
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size="$ACTOR_PP" \
    actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend="$ATTN_BACKEND" \
    ++actor_rollout_ref.actor.megatron.override_transformer_config.gradient_accumulation_fusion=False \
    ++actor_rollout_ref.ref.megatron.override_transformer_config.gradient_accumulation_fusion=False \
    actor_rollout_ref.actor.optim.lr="$LR" \
    actor_rollout_ref.actor.ppo_mini_batch_size=$BATCH \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0 \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.rollout.name=sglang_lora \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.tensor_model_parallel_size="$ROLLOUT_TP" \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    actor_rollout_ref.rollout.n="$N" \
    actor_rollout_ref.rollout.free_cache_engine=True \
    actor_rollout_ref.rollout.calculate_log_probs=True \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$MICRO \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=$MICRO \
    trainer.logger='["console"]' \
    trainer.project_name=verl_sglang_lora \
    trainer.experiment_name="$EXP" \
    trainer.n_gpus_per_node="$NGPUS" \
    trainer.nnodes=1 \
    trainer.val_before_train=False \
    trainer.save_freq=-1 \
    trainer.test_freq=-1 \
    trainer.total_training_steps="$STEPS" \
    "${REWARD[@]}" \
    "$@"
