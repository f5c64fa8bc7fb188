"""``verl-sglang-lora doctor``: check a run's config against the installed verl / SGLang on a CPU-only host.

Every layer of the failure chain (docs/failure_chain.md) used to surface on the GPU, minutes into a run, as
an error that did not name the setting. The doctor runs the plugin's own contract code on the composed
config before anything is allocated: the registries in a fresh interpreter, the Hydra overlay, the LoRA
launch args, the target modules against the checkpoint's tensor names (safetensors headers, no weights
loaded), the request shape of the installed SGLang and the sleep/wake tag plan. No model is loaded and no
GPU is touched; SGLang itself is imported only in a subprocess, and read from its source when a CPU host
cannot import it (no triton / CUDA libraries).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OK, WARN, FAIL = "OK", "WARN", "FAIL"

PACKAGES = ("verl", "sglang", "torch", "ray", "transformers", "peft", "hydra-core")
REQUIRED = frozenset({"verl", "sglang", "torch", "ray", "transformers", "hydra-core"})

# verl x SGLang releases this plugin is built against; anything else is "untested". The cell text is the
# short summary; docs/compatibility.md is the reference.
MATRIX_VERL = ("0.8.0", "0.9.0", "0.9.1")
MATRIX_SGLANG = ("0.5.8", "0.5.12", "0.5.18", "0.5.23")
VERL_SGLANG_PIN = {"0.8.0": "0.5.8", "0.9.0": "0.5.8", "0.9.1": "0.5.12"}
SGLANG_REQUEST = {
    "0.5.8": "serialized_tensors: str",
    "0.5.12": "serialized_tensors: str",
    "0.5.18": "serialized_named_tensors: List[bytes]",
    "0.5.23": "serialized_named_tensors: List[bytes]",
}

OVERLAY_SEARCHPATH = "hydra.searchpath=[pkg://verl_sglang_lora.configs]"
OVERLAY_GROUP = "+sglang_lora=default"
REGISTER_MODULE = "verl_sglang_lora.register"
PROBE_PREFIX = "VSL_PROBE="
PROBE_TIMEOUT_S = 180

REGISTRATION_PROBE = (
    "import json, verl\n"
    "from verl_sglang_lora.registration import registration_state\n"
    f"print({PROBE_PREFIX!r} + json.dumps(registration_state()))\n"
)
SGLANG_PROBE = (
    "import dataclasses, json\n"
    "from verl_sglang_lora.sglang_contract.lora_request import request_shape\n"
    "from verl_sglang_lora.sglang_contract.launch_args import supported_target_modules\n"
    "shape = dataclasses.asdict(request_shape())\n"
    f"print({PROBE_PREFIX!r} + json.dumps({{'shape': shape, 'supported': supported_target_modules()}}))\n"
)


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""


# ---- installed versions --------------------------------------------------------------------------------
def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _base(version: str) -> str:
    try:
        from packaging.version import Version

        return Version(version).base_version
    except Exception:
        return version


def matrix_cell(verl_version: str | None, sglang_version: str | None) -> tuple[str, str]:
    """(status, text) of the compatibility-matrix cell for an installed pair."""
    if not verl_version or not sglang_version:
        return FAIL, "verl and SGLang must both be installed"
    v, s = _base(verl_version), _base(sglang_version)
    if v not in MATRIX_VERL or s not in MATRIX_SGLANG:
        return WARN, (
            f"verl {verl_version} x SGLang {sglang_version}: untested (matrix: verl {'/'.join(MATRIX_VERL)} x "
            f"SGLang {'/'.join(MATRIX_SGLANG)})"
        )
    notes = [f"request field {SGLANG_REQUEST[s]}"]
    if VERL_SGLANG_PIN.get(v) == s:
        notes.append(f"verl {v}'s own [sglang] pin")
    pre = "" if (v, s) == (verl_version, sglang_version) else " (pre/post release of the matrix version)"
    return OK, f"verl {v} x SGLang {s}: in matrix{pre}; " + "; ".join(notes)


def verl_loads_entry_points() -> bool | None:
    """Whether the installed verl loads ``verl.plugins`` entry points on import (0.9.0+); read, not imported."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.origin:
        return None
    try:
        return "verl.plugins" in Path(spec.origin).read_text(encoding="utf-8")
    except OSError:
        return None


