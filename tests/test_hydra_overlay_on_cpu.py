"""The overlay composes with verl's real ppo_trainer and ppo_megatron_trainer trees, and the result converts
to verl's own config dataclasses."""

from __future__ import annotations

import os

import pytest

hydra = pytest.importorskip("hydra")


def _verl_config_dir() -> str:
    import verl

    return os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def _compose(config_name: str, overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=_verl_config_dir(), version_base=None):
        return compose(
            config_name=config_name,
            overrides=["hydra.searchpath=[pkg://verl_sglang_lora.configs]", "+sglang_lora=default", *overrides],
        )


@pytest.mark.parametrize(
    "config_name, lora_overrides",
    [
        ("ppo_trainer", ["actor_rollout_ref.model.lora_rank=32", "actor_rollout_ref.model.lora_alpha=32"]),
        ("ppo_megatron_trainer", ["actor_rollout_ref.model.lora.rank=32", "actor_rollout_ref.model.lora.alpha=32"]),
    ],
)
def test_overlay_composes_and_converts(config_name, lora_overrides, tiny_qwen3):
    pytest.importorskip("verl")
    if not os.path.exists(os.path.join(_verl_config_dir(), f"{config_name}.yaml")):
        pytest.skip(f"{config_name}.yaml not in this verl release")
    cfg = _compose(config_name, [f"actor_rollout_ref.model.path={tiny_qwen3}", *lora_overrides])
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.name == "sglang_lora" and rollout.mode == "async"
    assert cfg.actor_rollout_ref.model.external_lib == "verl_sglang_lora.register"
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES == "verl_sglang_lora.register"

    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import HFModelConfig, RolloutConfig

    from verl_sglang_lora.runtime.lora_plan import lora_plan
    from verl_sglang_lora.runtime.settings import PluginSettings

    # as verl's workers do: the config nodes carry their own _target_
    rollout_dc = omega_conf_to_dataclass(rollout)
    model_dc = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    assert isinstance(rollout_dc, RolloutConfig) and isinstance(model_dc, HFModelConfig)
    assert rollout_dc.name == "sglang_lora"
    assert lora_plan(model_dc).as_adapter and lora_plan(model_dc).rank == 32
    assert PluginSettings.from_rollout_config(rollout_dc).http_timeout_s == 300.0  # the overlay's value arrived


def test_unknown_plugin_setting_is_named():
    from verl_sglang_lora.runtime.settings import PluginSettings

    with pytest.raises(ValueError, match=r"engine_kwargs\.sglang_lora has unknown key"):
        PluginSettings.from_rollout_config({"engine_kwargs": {"sglang_lora": {"bucket_megabytes": 1}}})


@pytest.mark.parametrize("settings, named", [
    ({"bucket_mb": 64}, r"bucket_mb was removed: .* Fix: delete the key"),
    ({"http_timeout_s": 0}, r"http_timeout_s must be > 0"),
    ({"canary_min_delta": -0.1}, r"canary_min_delta must be >= 0"),
])
def test_bad_plugin_settings_are_refused_with_the_key(settings, named):
    from verl_sglang_lora.runtime.settings import PluginSettings

    with pytest.raises(ValueError, match=named):
        PluginSettings.from_rollout_config({"engine_kwargs": {"sglang_lora": settings}})
