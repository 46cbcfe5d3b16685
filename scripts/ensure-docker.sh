#!/usr/bin/env bash
# Make a Docker engine with the gVisor (runsc) runtime answer, for `make test` and `make run`.
#
# Where no engine answers and this machine allows it (root, apt), install docker.io and mmdebstrap
# from Debian, install Debian 13's runsc, register it as a runtime, start dockerd and wait for it.
# Under CI=true anything missing is a failure; elsewhere it is one line saying why, and the Docker
# tests skip. Idempotent: a run where everything is in place changes nothing, and a machine that
# has an older runsc registration (Debian 12's /usr/bin/runsc with --platform=ptrace) gets the
# binary installed and the registration rewritten, and the running engine reloads it (SIGHUP).
#
# Why Debian 13's runsc (0.0~20240729), one static binary taken out of its .deb: Debian 12's
# (20221219) answers coreutils 9's statx with EINVAL, so `ls -la` and `stat` fail in the runner
# image; it is fetched through a trixie source list of its own, so this system never upgrades.
# Why these flags (docs/substrates/docker.md#gvisor):
#   --platform=systrap  gVisor's default and fastest platform without KVM; it works here.
#   --network=host      this runsc's own netstack refuses to start on kernels that show
#                       /proc/sys/net/core/rmem_default in every network namespace ("cannot run
#                       with network enabled in root network namespace"); with host, runsc uses
#                       the container's namespace (Docker's bridge) directly.
# Why "experimental": true: Docker 20.10's checkpoint API (`docker checkpoint create`, `start
# --checkpoint`), which the restore and fork launch paths use (docs/measurement.md#launch-paths),
# exists only on an experimental daemon. It is not reloadable: a running engine without it is
# restarted once (its containers stop; rtax's own are reaped by their owners' next reap).
set -uo pipefail

LOG=/var/log/rtax-dockerd.log
DAEMON_JSON=/etc/docker/daemon.json
RUNSC_BIN=/usr/local/bin/runsc
RUNSC_ARGS='["--network=host", "--platform=systrap"]'
# The runtime of containers that are snapshotted and restored (docs/measurement.md#launch-paths):
# runsc refuses to checkpoint a sandbox with --network=host ("checkpoint not supported when
# using hostinet"), so this one has no network.
RUNSC_CHECKPOINT_ARGS='["--network=none", "--platform=systrap"]'
RUNSC_SUITE=trixie
#: The oldest runsc build (YYYYMMDD) that runs every workload action (coreutils 9's statx).
RUNSC_MIN_BUILD=20240729

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

# The runsc at RUNSC_BIN runs and is at least RUNSC_MIN_BUILD ("runsc version 0.0~20240729.0",
# or upstream's "runsc version release-20240801.0").
runsc_current() {
    local build
    build=$("$RUNSC_BIN" --version 2>/dev/null | head -n 1 | grep -oE '[0-9]{8}' | head -n 1)
    [ -n "$build" ] && [ "$build" -ge "$RUNSC_MIN_BUILD" ]
}

install_runsc() {
    # apt-get download through a private apt state (its own sources.list, lists and cache): the
    # system's sources stay what they are, nothing from trixie is installed as a package.
    local dir
    dir=$(mktemp -d /tmp/rtax-runsc.XXXXXX) || return 1
    chown _apt "$dir" 2>/dev/null || true  # apt downloads as _apt, where that user exists
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/parts" "$dir/prefs"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
        "http://deb.debian.org/debian $RUNSC_SUITE main" >"$dir/sources.list"
    local opts=(
        -o "Dir::Etc::sourcelist=$dir/sources.list" -o "Dir::Etc::sourceparts=$dir/parts"
        -o "Dir::Etc::preferences=$dir/prefs/none" -o "Dir::Etc::preferencesparts=$dir/prefs"
        -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache"
        -o APT::Get::List-Cleanup=0
    )
    echo "ensure-docker: fetching runsc from Debian $RUNSC_SUITE into $RUNSC_BIN..." >&2
    local ok=1
    if apt-get "${opts[@]}" -qq update >/dev/null &&
        (cd "$dir" && apt-get "${opts[@]}" -qq download runsc >/dev/null) &&
        dpkg -x "$dir"/runsc_*.deb "$dir/root" &&
        install -m 0755 "$dir/root/usr/bin/runsc" "$RUNSC_BIN.new" &&
        mv -f "$RUNSC_BIN.new" "$RUNSC_BIN"; then
        ok=0
    fi
    rm -rf "$dir"
    return $ok
}

# What daemon.json / `docker info` should say for runsc, as one canonical JSON line.
wanted_runtime() {  # wanted_runtime [ARGS]
    python3 -c 'import json,sys; print(json.dumps({"path": sys.argv[1], "runtimeArgs": json.loads(sys.argv[2])}, sort_keys=True))' \
        "$RUNSC_BIN" "${1:-$RUNSC_ARGS}"
}

canonical() { python3 -c 'import json,sys; print(json.dumps(json.loads(sys.stdin.read() or "null"), sort_keys=True))' 2>/dev/null; }

