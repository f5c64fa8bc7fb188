"""Put the plugin's sync figures into verl's own per-step metrics dict (console, wandb, ... alike).

verl computes its per-step data metrics with ``verl.trainer.ppo.metric_utils.compute_data_metrics``, called by
both trainers (``ray_trainer`` and the v1 ``trainer_base``), which bind the name at import. The plugin wraps the
function in ``metric_utils`` as soon as that module is imported (a post-import hook, so registering from
``import verl`` does not import the trainer) and in any trainer module that already bound it. The wrapper asks
every ``sglang_lora`` server actor (verl names them ``sglang_server_<replica>_<node>``) for the figures of the
step (``SGLangLoRARollout.drain_metrics``) and adds them under ``sglang_lora/...``.

The served-effect check (``runtime/sync/served_effect.py``) needs the batch's rollout, trainer and reference
log-probs, which exist together only in the trainer process, and at a different place in each trainer:

- the legacy trainer (``trainer.use_v1=False``, ``ray_trainer``) passes them to ``compute_data_metrics``;
- the v1 trainer (``trainer.use_v1=True``, verl 0.9.1's default) keeps them in TransferQueue and hands
  ``compute_data_metrics`` none; its ``_compute_advantage`` reads them into one ``DataProto`` and passes it to
  ``compute_advantage_for_multi_trajectories`` (bound in ``trainer_base`` from ``v1.utils``), wrapped here the same
  way: the check runs there, before the update (a fail stops the step before it trains), and its figures join the
  step's ``compute_data_metrics``.

Its settings are read from the run's config as verl's trainer holds it (``self.config``: the full config,
command-line overrides included): the plugin wraps the ``__init__`` of each trainer class (``TRAINER_CLASSES``, the
same post-import hook) to record that config when the trainer is built, and the wrappers above read it from there:
the values the server actors were launched with, with no second channel (environment, actor call) that could drift
from them. Each seam is checked when its module loads (the class is there and built as ``cls(config, ...)``); one
not as expected is said in one loud warning and records nothing. Where no config is recorded the defaults apply, and
only when the job's server actors are the plugin's.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import logging
import sys
from typing import Any, Callable

from verl_sglang_lora import ROLLOUT_NAME
from verl_sglang_lora.runtime.settings import PluginSettings
from verl_sglang_lora.verl_glue.driver_check import wrap_validate_config
from verl_sglang_lora.runtime.sync.metrics import merge_replica_metrics
from verl_sglang_lora.verl_glue.config_access import cfg_path

logger = logging.getLogger(__name__)

METRIC_UTILS = "verl.trainer.ppo.metric_utils"
V1_UTILS = "verl.trainer.ppo.v1.utils"
TRAINER_CLASSES = {  # trainer module: its trainer class, built as ``cls(config, ...)`` with the run's config
    "verl.trainer.ppo.ray_trainer": "RayPPOTrainer",  # trainer.use_v1=False
    "verl.trainer.ppo.v1.trainer_base": "PPOTrainer",  # trainer.use_v1=True (the base of every v1 trainer mode)
    "verl.experimental.separation.ray_trainer": "SeparateRayPPOTrainer",  # a RayPPOTrainer; its own __init__
}
TRAINER_MODULES = tuple(TRAINER_CLASSES)
V1_ADVANTAGE = "compute_advantage_for_multi_trajectories"
SERVER_PREFIX = "sglang_server_"
NO_RUN_CONFIG = "no run config is recorded: the served-effect check runs with its defaults"
_WRAPPED = "__sglang_lora_wrapped__"
_warned: set[str] = set()


class _CheckState:
    """The served-effect check's memory in the trainer process."""

    def __init__(self) -> None:
        self.last_verdict: str | None = None  # the previous step's (log a change of verdict, not every step)
        self.at_advantage = False  # the v1 trainer: the check runs at its advantage step, not in compute_data_metrics
        self.pending: dict[str, float] = {}  # that step's figures, for the step's compute_data_metrics
        self.judge: Any = None  # served_effect.ServedEffectCheck: the run's noise floor and inconclusive streak
        self.config: Any = None  # the run's config, recorded when verl's trainer is built (wrap_trainer_init)


