# The rtax runner image: what every Docker-backed environment starts from.
# BASE defaults to the Debian bookworm root filesystem that `rtax image build` makes with
# mmdebstrap and `docker import` (no registry needed). With a registry, an official Python image
# works too: `rtax image build --base python:3.11-slim` (then git is added here, which needs the
# network).
ARG BASE=rtax-base:bookworm
FROM ${BASE}
RUN if ! command -v git >/dev/null; then \
        apt-get update && apt-get install -y --no-install-recommends git procps ca-certificates \
        && rm -rf /var/lib/apt/lists/*; \
    fi
# The workload toolchain (README.md#the-workload-toolchain): the pinned wheels that rtax
# verified, installed by the same script that makes the local floor's toolchain, first on PATH.
COPY toolchain/ /tmp/toolchain/
RUN sh /tmp/toolchain/install-toolchain.sh python3 /opt/toolchain /tmp/toolchain/wheels \
        /tmp/toolchain/installer.whl \
    && rm -rf /tmp/toolchain
ENV PATH=/opt/toolchain/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The preloaded environment: attrs/ (pristine checkout, for T1) and tools/astsearch.py.
COPY template/ /work/
WORKDIR /work
ENV PYTHONDONTWRITEBYTECODE=1 LC_ALL=C.UTF-8
CMD ["sleep", "infinity"]
