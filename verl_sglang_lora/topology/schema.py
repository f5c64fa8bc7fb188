"""The SGLang topology YAML (slime's ``--sglang-config`` schema): models -> server groups, validated on CPU.

Read from the path in ``actor_rollout_ref.rollout.engine_kwargs.sglang_lora.topology``. Every refusal names the
key path inside the YAML (``sglang[1].server_groups[0].overrides.tp_sizee``) and the fix; all problems of a file are
reported at once. Nothing here imports torch or allocates a GPU; the installed SGLang's ``ServerArgs`` fields are
read from the imported class (dataclass or msgspec struct) or, where SGLang cannot be imported, from its source.

Scope (docs/topology.md): schema, validation and the placement plan; the run applies it through ``launch.py``
(per-replica overrides) and ``host.py`` (frozen models), with the run-time checks of ``run_checks.py``.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

SETTING = "actor_rollout_ref.rollout.engine_kwargs.sglang_lora.topology"
ACTOR_NAME = "actor"

MODEL_KEYS = ("name", "model_path", "update_weights", "num_gpus_per_engine", "server_groups")
GROUP_KEYS = ("worker_type", "num_gpus", "num_gpus_per_engine", "overrides")
WORKER_TYPES = ("regular", "prefill", "decode", "placeholder", "encoder")  # slime's ServerGroupConfig set
RUNNABLE = ("regular",)
WHY_NOT = {
    "prefill": "PD disaggregation: verl 0.9.1 builds PD replicas only from rollout.disaggregation (one prefill TP and "
               "one decode TP for all replicas) and the plugin's adapter sync does not reach a prefill/decode pair yet",
    "decode": "PD disaggregation: verl 0.9.1 builds PD replicas only from rollout.disaggregation (one prefill TP and "
              "one decode TP for all replicas) and the plugin's adapter sync does not reach a prefill/decode pair yet",
    "encoder": "EPD encoder workers (multimodal encoder disaggregation) are not launched by verl nor by the plugin",
    "placeholder": "GPUs are reserved by verl's resource pools (trainer.n_gpus_per_node x trainer.nnodes), not by the "
                   "topology; a placeholder group would leave verl's rollout replicas on GPUs the plan calls empty",
}
# ServerArgs fields the plugin sets on the actor's servers for the hot-swapped adapter (sglang_contract.launch_args,
# runtime/resident): an override would break the LoRA contract. Each with where the setting lives instead.
LORA_CONTRACT = {
    "enable_lora": "the plugin enables LoRA from actor_rollout_ref.model.lora_rank (Megatron: model.lora.rank); "
                   "delete the override",
    "max_lora_rank": "set actor_rollout_ref.rollout.engine_kwargs.sglang_lora.max_lora_rank instead (defaults to the "
                     "LoRA rank)",
    "lora_target_modules": "set actor_rollout_ref.model.target_modules (Megatron: model.lora.target_modules); the "
                           "plugin renders SGLang's list from it",
    "max_loras_per_batch": "delete the override: the plugin sizes the pool for one serving and one loading version "
                           "(3 with the resident slots)",
    "custom_weight_loader": "delete the override: the plugin sets it for the resident in-place sync "
                            "(engine_kwargs.sglang_lora.resident)",
    "lora_paths": "delete the override: the plugin loads the trained adapter itself at every sync",
    "max_loaded_loras": "delete the override: the plugin keeps at most the serving and the loading adapter versions",
}
TP_OVERRIDE_FIX = "delete overrides.tp_size and set num_gpus_per_engine on the group (or the model)"
# ServerArgs fields that place an engine: verl (the actor's replicas) or the plugin's launcher (frozen models) sets
# them from num_gpus / num_gpus_per_engine and the GPUs it is given; an override would move the engine off its plan.
PLACEMENT_KEYS = ("base_gpu_id", "gpu_id_step", "nnodes", "node_rank", "dist_init_addr", "dp_size", "pp_size", "host",
                  "port")
PLACEMENT_FIX = ("delete it: engines are placed from num_gpus / num_gpus_per_engine (the actor by verl's replicas, "
                 "frozen models by the plugin's launcher, one engine = one address)")


class TopologyError(ValueError):
    """All problems of one topology file; each line names the key path in the YAML and the fix."""

    def __init__(self, path: str, problems: list["Problem"]) -> None:
        self.path, self.problems = path, problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{SETTING}={path}: {len(problems)} problem(s), nothing was launched:\n{lines}")


@dataclass(frozen=True)
class Problem:
    key: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}. Fix: {self.fix}"


@dataclass(frozen=True)
class ServerGroup:
    worker_type: str
    num_gpus: int
    num_gpus_per_engine: int  # resolved: group -> model -> rollout.tensor_model_parallel_size
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def engines(self) -> int:
        return self.num_gpus // self.num_gpus_per_engine


@dataclass(frozen=True)
class ModelSpec:
    name: str
    model_path: str  # resolved: group overrides.model_path -> model model_path -> actor_rollout_ref.model.path
    update_weights: bool  # resolved (inferred from the path when unset)
    update_weights_inferred: bool
    groups: tuple[ServerGroup, ...]
    is_actor: bool = False

    @property
    def num_gpus(self) -> int:
        return sum(g.num_gpus for g in self.groups)


@dataclass(frozen=True)
class Topology:
    source: str
    models: tuple[ModelSpec, ...]
    warnings: tuple[str, ...] = ()

    @property
    def actor(self) -> ModelSpec:
        return next(m for m in self.models if m.is_actor)

    def model(self, name: str) -> ModelSpec:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(f"no model named {name!r} in {self.source}; models: {[m.name for m in self.models]}")


# ---- the installed SGLang's ServerArgs fields -------------------------------------------------------------
def fields_of(cls: type) -> frozenset[str]:
    """Declared fields of a dataclass (SGLang <= 0.5.x) or a msgspec struct (newer releases)."""
    declared = getattr(cls, "__dataclass_fields__", None)
    if declared is not None:
        return frozenset(declared)
    return frozenset(getattr(cls, "__struct_fields__", ()))


def _annotated_fields(cls: ast.ClassDef) -> set[str]:
    return {s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            and "ClassVar" not in ast.unparse(s.annotation)}


def _names_namespace(cls: ast.ClassDef) -> bool:
    """Whether the class body assigns ``_NS_PATH`` (SGLang 0.5.23's mark of a ServerArgs namespace)."""
    return any(isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_NS_PATH" for t in s.targets)
               for s in cls.body)


def _namespace_fields(fields_dir: Path) -> set[str]:
    """SGLang 0.5.23's layout: ``ServerArgs`` declares no field itself and collects the fields of every class in
    ``srt/arg_groups/fields/`` that names its namespace (``_NS_PATH = "lora"``, ...)."""
    found: set[str] = set()
    for source in sorted(fields_dir.glob("*.py")):
        for node in ast.parse(source.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and _names_namespace(node):
                found |= _annotated_fields(node)
    return found


def server_args_fields_from_source(root: Path | None = None) -> frozenset[str]:
    """``ServerArgs``' fields read from the installed SGLang's source (no import): the class's own annotated fields
    (a dataclass, SGLang <= 0.5.22), else those of the namespaces it collects (0.5.23). Never an empty set: a layout
    this reader does not know is an error, so that no override is refused as unknown for a reader's blind spot."""
    if root is None:
        spec = importlib.util.find_spec("sglang")  # locating a package does not execute it
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError("SGLang is not installed: the override fields cannot be checked")
        root = Path(list(spec.submodule_search_locations)[0])
    path = root / "srt" / "server_args.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"), None)
    if cls is None:
        raise LookupError(f"no class ServerArgs in {path}")
    fields = _annotated_fields(cls)
    fields_dir = root / "srt" / "arg_groups" / "fields"
    if not fields and fields_dir.is_dir():
        fields = _namespace_fields(fields_dir)
    if not fields:
        raise LookupError(f"ServerArgs in {path} declares no field this reader finds (nor do the namespaces in "
                          f"{fields_dir}): an SGLang layout it does not know")
    return frozenset(fields)