# ---- subprocess probes -----------------------------------------------------------------------------------
class Probe:
    """A python snippet run in a fresh interpreter, started early so it overlaps the in-process checks."""

    def __init__(self, code: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )

    def result(self, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[Any, str]:
        """(parsed payload or None, stderr tail)."""
        try:
            out, err = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return None, f"timed out after {timeout_s:.0f}s"
        for line in reversed(out.splitlines()):
            if line.startswith(PROBE_PREFIX):
                return json.loads(line[len(PROBE_PREFIX):]), ""
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        return None, (lines[-1] if lines else f"exit code {self.proc.returncode}, no output")


# ---- SGLang read from its source (CPU hosts that cannot import it) -------------------------------------
def sglang_source_root() -> Path | None:
    spec = importlib.util.find_spec("sglang")  # locating a top-level package does not execute it
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _class_fields(classes: dict[str, ast.ClassDef], name: str) -> tuple[list[str], bool]:
    """(annotated field names incl. those of same-module bases, whether it is a msgspec struct)."""
    node = classes[name]
    fields: list[str] = []
    is_msgspec = any(
        isinstance(k, ast.keyword) and k.arg in ("kw_only", "tag", "omit_defaults") for k in node.keywords
    )
    for base in node.bases:
        base_name = ast.unparse(base)
        if base_name.endswith("Struct"):
            is_msgspec = True
        elif base_name in classes:
            base_fields, base_msgspec = _class_fields(classes, base_name)
            fields += [f for f in base_fields if f not in fields]
            is_msgspec = is_msgspec or base_msgspec
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if "ClassVar" not in ast.unparse(stmt.annotation) and stmt.target.id not in fields:
                fields.append(stmt.target.id)
    decorated = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
    return fields, is_msgspec and not decorated


def request_shape_from_source(root: Path) -> Any:
    """The installed request struct's shape, from ``io_struct.py`` parsed as text (the same judgement as
    :func:`request_shape`, which is applied to a stand-in class with the parsed fields)."""
    from verl_sglang_lora.sglang_contract.lora_request import REQUEST_CLASS, request_shape

    tree = ast.parse((root / "srt" / "managers" / "io_struct.py").read_text(encoding="utf-8"))
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    if REQUEST_CLASS not in classes:
        raise TypeError(f"the installed SGLang has no io_struct.{REQUEST_CLASS}; it cannot load LoRA from tensors")
    names, is_msgspec = _class_fields(classes, REQUEST_CLASS)
    stand_in = dataclasses.make_dataclass(REQUEST_CLASS, [(n, Any) for n in names])
    return dataclasses.replace(request_shape(stand_in), msgspec=is_msgspec)


def supported_modules_from_source(root: Path) -> list[str] | None:
    for rel in (("srt", "utils", "common.py"), ("srt", "utils.py")):
        path = root.joinpath(*rel)
        if not path.exists():
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "SUPPORTED_LORA_TARGET_MODULES" for t in node.targets
            ):
                return list(ast.literal_eval(node.value))
    return None


# ---- config ------------------------------------------------------------------------------------------------
def verl_config_dir() -> str:
    spec = importlib.util.find_spec("verl")
    return str(Path(spec.origin).parent / "trainer" / "config")


def overlay_overrides(user: list[str]) -> list[str]:
    """The overlay overrides followed by the user's, without duplicating an overlay override the user gave."""
    out = []
    if not any(o.startswith("hydra.searchpath=") for o in user):
        out.append(OVERLAY_SEARCHPATH)
    if not any(o.lstrip("+").startswith("sglang_lora=") for o in user):
        out.append(OVERLAY_GROUP)
    return out + list(user)


