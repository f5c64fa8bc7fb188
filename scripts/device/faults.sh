#!/usr/bin/env bash
# The fault run on the GPU: ONE verl GRPO run (the FSDP example, STEPS=12) with server restarts allowed, into which
# four faults are injected in turn, each at its own adapter version, so each recovery is seen on its own:
#   unload_fail        the unload of version FAULT_UNLOAD_VERSION (2), at the sync of v3, is refused once: test-only
#                      hook (verl_sglang_lora/runtime/fault_injection.py, VERL_SGLANG_LORA_INJECT); retried at v4
#   scheduler_kill     after the sync of FAULT_SCHED_VERSION (4): SIGKILL to SGLang's scheduler process (a child of
#                      the server actor, titled "sglang::scheduler" by SGLang); the actor itself is not touched
#   actor_kill_rollout after the sync of FAULT_ROLLOUT_VERSION (6): SIGKILL to the server actor while its process
#                      title shows a generate call (Ray titles a running task "ray::SGLangLoRARollout.generate")
#   actor_kill_sync    the sync of v(FAULT_SYNC_VERSION+1) (9) is held open in the unload of v8 (the hook's
#                      unload_stall); SIGKILL to the server actor when the hook says so
# Each injection appends a marker line to the run's log; scripts/device/fault_report.py reads the log afterwards and
# prints per fault: how, the step it hit, recovered or refused, time to recover, steps after, base/stale samples, and
# a verdict line; a markdown table on stdout.
#   bash scripts/device/faults.sh            (log: $OUT/e2e_faults.log; E2E_TIMEOUT caps the whole script)
# Versioned adapter loads (resident=off by default, FAULT_RESIDENT): the unload faults need versions to unload, and
# the in-place path unloads none once its slots are attached.
set -uo pipefail
source scripts/device/env.sh
LOG="$LOGDIR/e2e_faults.log"
STEPS=${STEPS:-12}
V_UNLOAD=${FAULT_UNLOAD_VERSION:-2}
V_SCHED=${FAULT_SCHED_VERSION:-4}
V_ROLLOUT=${FAULT_ROLLOUT_VERSION:-6}
V_SYNC=${FAULT_SYNC_VERSION:-8}
STALL_S=${FAULT_STALL_S:-30}            # long enough for this loop (0.2 s polls) to see the hook's line and kill
GENERATE_WAIT_MS=${FAULT_GENERATE_WAIT_MS:-1500}  # the rollout starts <1 s after the sync; it lasts ~2 s
RESTARTS=${FAULT_MAX_RESTARTS:-6}       # three kills; Ray retries each in-flight call once per allowed restart
REPORT_S=20                             # kept from E2E_TIMEOUT for the report after the run
RUN_TIMEOUT=$(( ${E2E_TIMEOUT:-560} - REPORT_S ))
ACTOR_TITLE="ray::SGLangLoRARollout"
# one restart's recovery (~20 s relaunch) must be over before the next fault: two versions apart at least
if [ $((V_UNLOAD + 2)) -gt "$V_SCHED" ] || [ $((V_SCHED + 2)) -gt "$V_ROLLOUT" ] || [ $((V_ROLLOUT + 2)) -gt "$V_SYNC" ] \
   || [ $((V_SYNC + 3)) -gt "$STEPS" ]; then
    echo "faults.sh: versions must grow by >= 2 (unload $V_UNLOAD, sched $V_SCHED, rollout $V_ROLLOUT, sync $V_SYNC) and STEPS >= sync+3" >&2
    exit 2
fi
export VERL_SGLANG_LORA_INJECT="unload_fail:v${V_UNLOAD},unload_stall:v${V_SYNC}:${STALL_S}"

