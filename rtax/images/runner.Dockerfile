# The rtax runner image: what every Docker-backed environment starts from.
# BASE defaults to the Debian bookworm root filesystem that `rtax image build` makes with
# mmdebstrap and `docker import` (no registry needed). With a registry, an official Python image
# works too: `rtax image build --base python:3.11-slim` (then git, pytest and hypothesis are added
# here, which needs the network).
ARG BASE=rtax-base:bookworm
FROM ${BASE}
RUN if ! command -v git >/dev/null || ! python3 -c "import pytest, hypothesis" 2>/dev/null; then \
        apt-get update && apt-get install -y --no-install-recommends git procps ca-certificates \
        && rm -rf /var/lib/apt/lists/* \
        && python3 -m pip install --no-cache-dir pytest hypothesis; \
    fi
# The preloaded environment: attrs/ (pristine checkout, for T1) and tools/astsearch.py.
COPY template/ /work/
WORKDIR /work
ENV PYTHONDONTWRITEBYTECODE=1 LC_ALL=C.UTF-8
CMD ["sleep", "infinity"]
