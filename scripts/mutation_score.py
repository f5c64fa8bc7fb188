"""Mutation score of the core modules: each small wrong change below is applied to a scratch copy of the tree, the
test files that cover that module run against it, and the mutant is *killed* when they fail.

    python scripts/mutation_score.py [--only NAME ...] [--record]     # a table; --record appends docs/results/mutation.json

The list is fixed and names, per mutant, the change and why a user would care. Modules: ``sglang_contract/``,
``runtime/sync/``, ``runtime/lora_plan.py``, ``runtime/resident/`` (the exact check), ``verl_glue/config_guards.py``.
Runs on the CPU test environment (``.venv``, ``.cache/``): ``bash scripts/run_cpu_tests.sh`` first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "verl_sglang_lora"


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # under verl_sglang_lora/
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = (
    Mutant("layer bound off by one", "sglang_contract/weight_names.py",
           "int(layer.group(1)) >= self.num_layers", "int(layer.group(1)) > self.num_layers",
           ("tests/test_weight_names_on_cpu.py", "tests/test_adversarial_inputs_on_cpu.py")),
    Mutant("packed check with any", "sglang_contract/weight_names.py",
           "not all(f\"{module_path[: -len(packed)]}{p}.weight\" in self.names for p in parts)",
           "not any(f\"{module_path[: -len(packed)]}{p}.weight\" in self.names for p in parts)",
           ("tests/test_weight_names_on_cpu.py", "tests/test_adversarial_inputs_on_cpu.py")),
    Mutant("checkpoint wrapper kept", "sglang_contract/weight_names.py",
           "WRAPPER_SEGMENTS = (\".base_layer.\", \"._fsdp_wrapped_module.\", \"._checkpoint_wrapped_module.\", \"._orig_mod.\")",
           "WRAPPER_SEGMENTS = (\".base_layer.\", \"._fsdp_wrapped_module.\", \"._orig_mod.\")",
           ("tests/test_weight_names_on_cpu.py", "tests/test_adversarial_inputs_on_cpu.py")),
    Mutant("string false read as true", "sglang_contract/peft_config.py",
           "return bool(value) and value not in (\"false\", \"False\", \"0\")", "return bool(value)",
           ("tests/test_peft_config_on_cpu.py", "tests/test_adversarial_inputs_on_cpu.py")),
    Mutant("permanent slots unloaded as stale", "runtime/sync/versions.py",
           "n != active and n not in self.permanent and", "n != active and",
           ("tests/test_sync_protocol_on_cpu.py", "tests/test_resident_actor_on_cpu.py")),
    Mutant("max_loras_per_batch 2 with the resident path", "sglang_contract/launch_args.py",
           "\"max_loras_per_batch\": 3 if resident else 2", "\"max_loras_per_batch\": 2",
           ("tests/test_launch_args_on_cpu.py", "tests/test_resident_actor_on_cpu.py")),
    Mutant("quantization guard deleted", "verl_glue/config_guards.py",
           "if plan.as_adapter and cfg_get(rollout_config, \"quantization\", None):",
           "if False and cfg_get(rollout_config, \"quantization\", None):",
           ("tests/test_bad_lora_settings_on_cpu.py", "tests/test_driver_check_on_cpu.py")),
    Mutant("async mode guard deleted", "verl_glue/config_guards.py",
           "str(cfg_get(rollout_config, \"mode\", \"async\")) != \"async\"", "False",
           ("tests/test_bad_lora_settings_on_cpu.py", "tests/test_driver_check_on_cpu.py")),
    Mutant("canary bound ignores the scaling", "runtime/sync/canary.py",
           "bound = max((abs(scaling) * a * b", "bound = max((a * b",
           ("tests/test_canary_threshold_on_cpu.py", "tests/test_served_policy_on_cpu.py",
            "tests/test_adversarial_inputs_on_cpu.py")),
    Mutant("canary compares the adapter with itself", "runtime/sync/canary.py",
           "diff = float(result[\"max_abs_diff\"])", "diff = 0.0",
           ("tests/test_canary_threshold_on_cpu.py", "tests/test_served_policy_on_cpu.py")),
    Mutant("served effect: error as a ratio of norms", "runtime/sync/served_effect.py",
           "error = float((d2 / e2.clamp_min(1e-300)).median())",
           "error = abs(float((b.s * b.s).sum()) / e2_all - 1.0)",
           ("tests/test_served_effect_on_cpu.py", "tests/test_served_policy_on_cpu.py")),
    Mutant("served effect: floor from the residual", "runtime/sync/served_effect.py",
           "snr = math.sqrt(effect / floor)", "snr = math.sqrt(effect / max(floor, error * effect))",
           ("tests/test_served_effect_on_cpu.py", "tests/test_served_policy_on_cpu.py")),
    Mutant("served effect: a tolerance of one", "runtime/sync/served_effect.py",
           "ERROR_TOL = 1.0 / 16", "ERROR_TOL = 1.0",
           ("tests/test_served_effect_on_cpu.py", "tests/test_served_policy_on_cpu.py")),
    Mutant("served effect: inconclusive never escalated", "runtime/sync/served_effect.py",
           "return self.conclusive_seen and self.inconclusive_run >= self.max_inconclusive", "return False",
           ("tests/test_served_effect_on_cpu.py",)),
    Mutant("exact check: zero blocks not checked", "runtime/resident/mirror.py",
           "dirty = [z.view(INT_VIEW[z.element_size()]).ne(0).any() for z in self.zeros]", "dirty = []",
           ("tests/test_resident_mirror_on_cpu.py", "tests/test_resident_exact_check_on_cpu.py")),
    Mutant("exact check: compares float values, not bits", "runtime/resident/execute.py",
           "flags.append(torch.ne(bits(want), bits(dst)).any())", "flags.append(torch.ne(want, dst).any())",
           ("tests/test_resident_slot_on_cpu.py", "tests/test_resident_exact_check_on_cpu.py")),
    Mutant("exact check: the mirror not read back", "runtime/resident/mirror.py",
           "        torch._foreach_copy_(self.views, self.dsts)\n", "",
           ("tests/test_resident_mirror_on_cpu.py", "tests/test_resident_exact_check_on_cpu.py")),
    Mutant("client: an unverified write accepted", "runtime/resident/requests.py",
           "if r[\"copies\"] and r[\"verified_by\"] == P.NOT_VERIFIED:", "if False:",
           ("tests/test_resident_slot_on_cpu.py",)),
    Mutant("client: a stale answer accepted", "runtime/resident/requests.py",
           "if call.seq and r[\"seq\"] != call.seq:", "if False:",
           ("tests/test_resident_slot_on_cpu.py",)),
    Mutant("lora plan: the Megatron block ignored", "runtime/lora_plan.py",
           "rank = max(flat_rank, block_rank)", "rank = flat_rank",
           ("tests/test_lora_mode_and_memory_tags_on_cpu.py", "tests/test_bad_lora_settings_on_cpu.py")),
)


def scratch_copy() -> Path:
    """The tracked tree in a temporary folder, with the CPU environment's release caches linked in."""
    dest = Path(tempfile.mkdtemp(prefix="vsl_mutant_"))
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for raw in files:
        if not raw:
            continue
        src, dst = ROOT / raw.decode(), dest / raw.decode()
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    if (ROOT / ".cache").exists():
        (dest / ".cache").symlink_to(ROOT / ".cache")
    return dest


