"""Uniform reads from verl's config objects.

verl hands the same settings around as OmegaConf ``DictConfig``, plain ``dict`` and its own dataclasses
(``HFModelConfig``, ``RolloutConfig``) depending on the process and the release, so every reader here
accepts all three.
"""

from __future__ import annotations

from typing import Any


def cfg_get(obj: Any, key: str, default: Any = None) -> Any:
    """``obj[key]`` / ``obj.key`` for dicts, DictConfigs and dataclasses; ``default`` when absent or None."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        value = obj.get(key, default)
    elif hasattr(obj, "get") and not hasattr(obj, "__dataclass_fields__"):
        value = obj.get(key, default)  # DictConfig
    else:
        value = getattr(obj, key, default)
    return default if value is None else value


def cfg_path(obj: Any, dotted: str, default: Any = None) -> Any:
    """Read ``a.b.c`` through nested config objects."""
    current = obj
    for part in dotted.split("."):
        current = cfg_get(current, part, None)
        if current is None:
            return default
    return current


def sglang_rank_count(rollout_config: Any) -> int:
    """Scheduler ranks of one SGLang server (tp x dp): each reads its own serialized payload of a tensor request."""
    return int(cfg_get(rollout_config, "tensor_model_parallel_size", 1)) * int(cfg_get(rollout_config, "data_parallel_size", 1))


def to_plain(value: Any) -> Any:
    """Turn DictConfig/ListConfig (and nested ones) into plain Python containers."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf ships with verl
        pass
    return value