_check = _CheckState()


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
        server: dict[str, float] = {}
        try:
            server = collect_server_metrics()
        except Exception as exc:  # noqa: BLE001 - a metrics read must not stop training, but is never silent
            _warn_once(type(exc).__name__, "sglang_lora: could not read sync metrics from the server actors: "
                       f"{type(exc).__name__}: {exc}")
        metrics.update(server)
        if _check.at_advantage:  # the v1 trainer: checked at its advantage step, on the batch with the log-probs
            metrics.update(_check.pending)
            _check.pending = {}
        else:
            batch = kwargs["batch"] if "batch" in kwargs else (args[0] if args else None)
            metrics.update(served_effect_metrics(batch, _check.config, plugin_servers=bool(server)))
        return metrics

    setattr(compute_data_metrics, _WRAPPED, True)
    compute_data_metrics.__wrapped__ = original  # type: ignore[attr-defined]
    compute_data_metrics.__doc__ = original.__doc__
    return compute_data_metrics


def wrap_compute_advantage(original: Callable[..., Any]) -> Callable[..., Any]:
    """v1 trainer: check the served effect on the ``DataProto`` its advantage step reads from TransferQueue."""
    if getattr(original, _WRAPPED, False):
        return original

    def compute_advantage_for_multi_trajectories(*args: Any, **kwargs: Any) -> Any:
        if _check.config is not None:  # verl's trainer was built in this process; nothing to judge otherwise
            data = kwargs["data"] if "data" in kwargs else (args[0] if args else None)
            _check.at_advantage = True
            _check.pending = served_effect_metrics(data, _check.config, plugin_servers=False)
        return original(*args, **kwargs)

    setattr(compute_advantage_for_multi_trajectories, _WRAPPED, True)
    compute_advantage_for_multi_trajectories.__wrapped__ = original  # type: ignore[attr-defined]
    compute_advantage_for_multi_trajectories.__doc__ = original.__doc__
    return compute_advantage_for_multi_trajectories


def trainer_init_seam(cls: Any) -> str | None:
    """Why ``cls`` is not the seam ``wrap_trainer_init`` expects (a class built as ``cls(config, ...)``), or None."""
    if not isinstance(cls, type):
        return f"{cls!r} is not a class"
    try:
        signature = inspect.signature(cls.__init__)  # a wrapped __init__ gives the signature it wraps
    except (TypeError, ValueError) as exc:
        return f"{cls.__qualname__}.__init__ has no readable signature ({exc})"
    if list(signature.parameters)[:2] != ["self", "config"]:
        return f"{cls.__qualname__}.__init__{signature} does not take (self, config, ...)"
    return None


def wrap_trainer_init(cls: Any) -> Any:
    """Record the run's config (the trainer's ``config`` once its ``__init__`` returns) each time ``cls`` is built."""
    problem = trainer_init_seam(cls)
    if problem is not None:
        _warn_seam(f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls)}.__init__", problem,
                   NO_RUN_CONFIG)
        return cls
    original = cls.__init__
    if getattr(original, _WRAPPED, False):  # wrapped before, or inherited from a wrapped trainer class
        return cls

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        config = getattr(self, "config", None)
        if cfg_path(config, "actor_rollout_ref.rollout") is not None:
            if config is not _check.config:  # another run's trainer: its own noise floor, verdicts and figures
                _check.__init__()
            _check.config = config

    setattr(__init__, _WRAPPED, True)
    cls.__init__ = __init__
    _wrap_subclass_inits(cls)
    return cls


def _wrap_subclass_inits(cls: Any) -> None:
    """Wrap the ``__init__`` of every later subclass of ``cls`` that defines its own: verl's one-step-off and
    fully-async trainers subclass ``SeparateRayPPOTrainer`` with an ``__init__`` that never calls ``super().__init__``."""
    previous = vars(cls).get("__init_subclass__")

    def __init_subclass__(sub: Any, **kwargs: Any) -> None:
        if previous is not None:
            previous.__func__(sub, **kwargs)
        else:
            super(cls, sub).__init_subclass__(**kwargs)
        if "__init__" in vars(sub) and trainer_init_seam(sub) is None:  # not Ray's (self, *args) actor wrapper
            wrap_trainer_init(sub)

    setattr(__init_subclass__, _WRAPPED, True)
    cls.__init_subclass__ = classmethod(__init_subclass__)


def _warn_seam(seam: str, problem: str, effect: str) -> None:
    """One loud warning for a verl name the plugin wraps that is not there as expected."""
    _warn_once("seam:" + seam, f"sglang_lora: verl seam {seam} not as expected: {problem}; {effect}.", loud=True)


def _warn_once(key: str, message: str, loud: bool = False) -> None:
    """``message`` once per ``key``; ``loud``: between banners, for what changes the run's checks."""
    if key not in _warned:
        _warned.add(key)
        banner = "!" * 100
        logger.warning(f"\n{banner}\n{message}\n{banner}" if loud else message)


