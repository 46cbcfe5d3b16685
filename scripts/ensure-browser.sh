#!/usr/bin/env bash
# Make Debian's Chromium (and its driver) available for the browser test of the dashboard.
# Playwright drives it through executable_path; no tool ever downloads a browser of its own.
# Under CI=true a missing browser is a failure; elsewhere one line, and the browser test skips.
set -uo pipefail

if [ -x /usr/bin/chromium ]; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "ensure-browser: installing chromium and chromium-driver from Debian..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq chromium chromium-driver >/dev/null
fi
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
if [ "${CI:-}" = "true" ]; then
    echo "ensure-browser: FAILED: chromium is not installed and could not be installed" >&2
    exit 1
fi
echo "ensure-browser: note: no chromium (needs root and apt); the browser test will skip" >&2
