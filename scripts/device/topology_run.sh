#!/usr/bin/env bash
# The topology GPU run: one GRPO run (STEPS=4) of the FSDP2 LoRA example with
# examples/topology_judge.yaml -- the actor plus a frozen judge served by SGLang on the same GPU -- and the reward
# examples/judge_reward.py, which finds the judge by name (model_url("judge")) and scores with its log-probs.
#   bash scripts/device/topology_run.sh [extra hydra overrides...]      (one H200; logs under $OUT)
# Prints: the launched servers' arguments (the plugin's launch lines, then what each server runs with: the judge's
# /server_info, each actor replica's through its server actor -- verl 0.9.1's in-process /server_info answers 500)
# and checks them against the YAML's overrides; the steps run; whether any frozen engine outlived the run.
set -uo pipefail
[ -d /tmp/site/sglang ] || bash scripts/offline_bundle/install.sh /tmp/whl /tmp/site > "${OUT:-/tmp/out}/install.log" 2>&1
bash scripts/device/install_plugin.sh 2>&1 | tail -1
source scripts/device/env.sh
# the summary below also lands in $LOGDIR: a device call returns only the last 12 000 characters of stdout
exec > >(tee -a "$LOGDIR/topology_summary.txt") 2>&1
TOPOLOGY=$PWD/examples/topology_judge.yaml
EVIDENCE=$LOGDIR/topology_evidence
ASSETS=$PWD/.assets/tiny
rm -rf "$EVIDENCE"; mkdir -p "$EVIDENCE"
python3 -m verl_sglang_lora.tools.offline_assets --out "$ASSETS" >/dev/null
# MODEL_PATH/DATA given: the example then leaves the reward to us (no offline_reward override to collide with)
START=$(date +%s)
# VSL_SKIP_SETUP=1: the example uses this host's python3 + the bundle (/tmp/site) as they are (env.sh)
VSL_SKIP_SETUP=${VSL_SKIP_SETUP:-1} MODEL_PATH=$ASSETS/model DATA=$ASSETS/testset STEPS=${STEPS:-4} VSL_TOPOLOGY_EVIDENCE_DIR=$EVIDENCE \
    timeout "${E2E_TIMEOUT:-540}" bash examples/run_qwen3_lora_fsdp.sh "${SGLANG_GPU_ARGS[@]}" \
    actor_rollout_ref.rollout.engine_kwargs.sglang_lora.topology="$TOPOLOGY" \
    reward.custom_reward_function.path="$PWD/examples/judge_reward.py" \
    reward.custom_reward_function.name=compute_score \
    "$@" > "$LOGDIR/topology.log" 2>&1
RC=$?
echo "== topology run rc=$RC wall=$(( $(date +%s) - START ))s"
python3 scripts/device/step_table.py "$LOGDIR/topology.log"
echo "== launched servers (the plugin's launch lines)"
grep -E "sglang_lora topology:|topology overrides|launching SGLang with" "$LOGDIR/topology.log" | sed 's/^.*\(sglang_lora\)/\1/' | sort -u | head -20
echo "== what the servers report (/server_info, from the reward workers) vs the YAML"
python3 - "$TOPOLOGY" "$EVIDENCE" <<'PY'
import glob, json, sys, yaml
models = {m["name"]: m for m in yaml.safe_load(open(sys.argv[1]))["sglang"]}
files = sorted(glob.glob(f"{sys.argv[2]}/evidence_*.json"))
if not files:
    sys.exit("FAIL: no evidence written (the reward function never ran, or VSL_TOPOLOGY_EVIDENCE_DIR did not reach it)")
ev = json.load(open(files[0]))
print(json.dumps(ev, indent=1, sort_keys=True))
bad = len(ev.get("errors", []))
for err in ev.get("errors", []):
    print(f"FAIL: {err}")
servers = [("judge", ev["judge"])] + [(f"actor replica {r}", s) for r, s in sorted(ev["actor_replicas"].items())]
for label, served in servers:
    want = models["judge" if label == "judge" else "actor"]["server_groups"][0].get("overrides", {})
    for key, value in want.items():
        ok = served.get(key) == value
        bad += not ok
        print(f"{'PASS' if ok else 'FAIL'} {label}: {key} = {served.get(key)!r} (YAML {value!r})")
if not ev["actor_replicas"]:
    bad += 1; print("FAIL: no actor replica found (sglang_server_<r>_0)")
print("overrides visible in the launched servers" if not bad else f"FAIL: {bad} mismatch(es)")
PY
echo "== teardown: frozen engines left after the run (expect none)"
sleep 5
pgrep -af "verl_sglang_lora.topology.serve" || echo "none"
grep -E "Error|error:|Traceback" "$LOGDIR/topology.log" | grep -v "UserWarning\|warnings.warn" | tail -15
exit $RC