def installed_server_args_fields(import_sglang: bool = True) -> frozenset[str]:
    """The installed SGLang's ``ServerArgs`` fields: from the imported class, else from its source text."""
    if import_sglang:
        try:
            from sglang.srt.server_args import ServerArgs

            return fields_of(ServerArgs)
        except Exception:  # a CPU host without triton / CUDA libraries: read the source instead
            pass
    return server_args_fields_from_source()


# ---- loading ------------------------------------------------------------------------------------------------
def _closest(word: str, choices: Iterable[str]) -> str:
    match = difflib.get_close_matches(str(word), sorted(choices), n=1, cutoff=0.6)
    return f"did you mean `{match[0]}`?" if match else ""


def _unknown_key_fix(key: Any, known: Iterable[str], where: str) -> str:
    hint = _closest(key, known)
    return (f"rename it: {hint}" if hint else f"delete it") + f" ({where})"


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _same_path(a: str, b: str) -> bool:
    def norm(p: str) -> str:
        return os.path.normpath(os.path.expanduser(str(p))).rstrip("/")
    return bool(a) and bool(b) and norm(a) == norm(b)


def read_yaml(path: str | os.PathLike) -> Any:
    import yaml

    p = Path(os.path.expanduser(str(path)))
    if not p.is_file():
        raise TopologyError(str(path), [Problem("(file)", f"{p} is not a file", f"point {SETTING} at the YAML, or "
                                                "set it to \"\" for verl's one homogeneous set of replicas")])
    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise TopologyError(str(path), [Problem("(file)", f"not valid YAML: {exc}", "fix the YAML syntax")]) from exc


