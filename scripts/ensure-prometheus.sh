#!/usr/bin/env bash
# Make Debian's Prometheus available for the test that lets it scrape the scheduler's /metrics
# (docs/metrics.md). Only the binary is used: the test starts it on a free loopback port with a
# generated configuration and a temporary storage folder; no Prometheus service is started here.
# Under CI=true a missing binary is a failure; elsewhere one line, and the Prometheus test skips.
set -uo pipefail

if command -v prometheus >/dev/null; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "ensure-prometheus: installing prometheus from Debian..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null \
        && apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
if command -v prometheus >/dev/null; then
    exit 0
fi
if [ "${CI:-}" = "true" ]; then
    echo "ensure-prometheus: FAILED: prometheus is not installed and could not be installed" >&2
    exit 1
fi
echo "ensure-prometheus: note: no prometheus (needs root and apt); the Prometheus test will skip" >&2
