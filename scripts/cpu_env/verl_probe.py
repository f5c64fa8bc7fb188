"""Check that a verl release imports here and its Hydra trainer configs compose.

Usage:  PYTHONPATH=.cache/verl/VERSION .venv/bin/python scripts/cpu_env/verl_probe.py [--expect VERSION]

Imports verl and both rollout registries, then composes ppo_trainer and
ppo_megatron_trainer from the release's own verl/trainer/config with
actor_rollout_ref.rollout.name=sglang.  Prints one JSON object; non-zero exit on failure.
"""
import argparse
import json
import os
import sys
import time
import traceback
import warnings


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    res, ok, t0 = {}, True, time.time()
    try:
        import verl
        from verl.workers.rollout.base import _ROLLOUT_REGISTRY
        from verl.workers.rollout.replica import RolloutReplicaRegistry

        res["verl_version"], res["verl_file"] = verl.__version__, verl.__file__
        res["import_secs"] = round(time.time() - t0, 1)
        if args.expect and verl.__version__ != args.expect:
            ok, res["error"] = False, f"expected verl {args.expect}, imported {verl.__version__}"
        reg = getattr(RolloutReplicaRegistry, "_registry", None)
        res["RolloutReplicaRegistry"] = sorted(reg) if isinstance(reg, dict) else repr(RolloutReplicaRegistry)
        res["_ROLLOUT_REGISTRY"] = sorted(f"{k[0]}/{k[1]}" for k in _ROLLOUT_REGISTRY)
        src = open(verl.__file__).read()
        res["loads_entry_point_group_verl.plugins"] = "verl.plugins" in src
        from hydra import compose, initialize_config_dir

        cfg_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
        for name in ("ppo_trainer", "ppo_megatron_trainer"):
            t = time.time()
            with initialize_config_dir(config_dir=cfg_dir, version_base=None):
                cfg = compose(config_name=name, overrides=["actor_rollout_ref.rollout.name=sglang"])
            model = cfg.actor_rollout_ref.model
            res[f"compose:{name}"] = {
                "rollout.name": cfg.actor_rollout_ref.rollout.name,
                "model.lora_rank": model.get("lora_rank"),
                "model.lora keys": sorted(model.lora.keys()) if "lora" in model else None,
                "secs": round(time.time() - t, 2),
            }
    except BaseException as e:  # noqa: BLE001
        ok, res["error"], res["traceback"] = False, f"{type(e).__name__}: {e}", traceback.format_exc(limit=-8)
    res["ok"], res["secs"] = ok, round(time.time() - t0, 1)
    print(json.dumps(res, indent=1, default=str))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
