#!/usr/bin/env bash
# Build the app image on the registry-free Debian base and check that its healthcheck turns
# healthy (CI runs this after `make test`). Fails loudly on any step.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=rtax-app:ci   # one tag, so its layers are the next build's cache
name=rtax-app-ci-$$   # unique: a concurrent run's container is never touched
context=$(mktemp -d)
trap 'rm -rf "$context"; docker rm -f "$name" >/dev/null 2>&1 || true' EXIT
git ls-files -z | xargs -0 -I{} cp --parents {} "$context"
if [ -s /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$context/build-ca.crt"
fi
echo "check-app-image: building $tag on rtax-base:bookworm..." >&2
docker build --quiet --build-arg BASE=rtax-base:bookworm -t "$tag" "$context" >/dev/null
docker run -d --name "$name" "$tag" >/dev/null
deadline=$((SECONDS + 240))
while [ $SECONDS -lt $deadline ]; do
    status=$(docker inspect --format '{{.State.Health.Status}}' "$name")
    case "$status" in
        healthy) echo "check-app-image: $tag is healthy" >&2; exit 0 ;;
        unhealthy) break ;;
    esac
    sleep 2  # polling Docker's health status with a deadline
done
echo "check-app-image: FAILED: health is '$status'; last log lines:" >&2
docker logs --tail 30 "$name" >&2 || true
docker inspect --format '{{json .State.Health}}' "$name" >&2 || true
exit 1
