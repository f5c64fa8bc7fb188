"""Refuse a config the plugin cannot run in verl's driver, before Ray starts and before any worker is built.

verl's ``main_ppo.main`` calls ``verl.utils.config.validate_config(config=...)`` on the composed config before
``run_ppo`` starts Ray; the plugin wraps that function (``trainer_metrics.HOOKS``, installed at registration) so
the same refusals the server actor and the sync client make run there first, on the whole config: the plugin's
settings, the rollout and LoRA guards (``config_guards``) and, for FSDP, the FSDP version.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from verl_sglang_lora import ROLLOUT_NAME
from verl_sglang_lora.verl_glue.config_access import cfg_path

FSDP2_FIX = ("actor_rollout_ref.actor.strategy=fsdp2 actor_rollout_ref.actor.fsdp_config.strategy=fsdp2 "
             "actor_rollout_ref.ref.fsdp_config.strategy=fsdp2")
_WRAPPED = "__sglang_lora_wrapped__"


def driver_problems(config: Any) -> list[str]:
    """Every reason the plugin cannot run ``config`` (a composed ppo_trainer / ppo_megatron_trainer config)."""
    from verl_sglang_lora.runtime.lora_plan import lora_plan
    from verl_sglang_lora.runtime.settings import PluginSettings
    from verl_sglang_lora.verl_glue.config_guards import config_problems  # the topology reader: not at registration

    rollout, model = cfg_path(config, "actor_rollout_ref.rollout"), cfg_path(config, "actor_rollout_ref.model")
    problems: list[str] = []
    try:
        PluginSettings.from_rollout_config(rollout)
    except ValueError as exc:
        problems.append(str(exc))
    problems += config_problems(rollout, model)
    strategy = str(cfg_path(config, "actor_rollout_ref.actor.strategy", "") or "")
    if strategy == "fsdp" and lora_plan(model).as_adapter:
        problems.append("actor_rollout_ref.actor.strategy=fsdp (FSDP1, verl's default) with a LoRA adapter: verl "
                        "hands the rollout an empty adapter under FSDP1 (its collect_lora_params finds no lora_ "
                        f"parameters). Fix: {FSDP2_FIX}.")
    return problems


def check_driver_config(config: Any) -> None:
    """Raise ``UnsupportedConfigError`` listing every problem, for ``rollout.name=sglang_lora`` configs only."""
    from verl_sglang_lora.verl_glue.config_guards import UnsupportedConfigError

    if cfg_path(config, "actor_rollout_ref.rollout.name") != ROLLOUT_NAME:
        return
    problems = driver_problems(config)
    if problems:
        raise UnsupportedConfigError("rollout.name=sglang_lora cannot run this config (refused before any worker "
                                     "starts):\n  - " + "\n  - ".join(problems))


def wrap_validate_config(original: Callable[..., Any]) -> Callable[..., Any]:
    """verl's ``validate_config``, preceded by the plugin's driver check."""
    if getattr(original, _WRAPPED, False):
        return original

    @functools.wraps(original)
    def validate_config(*args: Any, **kwargs: Any) -> Any:
        check_driver_config(kwargs["config"] if "config" in kwargs else args[0])
        return original(*args, **kwargs)

    setattr(validate_config, _WRAPPED, True)
    return validate_config
