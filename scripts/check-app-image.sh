#!/usr/bin/env bash
# Build the app image on the registry-free Debian base and check that its healthcheck turns
# healthy (CI runs this after `make test`). Fails loudly on any step.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=rtax-app:ci
context=$(mktemp -d)
trap 'rm -rf "$context"; docker rm -f rtax-app-ci >/dev/null 2>&1 || true' EXIT
git ls-files -z | xargs -0 -I{} cp --parents {} "$context"
if [ -s /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$context/build-ca.crt"
else
    : > "$context/build-ca.crt"
fi
echo "check-app-image: building $tag on rtax-base:bookworm..." >&2
docker build --quiet --build-arg BASE=rtax-base:bookworm -t "$tag" "$context" >/dev/null
docker rm -f rtax-app-ci >/dev/null 2>&1 || true
docker run -d --name rtax-app-ci "$tag" >/dev/null
deadline=$((SECONDS + 240))
while [ $SECONDS -lt $deadline ]; do
    status=$(docker inspect --format '{{.State.Health.Status}}' rtax-app-ci)
    case "$status" in
        healthy) echo "check-app-image: $tag is healthy" >&2; exit 0 ;;
        unhealthy) break ;;
    esac
    sleep 2  # polling Docker's health status with a deadline
done
echo "check-app-image: FAILED: health is '$status'; last log lines:" >&2
docker logs --tail 30 rtax-app-ci >&2 || true
docker inspect --format '{{json .State.Health}}' rtax-app-ci >&2 || true
exit 1
