#!/bin/sh
# Chromium in the browser tests' own network namespace: tests/browser.py makes the namespace and
# points Playwright's executable_path here, with the namespace in $RTAX_BROWSER_NETNS and the
# real browser in $RTAX_BROWSER_CHROMIUM; Playwright's arguments follow unchanged. Playwright
# talks to the browser over pipes, which cross the namespace. exec, twice: the process Playwright
# started, waits for and stops is Chromium itself.
set -eu
exec ip netns exec "${RTAX_BROWSER_NETNS:?tests/browser.py sets it}" \
    "${RTAX_BROWSER_CHROMIUM:-/usr/bin/chromium}" "$@"
