#!/bin/sh
# The app container's entry point: the scheduler in the background, the dashboard in front.
# If either stops, the container stops (and the healthcheck has said so before).
set -eu
rtax schedule &
scheduler=$!
streamlit run /app/app.py --server.headless true --server.address 0.0.0.0 \
    --server.port 8501 --browser.gatherUsageStats false &
dashboard=$!
trap 'kill $scheduler $dashboard 2>/dev/null' INT TERM
# Wait until one of them exits, then stop the other.
while kill -0 $scheduler 2>/dev/null && kill -0 $dashboard 2>/dev/null; do
    sleep 2  # supervising two processes; not synchronisation
done
kill $scheduler $dashboard 2>/dev/null || true
wait
