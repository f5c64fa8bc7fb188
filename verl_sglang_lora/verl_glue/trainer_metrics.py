"""Put the plugin's sync figures into verl's own per-step metrics dict (console, wandb, ... alike).

verl computes its per-step data metrics with ``verl.trainer.ppo.metric_utils.compute_data_metrics``, called by
both trainers (``ray_trainer`` and the v1 ``trainer_base``), which bind the name at import. The plugin wraps the
function in ``metric_utils`` as soon as that module is imported (a post-import hook, so registering from
``import verl`` does not import the trainer) and in any trainer module that already bound it. The wrapper asks
every ``sglang_lora`` server actor (verl names them ``sglang_server_<replica>_<node>``) for the figures of the
step (``SGLangLoRARollout.drain_metrics``) and adds them under ``sglang_lora/...``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
from typing import Any, Callable

from verl_sglang_lora.runtime.sync.metrics import merge_replica_metrics

logger = logging.getLogger(__name__)

METRIC_UTILS = "verl.trainer.ppo.metric_utils"
TRAINER_MODULES = ("verl.trainer.ppo.ray_trainer", "verl.trainer.ppo.v1.trainer_base",
                   "verl.experimental.separation.ray_trainer")
SERVER_PREFIX = "sglang_server_"
_WRAPPED = "__sglang_lora_wrapped__"
_warned: set[str] = set()


def server_actor_names() -> list[str]:
    """The rollout server actors of this job (reward/teacher servers excluded)."""
    import ray

    if not ray.is_initialized():
        return []
    names = [a["name"] if isinstance(a, dict) else a for a in ray.util.list_named_actors(all_namespaces=False)]
    return sorted(n for n in names if n.startswith(SERVER_PREFIX) and not n.startswith(
        (SERVER_PREFIX + "reward_", SERVER_PREFIX + "teacher_")))


def collect_server_metrics(timeout_s: float = 30.0) -> dict[str, float]:
    """``drain_metrics`` of every plugin server actor, merged; {} when none is found (not an sglang_lora run)."""
    import ray

    refs = []
    for name in server_actor_names():
        actor = ray.get_actor(name)
        try:
            refs.append(actor.drain_metrics.remote())
        except AttributeError:  # a stock SGLang/vLLM server: not ours
            continue
    if not refs:
        return {}
    return merge_replica_metrics(ray.get(refs, timeout=timeout_s))


def wrap_compute_data_metrics(original: Callable[..., dict]) -> Callable[..., dict]:
    if getattr(original, _WRAPPED, False):
        return original

    def compute_data_metrics(*args: Any, **kwargs: Any) -> dict:
        metrics = original(*args, **kwargs)
        try:
            metrics.update(collect_server_metrics())
        except Exception as exc:  # noqa: BLE001 - a metrics read must not stop training, but is never silent
            key = type(exc).__name__
            if key not in _warned:
                _warned.add(key)
                logger.warning("sglang_lora: could not read sync metrics from the server actors: %s: %s", key, exc)
        return metrics

    setattr(compute_data_metrics, _WRAPPED, True)
    compute_data_metrics.__wrapped__ = original  # type: ignore[attr-defined]
    compute_data_metrics.__doc__ = original.__doc__
    return compute_data_metrics


def _patch_loaded() -> None:
    mu = sys.modules.get(METRIC_UTILS)
    if mu is None or not hasattr(mu, "compute_data_metrics"):
        return
    mu.compute_data_metrics = wrap_compute_data_metrics(mu.compute_data_metrics)
    for name in TRAINER_MODULES:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "compute_data_metrics"):
            module.compute_data_metrics = wrap_compute_data_metrics(module.compute_data_metrics)


class _PatchAfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``metric_utils`` through the normal finders, runs it, then wraps its function."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname != METRIC_UTILS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        self._inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        module.compute_data_metrics = wrap_compute_data_metrics(module.compute_data_metrics)


def install() -> None:
    """Idempotent: wrap now where verl's metric code is loaded, else when it is."""
    _patch_loaded()
    if METRIC_UTILS not in sys.modules and not any(isinstance(f, _PatchAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterImport())
