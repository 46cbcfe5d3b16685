#!/usr/bin/env bash
# Make a Docker engine with the gVisor (runsc) runtime answer, for `make test` and `make run`.
#
# Where no engine answers and this machine allows it (root, apt), install docker.io, runsc and
# mmdebstrap from Debian, register runsc as a runtime (with --network=host: the ptrace platform
# has no netstack of its own here), start dockerd and wait for it. Under CI=true a missing engine
# is a failure; elsewhere it is one line saying why, and the Docker tests skip.
set -uo pipefail

LOG=/var/log/rtax-dockerd.log
DAEMON_JSON=/etc/docker/daemon.json

fail_or_note() {
    if [ "${CI:-}" = "true" ]; then
        echo "ensure-docker: FAILED: $1" >&2
        exit 1
    fi
    echo "ensure-docker: note: $1; Docker tests will skip (run as root with apt to get it)" >&2
    exit 0
}

engine_up() { docker info >/dev/null 2>&1; }

# A process that exists and is not a zombie (a killed dockerd may linger as one where PID 1
# does not reap).
alive() { [ -n "$1" ] && [ -r "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat")" != Z ]; }

wait_engine() {  # wait_engine SECONDS PID
    local deadline=$((SECONDS + $1))
    while [ $SECONDS -lt $deadline ]; do
        engine_up && return 0
        alive "$2" || return 1
        sleep 0.5  # polling dockerd's socket with a deadline
    done
    return 1
}

configure_runsc() {
    # Merge the runsc runtime into daemon.json, keeping whatever else is configured there.
    mkdir -p /etc/docker
    python3 - "$DAEMON_JSON" <<'PY'
import json, os, sys
path = sys.argv[1]
conf = {}
if os.path.exists(path):
    with open(path) as f:
        conf = json.load(f) if f.read().strip() else {}
conf.setdefault("runtimes", {})["runsc"] = {
    "path": "/usr/bin/runsc", "runtimeArgs": ["--network=host", "--platform=ptrace"]}
with open(path, "w") as f:
    json.dump(conf, f, indent=2)
PY
}

have_runsc_runtime() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q runsc; }

if engine_up && have_runsc_runtime; then
    exit 0
fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    engine_up && fail_or_note "the Docker engine has no runsc runtime and this user can't add it"
    fail_or_note "no Docker engine answers and this user can't install one (needs root and apt)"
fi

# The runtime is configured before docker.io is installed: where installing it starts dockerd
# (an init system), that engine then comes up with runsc already.
if ! grep -q runsc "$DAEMON_JSON" 2>/dev/null; then
    configure_runsc || fail_or_note "cannot write $DAEMON_JSON"
    if engine_up; then
        # A running engine reads daemon.json again on SIGHUP (runtimes are reloadable).
        pkill -HUP -x dockerd || true
        for _ in $(seq 50); do have_runsc_runtime && break; sleep 0.1; done
    fi
fi

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v runsc >/dev/null || missing+=(runsc)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
if [ ${#missing[@]} -gt 0 ]; then
    echo "ensure-docker: installing ${missing[*]} from Debian..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null || fail_or_note "apt-get update failed"
    apt-get install -y -qq "${missing[@]}" >/dev/null || fail_or_note "apt-get install ${missing[*]} failed"
fi

# An engine that an install just started may need a moment before it answers.
if ! engine_up && pgrep -x dockerd >/dev/null; then
    wait_engine 30 "$(pgrep -x dockerd | head -n 1)" || true
fi
if engine_up && ! have_runsc_runtime; then
    pkill -HUP -x dockerd || true
    for _ in $(seq 50); do have_runsc_runtime && break; sleep 0.1; done
fi

if ! engine_up; then
    # A dockerd killed with its session leaves its pid file behind, and a new one refuses to start.
    for pidfile in /var/run/docker.pid /run/docker.pid; do
        if [ -f "$pidfile" ] && ! alive "$(cat "$pidfile")"; then rm -f "$pidfile"; fi
    done
    echo "ensure-docker: starting dockerd (log: $LOG)..." >&2
    nohup dockerd >"$LOG" 2>&1 &
    wait_engine 90 $! || fail_or_note "dockerd did not answer within 90 s (see $LOG: $(tail -n 3 "$LOG" | tr '\n' ' '))"
fi

have_runsc_runtime || fail_or_note "the Docker engine has no runsc runtime after configuring it"
echo "ensure-docker: engine $(docker version --format '{{.Server.Version}}') with runsc is up" >&2