def compose_config(config_name: str, overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
            return compose(config_name=config_name, overrides=overlay_overrides(overrides))
    finally:
        GlobalHydra.instance().clear()


# ---- the checks ------------------------------------------------------------------------------------------
class Doctor:
    """Runs the checks in order; later checks use what earlier ones established and are skipped without it."""

    def __init__(self, overrides: list[str], config_name: str = "ppo_trainer", ray: bool = False) -> None:
        self.overrides = list(overrides)
        self.config_name = config_name
        self.ray = ray
        self.checks: list[Check] = []
        self.versions = {p: installed_version(p) for p in PACKAGES}
        self.sglang_probe: Probe | None = None
        self._sglang: tuple[Any, str] | None = None
        self._supported: list[str] | None = None
        self._section = 0
        self._order: list[int] = []

    def add(self, name: str, status: str, detail: str, fix: str = "") -> None:
        self.checks.append(Check(name, status, " ".join(detail.split()), " ".join(fix.split())))
        self._order.append(self._section)

    def run(self) -> list[Check]:
        registration = Probe(REGISTRATION_PROBE) if self.versions["verl"] else None
        self.sglang_probe = Probe(SGLANG_PROBE) if self.versions["sglang"] else None
        # The probes run while the config is checked in-process; rows are shown in section order.
        try:
            self._section = 0
            self.check_versions()
            self._section = 2
            if self.versions["verl"] and self.versions["hydra-core"]:
                self.check_config()
            self._section = 1
            if registration is not None:
                self.guarded("registration (fresh interpreter)", self.check_registration, registration)
            self._section = 3
            if self.sglang_probe is not None:
                self.guarded("request shape", self.check_request_shape)
        finally:
            for probe in (registration, self.sglang_probe):
                if probe is not None and probe.proc.poll() is None:
                    probe.proc.kill()
                    probe.proc.communicate()
        order = sorted(range(len(self.checks)), key=lambda i: self._order[i])
        return [self.checks[i] for i in order]

    def guarded(self, name: str, fn: Any, *args: Any) -> Any:
        """Run one check; an unexpected exception becomes a FAIL row instead of a traceback."""
        try:
            return fn(*args)
        except Exception as exc:
            self.add(name, FAIL, f"{type(exc).__name__}: {exc}", "unexpected error in the check; please report it")
            return None

    # versions ---------------------------------------------------------------------------------------------
    def check_versions(self) -> None:
        for pkg in PACKAGES:
            version = self.versions[pkg]
            if version:
                self.add(f"version {pkg}", OK, version)
            elif pkg in REQUIRED:
                self.add(f"version {pkg}", FAIL, "not installed", f"pip install {pkg} (see README, Install)")
            else:
                self.add(f"version {pkg}", WARN, "not installed (FSDP LoRA needs it)", f"pip install {pkg}")
        status, text = matrix_cell(self.versions["verl"], self.versions["sglang"])
        self.add("compat matrix", status, text, "" if status == OK else "see docs/compatibility.md")

    # registration -----------------------------------------------------------------------------------------
    def check_registration(self, probe: Probe) -> None:
        eps = [e for e in importlib.metadata.entry_points(group="verl.plugins") if e.name == "sglang_lora"]
        loads = verl_loads_entry_points()
        if not eps:
            self.add("entry point", FAIL, "no `verl.plugins` entry point named sglang_lora",
                     "pip install verl-sglang-lora (a source checkout on PYTHONPATH has no entry point)")
        elif loads is False:
            self.add("entry point", WARN, f"installed, but verl {self.versions['verl']} does not load verl.plugins",
                     "keep the overlay (+sglang_lora=default): its external_lib and VERL_USE_EXTERNAL_MODULES register")
        else:
            self.add("entry point", OK, f"{eps[0].name} = {eps[0].value}")

        state, err = probe.result()
        policy = os.environ.get("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
        if state and all(state.values()):
            self.add("registration (fresh interpreter)", OK, "`import verl` fills " + ", ".join(state))
            return
        detail = f"after `import verl`: {state}" if state else f"probe failed: {err}"
        if policy not in ("auto", "") and "sglang_lora" not in policy:
            fix = f"VERL_USE_EXTERNAL_PLUGINS={policy!r} excludes sglang_lora: unset it or add sglang_lora"
        elif loads is False:
            self.add("registration (fresh interpreter)", WARN, detail,
                     "expected on this verl: the overlay's external_lib/VERL_USE_EXTERNAL_MODULES register instead")
            return
        else:
            fix = ("`python -c 'import verl_sglang_lora.register'` shows why registration fails; reinstall "
                   "verl-sglang-lora into this interpreter")
        self.add("registration (fresh interpreter)", FAIL, detail, fix)

    def check_ray(self, env_vars: dict[str, str]) -> None:
        import ray

        started = not ray.is_initialized()
        if started:
            ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": env_vars} if env_vars else None)
        try:
            @ray.remote
            def probe() -> dict[str, bool]:
                import verl  # noqa: F401  (loads the entry points / VERL_USE_EXTERNAL_MODULES)

                from verl_sglang_lora.registration import registration_state

                return registration_state()

            state = ray.get(probe.remote(), timeout=PROBE_TIMEOUT_S)
        finally:
            if started:
                ray.shutdown()
        if all(state.values()):
            self.add("registration (Ray worker)", OK, "a Ray worker's `import verl` fills " + ", ".join(state))
        else:
            self.add("registration (Ray worker)", FAIL, f"in a Ray worker: {state}",
                     f"keep ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES={REGISTER_MODULE} "
                     f"(set by {OVERLAY_GROUP}) and install the plugin on every node")

    # config -----------------------------------------------------------------------------------------------
    def check_config(self) -> None:
        if importlib.util.find_spec("verl_sglang_lora.configs") is None:
            self.add("config overlay", FAIL, "package verl_sglang_lora.configs not importable",
                     "pip install verl-sglang-lora (pkg://verl_sglang_lora.configs comes with the install)")
            return
        try:
            cfg = compose_config(self.config_name, self.overrides)
        except Exception as exc:
            self.add("config compose", FAIL, f"{self.config_name}: {type(exc).__name__}: {exc}",
                     "fix the override named above; the overlay is added for you (do not repeat +sglang_lora)")
            return
        self.add("config compose", OK, f"{self.config_name} + {OVERLAY_GROUP} + {len(self.overrides)} override(s)")
        self.guarded("overlay", self.check_overlay, cfg)
        if self.ray:
            env = _plain(_select(cfg, "ray_kwargs.ray_init.runtime_env.env_vars")) or {}
            section, self._section = self._section, 1
            self.guarded("registration (Ray worker)", self.check_ray, {k: str(v) for k, v in env.items()})
            self._section = section
        rollout = self.guarded("rollout config", self.check_rollout_config, cfg)
        rollout_cfg = rollout if rollout is not None else cfg.actor_rollout_ref.rollout  # checks accept both
        model_cfg = cfg.actor_rollout_ref.model
        plan = self.guarded("lora", self.check_lora, cfg)
        settings = self.guarded("plugin settings", self.check_settings, rollout_cfg)
        self.guarded("verl guards", self.check_guards, rollout_cfg, model_cfg)
        if plan is None:
            return
        targets = None
        if settings is not None:
            targets = self.guarded("launch args", self.check_launch_args, plan, settings)
        self.guarded("model", self.check_model, model_cfg, plan, targets)
        self.guarded("memory tags", self.check_memory, plan, cfg)

    def check_overlay(self, cfg: Any) -> None:
        name = _select(cfg, "actor_rollout_ref.rollout.name")
        lib = _select(cfg, "actor_rollout_ref.model.external_lib")
        env = _select(cfg, "ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES")
        if name != "sglang_lora":
            self.add("overlay", FAIL, f"actor_rollout_ref.rollout.name={name}",
                     "drop the override of actor_rollout_ref.rollout.name (the overlay sets sglang_lora)")
            return
        wanted = (("actor_rollout_ref.model.external_lib", lib), ("ray_kwargs...VERL_USE_EXTERNAL_MODULES", env))
        missing = [k for k, v in wanted if REGISTER_MODULE not in str(v)]
        if missing:
            self.add("overlay", WARN, f"rollout.name=sglang_lora but {missing} do not import {REGISTER_MODULE}",
                     f"keep {OVERLAY_GROUP}; without these only the entry point registers sglang_lora")
        else:
            self.add("overlay", OK, f"rollout.name=sglang_lora; external_lib and Ray env import {REGISTER_MODULE}")

    def check_rollout_config(self, cfg: Any) -> Any:
        from verl.utils.config import omega_conf_to_dataclass

        try:
            rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
        except Exception as exc:
            self.add("rollout config", FAIL, f"verl rejects actor_rollout_ref.rollout: {type(exc).__name__}: {exc}",
                     "fix the rollout setting named above")
            return None
        self.add("rollout config", OK,
                 f"{type(rollout).__name__}(name={rollout.name}, mode={rollout.mode}, "
                 f"tp={rollout.tensor_model_parallel_size}, free_cache_engine={rollout.free_cache_engine})")
        return rollout

    def check_lora(self, cfg: Any) -> Any:
        from verl_sglang_lora.lora_mode import lora_plan

        model = cfg.actor_rollout_ref.model
        plan = lora_plan(model)
        strategy = str(_select(cfg, "actor_rollout_ref.actor.strategy") or "?")
        flat = int(_select(cfg, "actor_rollout_ref.model.lora_rank") or 0)
        block = int(_select(cfg, "actor_rollout_ref.model.lora.rank") or 0)
        mode = "merge (full weight sync)" if plan.enabled else "disabled"
        mode = "adapter (hot-swapped)" if plan.as_adapter else mode
        detail = (f"engine={strategy} rank={plan.rank} alpha={plan.alpha:g} target_modules={plan.target_modules} "
                  f"merge={plan.merge} -> {mode}")
        flat_key, block_key = "actor_rollout_ref.model.lora_rank", "actor_rollout_ref.model.lora.rank"
        if strategy.startswith("fsdp"):  # FSDP reads only the flat keys, Megatron only the lora block
            engine_key, engine_rank, other_key, other_rank = flat_key, flat, block_key, block
        elif strategy == "megatron":
            engine_key, engine_rank, other_key, other_rank = block_key, block, flat_key, flat
        else:
            self.add("lora", WARN if plan.enabled else OK, detail + f" (LoRA keys of engine {strategy!r} not checked)")
            return plan
        if other_rank > 0 and engine_rank == 0:
            self.add("lora", FAIL, f"{other_key}={other_rank} but the {strategy} engine reads {engine_key}=0: "
                     "the trainer trains no LoRA while the rollout expects an adapter",
                     f"set {engine_key}={other_rank} and {other_key}=0 (FSDP reads the flat lora_rank/lora_alpha/"
                     "target_modules, Megatron reads model.lora.{rank,alpha,target_modules})")
        elif other_rank > 0 and other_rank != engine_rank:
            self.add("lora", WARN, detail + f"; {other_key}={other_rank} is ignored by the {strategy} engine",
                     f"set {other_key} to 0 (or equal to {engine_key})")
        elif not plan.enabled:
            self.add("lora", WARN, detail, f"set {engine_key} > 0 for LoRA; without LoRA use rollout.name=sglang")
        else:
            self.add("lora", OK, detail)
        return plan

    def check_settings(self, rollout: Any) -> Any:
        from verl_sglang_lora.settings import SETTINGS_PATH, PluginSettings

        try:
            settings = PluginSettings.from_rollout_config(rollout)
        except ValueError as exc:
            self.add("plugin settings", FAIL, str(exc), f"fix {SETTINGS_PATH} (keys: docs/configuration.md)")
            return None
        values = ", ".join(f"{f.name}={getattr(settings, f.name)}" for f in dataclasses.fields(settings))
        self.add("plugin settings", OK, values)
        return settings

    def check_guards(self, rollout: Any, model_cfg: Any) -> None:
        from verl_sglang_lora.config_guards import config_problems
        from verl_sglang_lora.sglang_server_args import LORA_KEYS

        problems = config_problems(rollout, model_cfg)
        for problem in problems:
            setting, _, fix = problem.partition(" Fix: ")
            key = re.match(r"[\w.]+", setting)[0]
            self.add("verl guards", FAIL, setting, f"{key}: {fix or 'see docs/configuration.md, Refused'}")
        sglang_kwargs = _plain(_select_any(rollout, "engine_kwargs.sglang")) or {}
        overridden = sorted(k for k in sglang_kwargs if k in LORA_KEYS)
        if overridden:
            self.add("verl guards", WARN, f"engine_kwargs.sglang sets {overridden}; the plugin replaces them at launch",
                     "drop them; set max_lora_rank under engine_kwargs.sglang_lora, target modules on the model")
        elif not problems:
            self.add("verl guards", OK, "no pipeline parallel / PD / non-naive checkpoint engine / quantized adapter")

    def check_launch_args(self, plan: Any, settings: Any) -> list[str] | None:
        from verl_sglang_lora.settings import SETTINGS_PATH
        from verl_sglang_lora.sglang_contract.launch_args import (
            TARGET_MODULES_SETTING,
            LoRAConfigError,
            lora_launch_args,
            sglang_target_modules,
        )

        max_rank, note = settings.max_lora_rank, ""
        if plan.as_adapter and max_rank is not None and max_rank < plan.rank:
            self.add("max_lora_rank", FAIL,
                     f"{SETTINGS_PATH}.max_lora_rank={max_rank} < LoRA rank {plan.rank}: SGLang would reject every "
                     "adapter as 'incompatible with the current LoRA memory pool configuration'",
                     f"raise {SETTINGS_PATH}.max_lora_rank to >= {plan.rank} or drop it (defaults to the rank)")
            max_rank, note = None, " (max_lora_rank shown as if unset)"
        elif plan.as_adapter:
            self.add("max_lora_rank", OK, f"{max_rank or plan.rank} (rank {plan.rank})")
        if not plan.as_adapter:
            self.add("launch args", OK, "no LoRA keys (SGLang serves plain weights: merge mode or no LoRA)")
            return None
        supported = self.supported_modules()
        try:
            # SGLang's supported-module list is passed explicitly: this process never imports SGLang.
            targets = sglang_target_modules(plan.target_modules, supported)
            args = lora_launch_args(dataclasses.replace(plan, target_modules="all"), max_rank)
        except LoRAConfigError as exc:
            text = str(exc)
            fix = text.split("Fix: ", 1)[1] if "Fix: " in text else "use `all-linear` or a list of module names"
            self.add("launch args", FAIL, str(exc), f"{TARGET_MODULES_SETTING}: {fix}")
            return None
        args["lora_target_modules"] = targets
        self.add("launch args", OK, json.dumps(args) + note)
        return targets

    def check_model(self, model_cfg: Any, plan: Any, targets: list[str] | None) -> None:
        from verl_sglang_lora.sglang_contract.weight_names import PACKED, ModelWeightNames, UnknownWeightNameError

        raw = str(_select(model_cfg, "path") or "")
        path = Path(os.path.expanduser(raw))
        if not path.is_dir():
            self.add("model", WARN, f"actor_rollout_ref.model.path={raw} is not a local directory; names not checked",
                     "run the doctor where the checkpoint is on disk to check target modules and weight names")
            return
        cfg_file = path / "config.json"
        hf = json.loads(cfg_file.read_text()) if cfg_file.exists() else {}
        hf = hf.get("text_config", hf)
        try:
            names = ModelWeightNames.from_model_path(path)
        except FileNotFoundError as exc:
            self.add("model", FAIL, str(exc), "save the checkpoint with save_pretrained(..., safe_serialization=True)")
            return
        self.add("model", OK, f"{hf.get('model_type', '?')}, {names.num_layers} layers, tie_word_embeddings="
                 f"{names.tie_word_embeddings}, {len(names.names)} tensors (safetensors headers)")
        if not plan.as_adapter or targets is None:
            return
        supported = self.supported_modules() or []
        # `all`: SGLang expands it per backend; PEFT's all-linear never targets the embeddings or the output head
        expanded = [m for m in supported if m not in PACKED and m not in ("embed_tokens", "lm_head")]
        wanted = expanded if targets == ["all"] else targets
        found, missing, examples = [], [], []
        for target in wanted:
            parts = PACKED.get(target, (target,))
            hits = sorted(n for n in names.names if f".{n}".endswith(f".{parts[0]}.weight"))
            if not hits:
                missing.append(target)
                continue
            found.append(target)
            module = hits[0][: -len(".weight")]
            if target in PACKED:
                module = module[: -len(parts[0])] + target
            try:
                names.resolve_lora(f"base_model.model.{module}.lora_A.weight")
                if target not in PACKED:
                    vllm_style = f"{module}.base_layer.weight"
                    examples.append(f"{vllm_style} -> {names.resolve_base(vllm_style)}")
            except UnknownWeightNameError as exc:
                self.add("target modules", FAIL, str(exc), "set target_modules to modules the checkpoint has")
                return
        if targets != ["all"] and missing:
            self.add("target modules", FAIL,
                     f"{missing} are not modules of {path.name} (checked against its tensor names); found {found}",
                     "set actor_rollout_ref.model.target_modules (Megatron: model.lora.target_modules) to modules "
                     "the model has, or `all-linear`")
        elif not found:
            self.add("target modules", FAIL, f"none of SGLang's LoRA modules exist in {path.name}",
                     "this architecture is not served with LoRA by the installed SGLang")
        else:
            scope = "all -> SGLang expands per backend; " if targets == ["all"] else ""
            example = f"; base names resolve, e.g. {examples[0]}" if examples else ""
            self.add("target modules", OK, f"{scope}in the checkpoint: {found}{example}")

    def check_memory(self, plan: Any, cfg: Any) -> None:
        from verl_sglang_lora.memory_tags import release_plan

        free = bool(_select(cfg, "actor_rollout_ref.rollout.free_cache_engine"))
        tags = list(release_plan(plan.as_adapter)) if free else []
        detail = f"sleep releases {tags}, wake_up resumes {tags}; sleep_level={plan.sleep_level}"
        if free and plan.as_adapter:
            detail += "; verl's resume(tags=['weights']) is dropped (weights stay resident)"
        if not free:
            detail += " (free_cache_engine=False: nothing released)"
        self.add("memory tags", OK, detail)

    # SGLang ------------------------------------------------------------------------------------------------
    def sglang_probe_result(self) -> tuple[Any, str]:
        """(payload of the SGLang probe or None, why not); waited for once."""
        if self._sglang is None:
            self._sglang = self.sglang_probe.result() if self.sglang_probe else (None, "SGLang not installed")
        return self._sglang

    def supported_modules(self) -> list[str] | None:
        """SGLang's LoRA-capable module names: from the imported module, else from its source text."""
        if self._supported is None:
            payload, _ = self.sglang_probe_result()
            if payload and payload.get("supported"):
                self._supported = list(payload["supported"])
            else:
                root = sglang_source_root()
                self._supported = supported_modules_from_source(root) if root else None
        return self._supported

    def check_request_shape(self) -> None:
        from verl_sglang_lora.sglang_contract.lora_request import LoRARequestShape

        payload, err = self.sglang_probe_result()
        if payload is not None:
            shape = LoRARequestShape(**{**payload["shape"], "declared": tuple(payload["shape"]["declared"])})
            where = "from the imported struct"
        else:
            root = sglang_source_root()
            try:
                shape = request_shape_from_source(root)
            except Exception as exc:
                self.add("request shape", FAIL, f"{type(exc).__name__}: {exc}", "see docs/compatibility.md")
                return
            why = re.search(r"No module named '[^']+'", err)
            why = why[0] if why else err
            where = f"read from the installed io_struct.py source (SGLang not importable here: {why})"
        kind = "one blob per TP rank" if shape.per_rank else "one base64 string"
        fix = "" if payload is not None else "fine on a CPU host; on the GPU host `python -c 'import sglang'` must work"
        self.add("request shape", OK if payload is not None else WARN,
                 f"{shape.field} ({kind}), {'msgspec' if shape.msgspec else 'dataclass'}, "
                 f"checksums={'yes' if shape.has_checksums else 'no'}; {where}", fix)


def _select(cfg: Any, key: str) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key, default=None)


def _select_any(obj: Any, dotted: str) -> Any:
    from verl_sglang_lora.config_access import cfg_path

    return cfg_path(obj, dotted)


def _plain(value: Any) -> Any:
    from verl_sglang_lora.config_access import to_plain

    return to_plain(value)


# ---- output ----------------------------------------------------------------------------------------------
def format_table(checks: list[Check]) -> str:
    w_name = max([len("check")] + [len(c.name) for c in checks])
    w_status = 6
    lines = [f"{'check':<{w_name}} | {'status':<{w_status}} | detail"]
    lines.append(f"{'-' * w_name}-+-{'-' * w_status}-+-{'-' * 40}")
    lines += [f"{c.name:<{w_name}} | {c.status:<{w_status}} | {c.detail}" for c in checks]
    todo = [c for c in checks if c.status != OK and c.fix]
    if todo:
        lines += ["", "How to fix:"]
        lines += [f"  [{c.status}] {c.name}: {c.fix}" for c in todo]
    counts = {s: sum(c.status == s for c in checks) for s in (OK, WARN, FAIL)}
    lines += ["", f"doctor: {counts[OK]} OK, {counts[WARN]} WARN, {counts[FAIL]} FAIL"]
    return "\n".join(lines)


def run_doctor(overrides: list[str], config_name: str = "ppo_trainer", ray: bool = False) -> tuple[int, str]:
    """(exit code, report): 1 when any check FAILs."""
    checks = Doctor(overrides, config_name, ray).run()
    return (1 if any(c.status == FAIL for c in checks) else 0), format_table(checks)
