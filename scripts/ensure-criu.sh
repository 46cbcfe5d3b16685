#!/usr/bin/env bash
# Make a CRIU that works on this kernel available, for the restore and fork launch paths of the
# docker (runc) and podman kinds (docs/measurement.md#launch-paths).
#
# Why built from source: Debian 12's CRIU 3.17 fails `criu check` on recent kernels ("vdso:
# Unexpected rt vDSO area bounds", fixed in CRIU 4.1), and Debian 13's 4.1.1 binary needs glibc
# 2.38. Its source builds here in under a minute: the upstream tarball is fetched through a
# trixie source list of its own (apt verifies it against that suite's index; the system's
# sources stay what they are), built with Debian 12's -dev packages (`make criu`, the binary
# only) and installed as /usr/local/sbin/criu, ahead of /usr/sbin on root's PATH, where runc
# and podman look for it. gVisor needs none of this: runsc checkpoints by itself.
#
# Idempotent: a CRIU that answers `criu check` with "Looks good" and is at least 4.1 changes
# nothing. Under CI=true anything missing is a failure; elsewhere one line, and the restore
# tests of runc and podman skip saying why.
set -uo pipefail

CRIU_BIN=/usr/local/sbin/criu
CRIU_SUITE=trixie
CRIU_MIN=4.1
BUILD_DEPS=(gcc make pkg-config libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler
    protobuf-compiler python3-protobuf libnl-3-dev libcap-dev libnet1-dev libaio-dev
    libbsd-dev libgnutls28-dev uuid-dev xz-utils)

fail_or_note() {
    if [ "${CI:-}" = "true" ]; then
        echo "ensure-criu: FAILED: $1" >&2
        exit 1
    fi
    echo "ensure-criu: note: $1; runc and podman restore tests will skip" >&2
    exit 0
}

# A criu at "$1" that is new enough and says this kernel can checkpoint.
usable() {
    local version
    version=$("$1" --version 2>/dev/null | awk '/^Version:/ {print $2}')
    [ -n "$version" ] || return 1
    printf '%s\n%s\n' "$CRIU_MIN" "$version" | sort -V -C || return 1
    "$1" check >/dev/null 2>&1
}

found=$(command -v criu || true)
if [ -n "$found" ] && usable "$found"; then
    exit 0
fi
if usable "$CRIU_BIN"; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    fail_or_note "no CRIU >= $CRIU_MIN that passes 'criu check' (building one needs root and apt)"
fi

echo "ensure-criu: building CRIU from Debian $CRIU_SUITE's source into $CRIU_BIN..." >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq --no-install-recommends "${BUILD_DEPS[@]}" >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1
    apt-get install -y -qq --no-install-recommends "${BUILD_DEPS[@]}" >/dev/null ||
        fail_or_note "could not install CRIU's build dependencies"
fi
dir=$(mktemp -d /tmp/rtax-criu.XXXXXX) || fail_or_note "no temporary folder"
trap 'rm -rf "$dir"' EXIT
chown _apt "$dir" 2>/dev/null || true  # apt downloads as _apt, where that user exists
mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/parts" "$dir/prefs" "$dir/src"
chown _apt "$dir/src" 2>/dev/null || true
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
    "http://deb.debian.org/debian $CRIU_SUITE main" >"$dir/sources.list"
opts=(
    -o "Dir::Etc::sourcelist=$dir/sources.list" -o "Dir::Etc::sourceparts=$dir/parts"
    -o "Dir::Etc::preferences=$dir/prefs/none" -o "Dir::Etc::preferencesparts=$dir/prefs"
    -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache"
    -o APT::Get::List-Cleanup=0
)
apt-get "${opts[@]}" -qq update >/dev/null || fail_or_note "could not read Debian $CRIU_SUITE's index"
# Only the upstream tarball is needed (Debian's packaging is not used); apt keeps a file only
# when its checksum matches the index, so a tarball that is here is the suite's.
(cd "$dir/src" && apt-get "${opts[@]}" -qq source --download-only criu >/dev/null 2>&1)
tarball=$(ls "$dir"/src/criu_*.orig.tar.* 2>/dev/null | head -n 1)
[ -n "$tarball" ] || fail_or_note "could not fetch CRIU's source from Debian $CRIU_SUITE"
tar -xf "$tarball" -C "$dir/src" || fail_or_note "could not unpack $tarball"
tree=$(find "$dir/src" -mindepth 1 -maxdepth 1 -type d -name 'criu-*' | head -n 1)
if ! make -C "$tree" -j"$(nproc)" criu >"$dir/build.log" 2>&1; then
    tail -n 20 "$dir/build.log" >&2
    fail_or_note "CRIU did not build"
fi
install -m 0755 "$tree/criu/criu" "$CRIU_BIN.new" && mv -f "$CRIU_BIN.new" "$CRIU_BIN"
if ! usable "$CRIU_BIN"; then
    "$CRIU_BIN" check >&2
    fail_or_note "the CRIU built ($("$CRIU_BIN" --version | head -n 1)) fails 'criu check' here"
fi
echo "ensure-criu: $("$CRIU_BIN" --version | head -n 1) at $CRIU_BIN: criu check looks good" >&2
