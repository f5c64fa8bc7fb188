#!/usr/bin/env bash
# GPU kill-and-recover run (issue: sync protocol, faults): the adapter-mode example with server_max_restarts=1;
# after the adapter sync of version KILL_AFTER_VERSION the SGLang server actor gets SIGQUIT -- what SGLang's
# scheduler sends its parent when it crashes, which ends the actor -- and the run must still finish all STEPS.
#   bash scripts/device/kill_recover.sh            (log: $OUT/e2e_kill_recover.log)
set -uo pipefail
source scripts/device/env.sh
LOG="$LOGDIR/e2e_kill_recover.log"
VERSION=${KILL_AFTER_VERSION:-1}
STEPS=${STEPS:-4} timeout "${E2E_TIMEOUT:-480}" bash examples/run_qwen3_lora_fsdp.sh "${SGLANG_GPU_ARGS[@]}" \
    ++actor_rollout_ref.rollout.engine_kwargs.sglang_lora.server_max_restarts=1 > "$LOG" 2>&1 &
RUN=$!
killed=""
while kill -0 "$RUN" 2>/dev/null; do
    if [ -z "$killed" ] && grep -qE "sglang_lora: adapter sync \{.*'version': $VERSION," "$LOG"; then
        sleep 2
        pid=$(pgrep -f "ray::SGLangLoRARollout" | head -1)
        echo "== SIGQUIT to the server actor pid=${pid:-none} after adapter version $VERSION"
        [ -n "$pid" ] && kill -QUIT "$pid"
        killed=1
    fi
    sleep 1
done
wait "$RUN"; RC=$?
echo "== kill_recover rc=$RC"
python3 scripts/device/step_table.py "$LOG"
grep -E "sglang_lora: (server|SGLang moved|no adapter|launching)|ServerRestartError|ActorDiedError|SGLangRequestError" "$LOG" | tail -10
# the verdict: killed, recovered (relaunched on the checkpoint's weights), and every step finished
steps=$(grep -c "step:[0-9]* - " "$LOG")
recovered=$(grep -c "sglang_lora: server recovered" "$LOG")
relaunch_auto=$(grep -c "load_format dummy -> auto" "$LOG")
verdict=FAIL
[ -n "$killed" ] && [ "$recovered" -ge 1 ] && [ "$relaunch_auto" -ge 1 ] && [ "$steps" -ge "${STEPS:-4}" ] && verdict=PASS
echo "== kill_recover verdict=$verdict (killed=${killed:-no} recovered=$recovered relaunch_load_format_auto=$relaunch_auto steps=$steps/${STEPS:-4})"
exit $RC
