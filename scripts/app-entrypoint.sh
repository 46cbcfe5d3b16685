#!/bin/sh
# The app container's entry point: the scheduler in the background, the dashboard in front.
# If either stops, the container stops (and the healthcheck has said so before).
set -eu
rtax schedule &
scheduler=$!
# on $RTAX_DASHBOARD_ADDRESS, which the Dockerfile sets to 0.0.0.0: the container's own
# interfaces, reached only through a port mapping (docs/container.md: -p 127.0.0.1:8501:8501)
rtax dashboard &
dashboard=$!
trap 'kill $scheduler $dashboard 2>/dev/null' INT TERM
# Wait until one of them exits, then stop the other.
while kill -0 $scheduler 2>/dev/null && kill -0 $dashboard 2>/dev/null; do
    sleep 2  # supervising two processes; not synchronisation
done
kill $scheduler $dashboard 2>/dev/null || true
wait
