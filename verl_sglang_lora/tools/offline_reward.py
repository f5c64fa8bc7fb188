"""Reward for the offline tiny default: verl's GSM8K score, plus a small graded credit below it.

Why: the tiny model is random-init, so verl's GSM8K score is 0 for every sample, every GRPO group has zero
reward variance, every advantage is 0 and the adapter never leaves LoRA's all-zero-B start
(``actor/grad_norm: 0.0`` at every step). Such a run proves the plumbing but not that SGLang serves a *trained*
adapter. The graded credit (the share of digits in the response, at most ``DIGIT_CREDIT``) differs between
samples of a group, so GRPO moves the adapter and the canary and ``training/rollout_probs_diff_*`` check a
non-zero one. A correct answer still scores verl's full 1.0.

Used by examples/run_qwen3_lora_*.sh only when they write the offline assets:
``reward.custom_reward_function.path=pkg://verl_sglang_lora.tools.offline_reward``.
"""

from __future__ import annotations

from typing import Any

DIGIT_CREDIT = 0.5  # the most a wrong answer can get, below verl's 1.0 for a right one


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **_: Any) -> float:
    """verl's GSM8K score where it is non-zero, else ``DIGIT_CREDIT`` x the share of digit characters."""
    from verl.utils.reward_score import gsm8k

    exact = float(gsm8k.compute_score(solution_str, ground_truth))
    if exact > 0:
        return exact
    text = solution_str.strip()
    return DIGIT_CREDIT * sum(c.isdigit() for c in text) / len(text) if text else 0.0
