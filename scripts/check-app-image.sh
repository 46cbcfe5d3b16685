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
# published on the host's loopback only, as docs/container.md says to
docker run -d --name "$name" -p 127.0.0.1::8501 "$tag" >/dev/null
deadline=$((SECONDS + 240))
while [ $SECONDS -lt $deadline ]; do
    status=$(docker inspect --format '{{.State.Health.Status}}' "$name")
    case "$status" in
        healthy)
            # the dashboard listens where the mapping reaches it (RTAX_DASHBOARD_ADDRESS)
            published=$(docker port "$name" 8501/tcp | head -n 1)
            answer=$(python3 -c 'import sys, urllib.request as u
print(u.urlopen(sys.argv[1], timeout=10).read().decode())' "http://$published/_stcore/health" \
                2>/dev/null || true)
            if [ "$answer" = ok ]; then
                echo "check-app-image: $tag is healthy and answers on $published" >&2
                exit 0
            fi
            echo "check-app-image: FAILED: healthy, but nothing answers on $published" >&2
            break ;;
        unhealthy) break ;;
    esac
    sleep 2  # polling Docker's health status with a deadline
done
echo "check-app-image: FAILED: health is '$status'; last log lines:" >&2
docker logs --tail 30 "$name" >&2 || true
docker inspect --format '{{json .State.Health}}' "$name" >&2 || true
exit 1