def run_mutant(tree: Path, m: Mutant, timeout: int) -> tuple[str, float]:
    path = tree / PKG / m.file
    text = path.read_text()
    if text.count(m.old) != 1:
        return f"not applicable: the original text occurs {text.count(m.old)} times", 0.0
    path.write_text(text.replace(m.old, m.new))
    env = {**os.environ, "PYTHONPATH": str(tree), "VSL_TEST_WORKERS": "1"}
    t0 = time.time()
    try:
        proc = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "pytest", "-x", "-q", "-p",
                               "no:cacheprovider", "-n", "0", *m.tests], cwd=tree, env=env, capture_output=True,
                              text=True, timeout=timeout)
        verdict = "killed" if proc.returncode != 0 else "survived"
    except subprocess.TimeoutExpired:
        verdict = "killed (timeout)"
    finally:
        path.write_text(text)
    return verdict, time.time() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="mutant names (default: all)")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    tree = scratch_copy()
    probe = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", f"import {PKG}; print({PKG}.__file__)"],
                           cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
    if not probe.stdout.strip().startswith(str(tree)):
        raise SystemExit(f"the scratch tree is not the one imported ({probe.stdout.strip()}): mutants would not apply")
    rows = []
    try:
        for m in MUTANTS:
            if args.only and m.name not in args.only:
                continue
            verdict, secs = run_mutant(tree, m, args.timeout)
            rows.append({"name": m.name, "module": m.file, "verdict": verdict, "tests": list(m.tests),
                         "secs": round(secs, 1)})
            print(f"{verdict:>18}  {secs:6.1f} s  {m.file}: {m.name}", flush=True)
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    killed = sum(r["verdict"].startswith("killed") for r in rows)
    print(f"{killed} killed, {len(rows) - killed} survived of {len(rows)}")
    if args.record:
        sys.path.insert(0, str(ROOT / "scripts"))
        import records

        print(records.append(records.make_record("mutation", "python scripts/mutation_score.py --record",
                                                 {"killed": killed, "total": len(rows), "mutants": rows})))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
