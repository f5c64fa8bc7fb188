#!/usr/bin/env bash
# FSDP + LoRA + SGLang GRPO with rollout.name=sglang_lora.
#
# FSDP2 by default: with FSDP1 (strategy=fsdp) verl 0.9.1's collect_lora_params hands over no LoRA tensors
# (also with use_orig_params=True); the plugin refuses that empty adapter loudly.
# With no MODEL_PATH/DATA it writes a tiny random Qwen3 + a synthetic GSM8K-style set (no downloads) and
# runs 20 steps of the offline task on one GPU: the reward (critic/score/mean) rises from about 0.02. For the real thing: MODEL_PATH=/models/Qwen3-0.6B DATA=/data/gsm8k NGPUS=4 ROLLOUT_TP=2.
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
LORA_RANK=${LORA_RANK:-32}
EXP=${EXP:-qwen3_lora_sglang_fsdp}
STRATEGY=${STRATEGY:-fsdp2}
ASSETS=${ASSETS:-$PWD/.assets/tiny}

source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
vsl_setup

if [[ -z "${MODEL_PATH:-}" || -z "${DATA:-}" ]]; then
    "$PYTHON" -m verl_sglang_lora.tools.offline_assets --out "$ASSETS" >/dev/null
    MODEL_PATH=${MODEL_PATH:-$ASSETS/model}
    DATA=${DATA:-$ASSETS/testset}
    # the offline task (tools/offline_reward.py): answer in digits; the tiny model's reward goes from ~0.02 to
    # ~0.8 in about 20 steps at this learning rate (docs/learning.md)
    STEPS=${STEPS:-20}; LR=${LR:-2e-4}; N=${N:-8}
    # no DataLoader worker processes for 256 rows: their teardown printed a "worker killed" traceback at the end
    SMALL=(data.train_batch_size=8 data.max_prompt_length=128 data.max_response_length=32 data.dataloader_num_workers=0
           actor_rollout_ref.actor.ppo_mini_batch_size=8 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8
           actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8
           reward.custom_reward_function.path=pkg://verl_sglang_lora.tools.offline_reward reward.custom_reward_function.name=compute_score)
else
    SMALL=(data.train_batch_size=16 data.max_prompt_length=512 data.max_response_length=256
           actor_rollout_ref.actor.ppo_mini_batch_size=16 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
           actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4)
fi
STEPS=${STEPS:-4}; LR=${LR:-3e-6}; N=${N:-4}

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false FLASHINFER_DISABLE_VERSION_CHECK=1

exec "$PYTHON" -m verl.trainer.main_ppo \
    hydra.searchpath=[pkg://verl_sglang_lora.configs] +sglang_lora=default \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=False \
    data.train_files="$DATA/train.parquet" \
    data.val_files="$DATA/test.parquet" \
    data.filter_overlong_prompts=True \
    data.truncation=error \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    actor_rollout_ref.model.lora_rank="$LORA_RANK" \
    actor_rollout_ref.model.lora_alpha="$LORA_RANK" \
    actor_rollout_ref.model.target_modules=all-linear \
    actor_rollout_ref.model.use_remove_padding=False \
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.optim.lr="$LR" \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0 \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.strategy="$STRATEGY" \
    actor_rollout_ref.actor.fsdp_config.strategy="$STRATEGY" \
    actor_rollout_ref.ref.fsdp_config.strategy="$STRATEGY" \
    actor_rollout_ref.actor.fsdp_config.param_offload=False \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \
    actor_rollout_ref.rollout.name=sglang_lora \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.tensor_model_parallel_size="$ROLLOUT_TP" \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    actor_rollout_ref.rollout.n="$N" \
    actor_rollout_ref.rollout.free_cache_engine=True \
    actor_rollout_ref.rollout.calculate_log_probs=True \
    actor_rollout_ref.ref.fsdp_config.param_offload=True \
    trainer.logger='["console"]' \
    trainer.project_name=verl_sglang_lora \
    trainer.experiment_name="$EXP" \
    trainer.n_gpus_per_node="$NGPUS" \
    trainer.nnodes=1 \
    trainer.val_before_train=False \
    trainer.save_freq=-1 \
    trainer.test_freq=-1 \
    trainer.total_training_steps="$STEPS" \
    "${SMALL[@]}" \
    "$@"
