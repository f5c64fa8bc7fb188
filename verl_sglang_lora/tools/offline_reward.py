"""The offline task's reward: answer in digits.

The examples' offline default trains the tiny random Qwen3 of ``tools/offline_assets.py`` on its synthetic word
problems. A random model never gets a sum right, so verl's GSM8K score alone is 0 for every sample and GRPO has
nothing to learn from. This reward keeps verl's 1.0 for a right answer and otherwise scores the share of the
response's non-space characters that are digits:

* not solved by the base model: it samples close to uniformly over about 1,000 tokens, of which 10 are digits,
  so its mean reward is about 0.02;
* learnable by a LoRA adapter: one direction added to the last hidden state raises all ten digit logits at once,
  and every response has a graded score, so each GRPO group has reward variance and non-zero advantages. The
  adapter must change the sampled text, so a wrongly served adapter (stale, mis-scaled, not applied) shows up in
  the reward curve.

It measures format learning, not arithmetic. Used by ``examples/run_qwen3_lora_*.sh`` when they write the offline
assets: ``reward.custom_reward_function.path=pkg://verl_sglang_lora.tools.offline_reward``.
"""

from __future__ import annotations

from typing import Any


def digit_share(text: str) -> float:
    """The share of the non-space characters of ``text`` that are digits (0 for an empty answer)."""
    chars = "".join(text.split())
    return sum(c.isdigit() for c in chars) / len(chars) if chars else 0.0


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **_: Any) -> float:
    """verl's GSM8K score where it is non-zero, else the digit share of the response."""
    from verl.utils.reward_score import gsm8k

    exact = float(gsm8k.compute_score(solution_str, ground_truth))
    return exact if exact > 0 else digit_share(solution_str)