steps_done() { grep -c "step:[0-9]* - " "$LOG"; }
# the trainer's client logs every sync "adapter sync {... 'version': N, ...}"
synced() { grep -qE "sglang_lora: adapter sync \{.*'version': $1[,}]" "$LOG"; }
actor_pid() { pgrep -f "^$ACTOR_TITLE" | head -1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
title_of() { tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null; }
# mark WHAT FAULT HOW [WHY]: one JSON marker line appended to the run's log (the run appends too: no line is lost)
mark() {
    printf 'sglang_lora_faults: %s {"fault": "%s", "epoch": %s, "steps_done": %s, "how": "%s", "why": "%s"}\n' \
        "$1" "$2" "$(date +%s.%N)" "$(steps_done)" "$3" "${4:-}" >> "$LOG"
    echo "== $1 $2: $3 ${4:-}"
}
is_descendant() {  # is_descendant PID ANCESTOR
    local p=$1
    while [ -n "$p" ] && [ "$p" -gt 1 ]; do
        [ "$p" = "$2" ] && return 0
        p=$(ps -o ppid= -p "$p" 2>/dev/null | tr -d ' ')
    done
    return 1
}
# SGLang 0.5.12's run_scheduler_process calls setproctitle("sglang::scheduler" + "_TP0"... with TP > 1)
scheduler_pid() {
    local pid
    for pid in $(pgrep -f '^sglang::scheduler'); do
        is_descendant "$pid" "$1" && { echo "$pid"; return 0; }
    done
    return 1
}

inject_scheduler_kill() {
    local actor sched
    actor=$(actor_pid)
    sched=$([ -n "$actor" ] && scheduler_pid "$actor")
    if [ -z "$sched" ]; then
        mark skipped scheduler_kill "-" "no sglang::scheduler process under $ACTOR_TITLE (actor pid ${actor:-none})"
        return
    fi
    mark inject scheduler_kill "SIGKILL to sglang::scheduler pid=$sched (child of $ACTOR_TITLE pid=$actor), after sync v$V_SCHED"
    kill -KILL "$sched"
}

inject_rollout_kill() {
    local actor deadline title how
    actor=$(actor_pid)
    [ -z "$actor" ] && { mark skipped actor_kill_rollout "-" "no $ACTOR_TITLE process"; return; }
    deadline=$(( $(now_ms) + GENERATE_WAIT_MS ))
    how="timer: ${GENERATE_WAIT_MS} ms after sync v$V_ROLLOUT was seen (the title never showed .generate)"
    while [ "$(now_ms)" -lt "$deadline" ]; do
        title=$(title_of "$actor")
        if [[ "$title" == *"SGLangLoRARollout.generate"* ]]; then how="its title showed .generate"; break; fi
        sleep 0.05
    done
    mark inject actor_kill_rollout "SIGKILL to $ACTOR_TITLE pid=$actor after sync v$V_ROLLOUT ($how)"
    kill -KILL "$actor"
}

inject_sync_kill() {
    local actor
    actor=$(actor_pid)
    [ -z "$actor" ] && { mark skipped actor_kill_sync "-" "no $ACTOR_TITLE process"; return; }
    mark inject actor_kill_sync "SIGKILL to $ACTOR_TITLE pid=$actor while sync_adapter(v$((V_SYNC + 1))) is held in the unload of v$V_SYNC (unload_stall ${STALL_S} s)"
    kill -KILL "$actor"
}

echo "== faults run: STEPS=$STEPS restarts=$RESTARTS run timeout ${RUN_TIMEOUT}s $VERL_SGLANG_LORA_INJECT"
: > "$LOG"
START=$(date +%s)
STEPS=$STEPS timeout "$RUN_TIMEOUT" bash "${EXAMPLE:-examples/run_qwen3_lora_fsdp.sh}" "${SGLANG_GPU_ARGS[@]}" \
    ++actor_rollout_ref.rollout.engine_kwargs.sglang_lora.server_max_restarts="$RESTARTS" \
    ++actor_rollout_ref.rollout.engine_kwargs.sglang_lora.resident="${FAULT_RESIDENT:-off}" >> "$LOG" 2>&1 &
RUN=$!
done_unload="" done_sched="" done_rollout="" done_sync=""
while kill -0 "$RUN" 2>/dev/null; do
    if [ -z "$done_unload" ] && grep -q "sglang_lora: fault_injection: unload_fail" "$LOG"; then
        mark inject unload_fail "VERL_SGLANG_LORA_INJECT=unload_fail:v$V_UNLOAD: the hook in _unload raises SGLangRequestError(unload_lora_adapter, 200) once"
        done_unload=1
    fi
    if [ -z "$done_sched" ] && synced "$V_SCHED"; then sleep 1; inject_scheduler_kill; done_sched=1; fi
    if [ -z "$done_rollout" ] && synced "$V_ROLLOUT"; then inject_rollout_kill; done_rollout=1; fi
    if [ -z "$done_sync" ] && grep -q "sglang_lora: fault_injection: unload_stall" "$LOG"; then inject_sync_kill; done_sync=1; fi
    sleep 0.2
done
wait "$RUN"; RC=$?
echo "== faults run rc=$RC wall=$(( $(date +%s) - START ))s steps=$(steps_done)/$STEPS"
python3 scripts/device/step_table.py "$LOG" timing_s/step sglang_lora/sync_version sglang_lora/samples \
    sglang_lora/base_policy_samples sglang_lora/staleness_max sglang_lora/server_restarts sglang_lora/unload_failures
grep -aE "sglang_lora(_faults)?: (fault_injection|server|unloading|inject|skipped)|crashed with exit code|SGLangLoRARollout\.[a-z_]+ failed" "$LOG" \
    | cut -c1-300 | tail -40
python3 scripts/device/fault_report.py "$LOG" "$STEPS"
