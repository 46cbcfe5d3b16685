#!/usr/bin/env bash
# Make Debian's podman (with catatonit, the init its `--init` runs) available for the podman
# substrate's tests. The runner image is copied into podman's store by the substrate itself
# (docs/substrates/podman.md). Under CI=true a missing podman is a failure; elsewhere one line,
# and the podman tests skip.
set -uo pipefail

have() { command -v podman >/dev/null && [ -x /usr/libexec/podman/catatonit ]; }

if have; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "ensure-podman: installing podman and catatonit from Debian..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq podman catatonit >/dev/null
fi
if have; then
    exit 0
fi
if [ "${CI:-}" = "true" ]; then
    echo "ensure-podman: FAILED: podman and catatonit are not installed and could not be installed" >&2
    exit 1
fi
echo "ensure-podman: note: no podman (needs root and apt); the podman tests will skip" >&2