def load_topology(
    path: str | os.PathLike,
    *,
    actor_model_path: str,
    rollout_tp: int = 1,
    trainer_gpus: int | None = None,
    server_args_fields: Iterable[str] | None = None,
) -> Topology:
    """Read and validate one topology YAML. Raises ``TopologyError`` listing every problem."""
    return parse_topology(read_yaml(path), source=str(path), actor_model_path=actor_model_path,
                          rollout_tp=rollout_tp, trainer_gpus=trainer_gpus, server_args_fields=server_args_fields)


def parse_topology(
    data: Any,
    *,
    source: str = "<yaml>",
    actor_model_path: str,
    rollout_tp: int = 1,
    trainer_gpus: int | None = None,
    server_args_fields: Iterable[str] | None = None,
) -> Topology:
    known_fields = frozenset(server_args_fields) if server_args_fields is not None else installed_server_args_fields()
    problems: list[Problem] = []
    warnings: list[str] = []

    def bad(key: str, message: str, fix: str) -> None:
        problems.append(Problem(key, message, fix))

    if not isinstance(data, dict) or "sglang" not in data:
        bad("sglang", "the YAML must have a top-level `sglang:` key holding the list of models",
            "start the file with `sglang:` and list the models under it (docs/topology.md)")
        raise TopologyError(source, problems)
    for key in data:
        if key != "sglang":
            bad(str(key), "unknown top-level key", _unknown_key_fix(key, ["sglang"], "the only top-level key is "
                                                                                      "`sglang`"))
    raw_models = data["sglang"]
    if not isinstance(raw_models, list) or not raw_models:
        bad("sglang", "must be a non-empty list of models", "list at least the actor: `- name: actor` with "
                                                             "`server_groups`")
        raise TopologyError(source, problems)

    drafts: list[dict[str, Any]] = []
    names: dict[str, int] = {}
    for i, raw in enumerate(raw_models):
        mkey = f"sglang[{i}]"
        if not isinstance(raw, dict):
            bad(mkey, f"a model must be a mapping, got {type(raw).__name__}", "give `name` and `server_groups`")
            continue
        groups_key = "server_groups"
        if "engine_groups" in raw:  # slime's backward-compatible alias
            if "server_groups" in raw:
                bad(f"{mkey}.engine_groups", "both `server_groups` and its old alias `engine_groups` are set",
                    "keep only `server_groups`")
            else:
                groups_key = "engine_groups"
        for key in raw:
            if key not in MODEL_KEYS and key != "engine_groups":
                bad(f"{mkey}.{key}", "unknown model key",
                    _unknown_key_fix(key, MODEL_KEYS, f"model keys: {', '.join(MODEL_KEYS)}; SGLang arguments go "
                                                      "under a group's `overrides`"))
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            bad(f"{mkey}.name", "missing or not a string", "give every model a unique name, e.g. `actor`, `judge`")
            name = f"<model {i}>"
        elif name in names:
            bad(f"{mkey}.name", f"`{name}` is already the name of sglang[{names[name]}]", "give each model a unique "
                                                                                          "name")
        else:
            names[name] = i
        model_tp = raw.get("num_gpus_per_engine")
        if model_tp is not None and not _positive_int(model_tp):
            bad(f"{mkey}.num_gpus_per_engine", f"must be a positive integer, got {model_tp!r}",
                "set the model's default TP size, e.g. `num_gpus_per_engine: 1`, or delete it")
            model_tp = None
        model_path = raw.get("model_path")
        if model_path is not None and not isinstance(model_path, str):
            bad(f"{mkey}.model_path", f"must be a path string, got {model_path!r}", "give a HF checkpoint directory")
            model_path = None
        update = raw.get("update_weights")
        if update is not None and not isinstance(update, bool):
            bad(f"{mkey}.update_weights", f"must be true or false, got {update!r}",
                "`true` for the trained actor, `false` for frozen models")
            update = None

        groups: list[ServerGroup] = []
        group_paths: list[tuple[str, str]] = []
        raw_groups = raw.get(groups_key)
        if not isinstance(raw_groups, list) or not raw_groups:
            bad(f"{mkey}.server_groups", "missing or empty", "give at least one group: `- worker_type: regular` "
                                                              "with `num_gpus`")
            raw_groups = []
        for j, g in enumerate(raw_groups):
            gkey = f"{mkey}.{groups_key}[{j}]"
            if not isinstance(g, dict):
                bad(gkey, f"a server group must be a mapping, got {type(g).__name__}", "give `worker_type` and "
                                                                                      "`num_gpus`")
                continue
            for key in g:
                if key not in GROUP_KEYS:
                    bad(f"{gkey}.{key}", "unknown server-group key",
                        _unknown_key_fix(key, GROUP_KEYS, f"group keys: {', '.join(GROUP_KEYS)}; SGLang arguments "
                                                          "go under `overrides`"))
            wtype = g.get("worker_type")
            if wtype not in WORKER_TYPES:
                hint = _closest(wtype, WORKER_TYPES)
                bad(f"{gkey}.worker_type", f"must be one of {', '.join(WORKER_TYPES)}, got {wtype!r}",
                    f"set `worker_type: regular`" + (f" ({hint})" if hint else ""))
            elif wtype not in RUNNABLE:
                bad(f"{gkey}.worker_type", f"`{wtype}` cannot run with the plugin yet: {WHY_NOT[wtype]}",
                    "use `worker_type: regular` (the only type the plugin runs)")
            num_gpus = g.get("num_gpus")
            if not _positive_int(num_gpus):
                bad(f"{gkey}.num_gpus", f"must be a positive integer, got {num_gpus!r}", "give the group's GPU count, "
                                                                                         "e.g. `num_gpus: 1`")
                num_gpus = None
            tp = g.get("num_gpus_per_engine")
            tp_key = f"{gkey}.num_gpus_per_engine"
            if tp is not None and not _positive_int(tp):
                bad(tp_key, f"must be a positive integer, got {tp!r}", "set the group's TP size or delete it")
                tp = None
            if tp is None:
                tp, tp_key = (model_tp, f"{mkey}.num_gpus_per_engine") if model_tp else (rollout_tp, None)
            if num_gpus is not None and num_gpus % tp:
                src = f" (from {tp_key})" if tp_key and tp_key != f"{gkey}.num_gpus_per_engine" else \
                    (" (from actor_rollout_ref.rollout.tensor_model_parallel_size)" if tp_key is None else "")
                lower = num_gpus - num_gpus % tp
                bad(f"{gkey}.num_gpus", f"{num_gpus} GPUs do not divide into engines of {tp} GPUs{src}",
                    f"make num_gpus a multiple of {tp} (e.g. {lower or tp}) or set {gkey}.num_gpus_per_engine to a "
                    f"divisor of {num_gpus}")
            overrides = g.get("overrides") or {}
            if not isinstance(overrides, dict):
                bad(f"{gkey}.overrides", f"must be a mapping of ServerArgs fields, got {type(overrides).__name__}",
                    "write `overrides:` followed by `field: value` lines")
                overrides = {}
            for key in overrides:
                okey = f"{gkey}.overrides.{key}"
                if key not in known_fields:
                    hint = _closest(key, known_fields)
                    bad(okey, "not a field of the installed SGLang's ServerArgs",
                        (f"rename it: {hint}" if hint else "delete it") + " (fields of sglang.srt.server_args."
                                                                          "ServerArgs)")
                elif key == "tp_size":
                    bad(okey, "the TP size of a group is its num_gpus_per_engine", TP_OVERRIDE_FIX)
                elif key in PLACEMENT_KEYS:
                    bad(okey, "this ServerArgs field places the engine (GPU ids, nodes, DP/PP ranks, address)",
                        PLACEMENT_FIX)
            if isinstance(overrides.get("model_path"), str):
                group_paths.append((f"{gkey}.overrides.model_path", overrides["model_path"]))
            if wtype and num_gpus is not None:
                groups.append(ServerGroup(str(wtype), num_gpus, tp, dict(overrides)))
        drafts.append(dict(key=mkey, name=name, model_path=model_path, update=update, groups=groups,
                           group_paths=group_paths, raw_groups_key=groups_key))

    # model path of each model: group overrides.model_path -> model model_path -> actor_rollout_ref.model.path
    for d in drafts:
        base = d["model_path"] or actor_model_path
        paths = {p for _, p in d["group_paths"]}
        if d["group_paths"] and (len(paths) > 1 or not _same_path(next(iter(paths)), base) and d["model_path"]):
            listed = ", ".join(f"{k}={p}" for k, p in d["group_paths"])
            where = f"{d['key']}.model_path={d['model_path']}" if d["model_path"] else f"the default {base}"
            bad(d["group_paths"][0][0], f"the groups of model `{d['name']}` disagree on the model path ({listed}; "
                                        f"{where})",
                "all groups of one model serve one checkpoint: delete overrides.model_path and set the model's "
                "`model_path`, or make a separate model entry for the other checkpoint")
        elif d["group_paths"] and not d["model_path"]:
            base = d["group_paths"][0][1]
        d["resolved_path"] = base

    # update_weights: inferred from the model path when unset (slime's rule), with a warning
    for d in drafts:
        if d["update"] is None:
            d["update"] = _same_path(d["resolved_path"], actor_model_path)
            d["inferred"] = True
            warnings.append(
                f"{d['key']}.update_weights is unset: inferred {str(d['update']).lower()} (model path "
                f"{d['resolved_path']} {'equals' if d['update'] else 'differs from'} actor_rollout_ref.model.path); "
                f"set `update_weights: {str(d['update']).lower()}` to silence this")
        else:
            d["inferred"] = False

    # the actor: the model named `actor`, else the one model with update_weights: true
    named = [d for d in drafts if d["name"] == ACTOR_NAME]
    updating = [d for d in drafts if d["update"]]
    actor = named[0] if named else (updating[0] if len(updating) == 1 else None)
    if actor is None:
        if not updating:
            bad("sglang", "no model is the trained actor (none is named `actor` and none has update_weights: true)",
                "name the model verl trains `actor` (or set its `update_weights: true`); frozen models keep "
                "`update_weights: false`")
        else:
            listed = ", ".join(f"{d['key']} ({d['name']})" for d in updating)
            bad("sglang", f"{len(updating)} models have update_weights: true ({listed}) and none is named `actor`",
                "name the trained model `actor`; the plugin syncs one trained policy")
    else:
        how = "inferred" if actor["inferred"] else "set"
        if not actor["update"]:
            bad(f"{actor['key']}.update_weights", f"the actor `{actor['name']}` would not receive the trainer's "
                                                  f"weights (update_weights: false, {how})",
                "set `update_weights: true` on the actor (it serves the policy being trained)")
        if actor["model_path"] and not _same_path(actor["resolved_path"], actor_model_path):
            bad(f"{actor['key']}.model_path", f"the actor serves {actor['resolved_path']} but verl trains "
                                              f"actor_rollout_ref.model.path={actor_model_path}",
                "delete the actor's model_path (it defaults to actor_rollout_ref.model.path) or make them equal")
        for d in updating:
            if d is not actor:
                bad(f"{d['key']}.update_weights", f"only the actor `{actor['name']}` receives the trainer's weights; "
                                                  f"`{d['name']}` would be a second trained copy the sync does not "
                                                  "reach",
                    "set `update_weights: false` (frozen), or merge its groups into the actor's server_groups")
        # the LoRA contract and verl's one replica shape, on the actor's groups
        tps = set()
        for j, g in enumerate(actor["groups"]):
            gkey = f"{actor['key']}.{actor['raw_groups_key']}[{j}]"
            for key in g.overrides:
                if key in LORA_CONTRACT:
                    bad(f"{gkey}.overrides.{key}", "the plugin sets this ServerArgs field on the actor's servers for "
                                                   "the hot-swapped adapter (the LoRA contract)", LORA_CONTRACT[key])
            tps.add(g.num_gpus_per_engine)
        if len(tps) > 1:
            shapes = ", ".join(f"server_groups[{j}]: TP {g.num_gpus_per_engine}" for j, g in enumerate(actor["groups"]))
            bad(f"{actor['key']}.server_groups", f"the actor's groups differ in TP size ({shapes}): verl 0.9.1 builds "
                                                 "every rollout replica from one RolloutConfig "
                                                 "(LLMServerManager._initialize_llm_servers), so replica shapes "
                                                 "cannot be mixed",
                f"give all of the actor's groups one num_gpus_per_engine (= actor_rollout_ref.rollout."
                f"tensor_model_parallel_size={rollout_tp})")
        elif tps and tps != {rollout_tp}:
            (tp,) = tps
            bad(f"{actor['key']}.server_groups[0].num_gpus_per_engine",
                f"the actor's TP size {tp} differs from actor_rollout_ref.rollout.tensor_model_parallel_size="
                f"{rollout_tp}, which verl uses to build the replicas",
                f"set actor_rollout_ref.rollout.tensor_model_parallel_size={tp}, or num_gpus_per_engine: {rollout_tp}")
        if trainer_gpus is not None:
            total = sum(g.num_gpus for g in actor["groups"])
            if actor["groups"] and total != trainer_gpus:
                bad(f"{actor['key']}.server_groups", f"the actor's groups hold {total} GPU(s) but verl puts its "
                                                     "rollout replicas on all trainer.n_gpus_per_node x "
                                                     f"trainer.nnodes = {trainer_gpus} GPU(s) (hybrid engine)",
                    f"make the actor's num_gpus add up to {trainer_gpus}, or change trainer.n_gpus_per_node / "
                    "trainer.nnodes")
    if trainer_gpus is not None:
        # frozen models are planned on the trainer's GPUs, beside the actor (placement.py): their engines, laid out
        # one after the other from GPU 0, must fit there
        used = 0
        for d in drafts:
            if d is actor:
                continue
            used += sum(g.num_gpus for g in d["groups"])
            if used > trainer_gpus:
                bad(f"{d['key']}.server_groups", f"the frozen models up to `{d['name']}` need {used} GPU(s), more "
                                                 f"than the {trainer_gpus} of trainer.n_gpus_per_node x "
                                                 "trainer.nnodes they are placed on",
                    f"lower the frozen models' num_gpus to at most {trainer_gpus} in all, or add GPUs/nodes to the "
                    "trainer")
                break

    if problems:
        raise TopologyError(source, problems)
    models = tuple(
        ModelSpec(d["name"], d["resolved_path"], bool(d["update"]), d["inferred"], tuple(d["groups"]),
                  is_actor=d is actor)
        for d in drafts
    )
    return Topology(source, models, tuple(warnings))


def topology_from_config(cfg: Any, server_args_fields: Iterable[str] | None = None) -> Topology | None:
    """The validated topology of a composed verl config, or None when the setting is empty."""
    from verl_sglang_lora.verl_glue.config_access import cfg_path

    path = str(cfg_path(cfg, SETTING, "") or "")
    if not path:
        return None
    trainer_gpus = int(cfg_path(cfg, "trainer.n_gpus_per_node", 1) or 1) * int(cfg_path(cfg, "trainer.nnodes", 1) or 1)
    return load_topology(
        path,
        actor_model_path=str(cfg_path(cfg, "actor_rollout_ref.model.path", "") or ""),
        rollout_tp=int(cfg_path(cfg, "actor_rollout_ref.rollout.tensor_model_parallel_size", 1) or 1),
        trainer_gpus=trainer_gpus,
        server_args_fields=server_args_fields,
    )
