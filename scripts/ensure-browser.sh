#!/usr/bin/env bash
# Make Debian's Chromium (and its driver) available for the browser test of the dashboard, and
# iproute2's `ip`, with which the tests run it in a network namespace of its own (tests/browser.py:
# Docker's interfaces coming and going would abort its requests otherwise).
# Playwright drives it through executable_path; no tool ever downloads a browser of its own.
# Under CI=true a missing browser or `ip` is a failure; elsewhere one line, and the browser test
# skips (no Chromium) or runs Chromium in the host's network (no `ip`).
set -uo pipefail

missing() {
    [ -x /usr/bin/chromium ] || echo chromium chromium-driver
    command -v ip >/dev/null || echo iproute2
}

need=$(missing)
if [ -z "$need" ]; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "ensure-browser: installing $need from Debian..." >&2
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086 # one package a word
    apt-get update -qq >/dev/null && apt-get install -y -qq $need >/dev/null
fi
need=$(missing)
if [ -z "$need" ]; then
    exit 0
fi
if [ "${CI:-}" = "true" ]; then
    echo "ensure-browser: FAILED: $need not installed and could not be installed" >&2
    exit 1
fi
if [ ! -x /usr/bin/chromium ]; then
    echo "ensure-browser: note: no chromium (needs root and apt); the browser test will skip" >&2
else
    echo "ensure-browser: note: no ip (iproute2; needs root and apt); Chromium will share" \
        "the host's network in the browser tests" >&2
fi
