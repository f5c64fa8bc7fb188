#!/usr/bin/env bash
# A job on a GPU host that runs longer than one remote command may (e.g. 600 s; the host keeps its /tmp while
# commands follow closely): start it detached, then wait for it over as many commands as it needs (jobs under
# BG_DIR, default /tmp/bg).
#   bash scripts/device/bg.sh start NAME CMD...   # CMD runs under setsid with OUT=/tmp/bg/NAME/out; returns at once
#   bash scripts/device/bg.sh wait NAME [MAX_S]   # up to MAX_S (default 540) seconds; then the log's tail, what
#                                                 # the job wrote so far copied into $OUT, and its rc once it ended
# wait exits 0 once CMD has ended (whatever its rc, printed), 3 while it still runs: call it again.
# e.g. bash scripts/device/bg.sh start merge8b env SHAPE=qwen3-8b ARMS=merge RUN_TIMEOUT=1500 bash scripts/device/scale.sh
set -uo pipefail
cmd=${1:-}; name=${2:-}
[ -n "$name" ] || { echo "usage: bg.sh start NAME CMD... | wait NAME [MAX_S]" >&2; exit 2; }
dir=${BG_DIR:-/tmp/bg}/$name
case $cmd in
start)
    shift 2
    [ $# -gt 0 ] || { echo "bg.sh start $name: no command" >&2; exit 2; }
    [ -e "$dir/pid" ] && [ ! -e "$dir/rc" ] && { echo "bg.sh: $name is already running (pid $(cat "$dir/pid"))" >&2; exit 2; }
    rm -rf "$dir"; mkdir -p "$dir/out"
    # the command's own $OUT is the job's folder: each call's $OUT is new, the job outlives the call
    OUT=$dir/out setsid nohup bash -c '"$@" > "$0/log" 2>&1; echo $? > "$0/rc"' "$dir" "$@" > /dev/null 2>&1 &
    echo $! > "$dir/pid"
    echo "bg.sh: $name started (pid $!, log $dir/log)"
    ;;
wait)
    [ -d "$dir" ] || { echo "bg.sh: no job $name" >&2; exit 2; }
    deadline=$(( $(date +%s) + ${3:-540} ))
    while [ ! -e "$dir/rc" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 1; done
    tail -n "${TAIL:-15}" "$dir/log"
    # what the job has written so far, on every wait: a finished part survives a machine that goes back mid-job
    [ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp -a "$dir/out/." "$OUT/" && cp "$dir/log" "$OUT/$name.log"
    if [ ! -e "$dir/rc" ]; then
        echo "bg.sh: $name still running after $(( $(date +%s) - $(stat -c %Y "$dir/pid") )) s: wait again"
        exit 3
    fi
    echo "bg.sh: $name ended rc=$(cat "$dir/rc")"
    exit 0
    ;;
*) echo "usage: bg.sh start NAME CMD... | wait NAME [MAX_S]" >&2; exit 2 ;;
esac