def served_effect_metrics(batch: Any, config: Any, plugin_servers: bool) -> dict[str, float]:
    """Run the served-effect check on verl's batch; its ``sglang_lora/served_*`` figures, or {} when it cannot run.

    A fail raises ``served_effect.ServedEffectMismatch`` (``served_effect_check=on``) or is logged as an error
    (``warn``). A missing log-prob key is said once, naming the Hydra settings that turn it on.
    """
    from verl_sglang_lora.runtime.sync import served_effect as se  # torch: not at registration

    if config is not None:
        if cfg_path(config, "actor_rollout_ref.rollout.name") != ROLLOUT_NAME:
            return {}  # another rollout: not ours to judge
        settings = PluginSettings.from_rollout_config(config.actor_rollout_ref.rollout)
    elif plugin_servers:
        settings = PluginSettings()
        _warn_once("served_effect_defaults", "sglang_lora: the served-effect check found no config recorded by a "
                   "verl trainer in this process; it runs with its defaults (served_effect_check=on)")
    else:
        return {}
    if settings.served_effect_check == "off" or getattr(batch, "batch", None) is None:
        return {}
    missing = se.missing_keys(batch.batch.keys())
    if missing:
        _warn_once("served_effect_missing:" + ",".join(missing), se.missing_message(missing), loud=True)
        return {}
    if _check.judge is None:
        _check.judge = se.ServedEffectCheck(settings.served_effect_min_snr, settings.served_effect_noise_floor)
    result = _check.judge.step(batch.batch)
    previous, _check.last_verdict = _check.last_verdict, result.verdict
    if result.verdict == "fail" or _check.judge.stuck:
        message = result.failure_message() if result.verdict == "fail" else (
            f"sglang_lora: the served-effect check was conclusive, then inconclusive for {_check.judge.inconclusive_run} "
            f"steps in a row: the trained adapter's effect fell back under the noise floor. {result.summary()}")
        if settings.served_effect_check == "on":
            raise se.ServedEffectMismatch(message)
        logger.error("%s", message)
    elif result.verdict == "inconclusive" and previous != "inconclusive":
        logger.warning("sglang_lora: served-effect check inconclusive: %s. %s", result.reason, result.summary())
    elif result.verdict == "pass" and previous != "pass":
        logger.info("sglang_lora: served-effect check passed: %s", result.summary())
    return result.metrics()


HOOKS: dict[str, tuple[str, Callable[[Callable[..., Any]], Callable[..., Any]], tuple[str, ...]]] = {
    # module defining the function: (its name, the wrapper, the trainer modules that bind it at import)
    METRIC_UTILS: ("compute_data_metrics", wrap_compute_data_metrics, TRAINER_MODULES),
    V1_UTILS: (V1_ADVANTAGE, wrap_compute_advantage, ("verl.trainer.ppo.v1.trainer_base",)),
    # not a metric: the driver's config check, hooked the same way (verl_glue/driver_check.py)
    "verl.utils.config": ("validate_config", wrap_validate_config, ("verl.trainer.main_ppo",)),
    # the trainer classes: their __init__ records the run's config
    **{module: (cls, wrap_trainer_init, ()) for module, cls in TRAINER_CLASSES.items()},
}


def _wrap_in(module: Any) -> bool:
    """Wrap the hooked name of a loaded verl module; False (and one loud warning) where it is missing."""
    attr, wrap, _ = HOOKS[module.__name__]
    if not hasattr(module, attr):
        _warn_seam(f"{module.__name__}.{attr}", "the module has no such name",
                   NO_RUN_CONFIG if module.__name__ in TRAINER_CLASSES else "the plugin does not wrap it")
        return False
    setattr(module, attr, wrap(getattr(module, attr)))
    return True


def _patch_loaded() -> None:
    for module_name, (attr, wrap, binders) in HOOKS.items():
        module = sys.modules.get(module_name)
        if module is None or not _wrap_in(module):
            continue
        for name in binders:
            binder = sys.modules.get(name)
            if binder is not None and hasattr(binder, attr):
                setattr(binder, attr, wrap(getattr(binder, attr)))


class _PatchAfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a hooked verl module through the normal finders, runs it, then wraps its function."""

    def __init__(self) -> None:
        self._inner: dict[str, Any] = {}  # module name -> the loader the normal finders gave it

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname not in HOOKS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        self._inner[fullname] = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: Any) -> Any:
        return self._inner[spec.name].create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner[module.__name__].exec_module(module)
        _wrap_in(module)


def install() -> None:
    """Idempotent: wrap now where verl's modules are loaded, else when they are."""
    _patch_loaded()
    if any(m not in sys.modules for m in HOOKS) and not any(isinstance(f, _PatchAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterImport())