# The running engine has runsc registered exactly as wanted (path and flags).
engine_runsc_ok() {
    [ "$(docker info --format '{{json .Runtimes.runsc}}' 2>/dev/null | canonical)" = "$(wanted_runtime)" ] &&
        [ "$(docker info --format '{{json (index .Runtimes "runsc-checkpoint")}}' 2>/dev/null | canonical)" = "$(wanted_runtime "$RUNSC_CHECKPOINT_ARGS")" ]
}

have_runsc_runtime() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }

configure_runsc() {
    # Merge the runsc runtime into daemon.json, keeping whatever else is configured there and
    # replacing an older runsc entry (path or flags).
    mkdir -p /etc/docker
    python3 - "$DAEMON_JSON" "$RUNSC_BIN" "$RUNSC_ARGS" "$RUNSC_CHECKPOINT_ARGS" <<'PY'
import json, os, sys
path, binary, args, checkpoint_args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
conf = {}
if os.path.exists(path):
    with open(path) as f:
        text = f.read()
    conf = json.loads(text) if text.strip() else {}
conf.setdefault("runtimes", {})["runsc"] = {"path": binary, "runtimeArgs": args}
conf["runtimes"]["runsc-checkpoint"] = {"path": binary, "runtimeArgs": checkpoint_args}
conf["experimental"] = True
with open(path + ".tmp", "w") as f:
    json.dump(conf, f, indent=2)
os.replace(path + ".tmp", path)
PY
}

daemon_json_ok() {
    [ "$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])).get("runtimes", {}).get("runsc")))' "$DAEMON_JSON" 2>/dev/null | canonical)" = "$(wanted_runtime)" ] &&
        [ "$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])).get("runtimes", {}).get("runsc-checkpoint")))' "$DAEMON_JSON" 2>/dev/null | canonical)" = "$(wanted_runtime "$RUNSC_CHECKPOINT_ARGS")" ] &&
        python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1])).get("experimental") is not True)' "$DAEMON_JSON" 2>/dev/null
}

engine_experimental() { [ "$(docker version --format '{{.Server.Experimental}}' 2>/dev/null)" = true ]; }

stop_engine() {
    # Experimental mode is read at start only: stop dockerd (and its containerd), bounded.
    echo "ensure-docker: restarting dockerd for \"experimental\": true (running containers stop)" >&2
    pkill -TERM -x dockerd || true
    for _ in $(seq 100); do pgrep -x dockerd >/dev/null || break; sleep 0.2; done  # bounded
    pkill -TERM -x containerd || true
    for _ in $(seq 50); do pgrep -x containerd >/dev/null || break; sleep 0.2; done
}

reload_engine() {
    # A running engine reads daemon.json again on SIGHUP (runtimes are reloadable).
    pkill -HUP -x dockerd || true
    for _ in $(seq 50); do engine_runsc_ok && return 0; sleep 0.1; done  # poll, bounded
    return 1
}

if engine_up && engine_runsc_ok && runsc_current && engine_experimental; then
    exit 0
fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    engine_up && engine_runsc_ok && runsc_current &&
        fail_or_note "the Docker engine is not experimental (checkpoints need \"experimental\": true in $DAEMON_JSON) and this user can't restart it"
    engine_up && have_runsc_runtime &&
        fail_or_note "the Docker engine's runsc is not $RUNSC_BIN (>= $RUNSC_MIN_BUILD) with $RUNSC_ARGS, and this user can't install it"
    engine_up && fail_or_note "the Docker engine has no runsc runtime and this user can't add it"
    fail_or_note "no Docker engine answers and this user can't install one (needs root and apt)"
fi

# runsc first, then its registration, then docker.io: where installing docker.io starts dockerd
# (an init system), that engine comes up with runsc already.
if ! runsc_current; then
    install_runsc || fail_or_note "cannot install runsc from Debian $RUNSC_SUITE into $RUNSC_BIN"
    runsc_current || fail_or_note "$RUNSC_BIN is not runsc >= $RUNSC_MIN_BUILD: $("$RUNSC_BIN" --version 2>&1 | head -n 1)"
fi
if ! daemon_json_ok; then
    configure_runsc || fail_or_note "cannot write $DAEMON_JSON"
fi
if engine_up && ! engine_runsc_ok; then
    reload_engine || true
fi

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
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
if engine_up && ! engine_runsc_ok; then
    reload_engine || true
fi
if engine_up && ! engine_experimental; then
    stop_engine
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

engine_experimental || fail_or_note "the Docker engine is not experimental after configuring it (checkpoints need it)"
engine_runsc_ok || fail_or_note "the Docker engine's runsc is not $RUNSC_BIN with $RUNSC_ARGS after configuring it (docker info: $(docker info --format '{{json .Runtimes.runsc}}' 2>&1))"
echo "ensure-docker: engine $(docker version --format '{{.Server.Version}}') with $("$RUNSC_BIN" --version | head -n 1) ($RUNSC_ARGS) is up" >&2
