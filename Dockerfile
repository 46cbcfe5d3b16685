# The rtax app: the scheduler and the dashboard in one container (docs/container.md).
#
#   docker build -t rtax-app .                                   # official Python image (registry)
#   docker build -t rtax-app --build-arg BASE=rtax-base:bookworm .   # registry-free (CI does this)
#   docker run -p 127.0.0.1:8501:8501 -v rtax-data:/app/data rtax-app
#
# The dashboard listens on every interface *of the container* (RTAX_DASHBOARD_ADDRESS below), so
# that a port mapping reaches it; which host interface it is published on is the `-p` mapping's
# choice: 127.0.0.1 as above, or behind an authenticating proxy (README: the dashboard).
#
# The Docker socket is never mounted unless you ask for the docker substrates:
#   docker run --network host -e RTAX_DASHBOARD_ADDRESS=127.0.0.1 \
#       -v /var/run/docker.sock:/var/run/docker.sock \
#       --group-add "$(stat -c %g /var/run/docker.sock)" -v rtax-data:/app/data rtax-app
# (with --network host the container's interfaces are the host's: hence 127.0.0.1 there)
ARG BASE=python:3.11-slim
FROM ${BASE}

# tini as PID 1 (it reaps and forwards signals); the Debian base also lacks venv and pip.
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends tini git ca-certificates; \
    if ! python3 -c "import ensurepip, venv" 2>/dev/null; then \
        apt-get install -y --no-install-recommends python3-venv python3-pip; \
    fi; \
    rm -rf /var/lib/apt/lists/*; \
    useradd --create-home --uid 10001 rtax

WORKDIR /app
# Only the runtime lock (requirements.txt): no test runner, linter, browser driver or moto (the
# EC2 emulation's server); those are in requirements-dev.txt (docs/container.md).
# build-ca.crt is optional (the glob matches nothing without it): an extra CA bundle for pip
# behind a TLS-inspecting proxy; scripts/check-app-image.sh puts the host's bundle there.
COPY requirements.txt pyproject.toml README.md build-ca.cr[t] ./
COPY rtax ./rtax
RUN set -eux; \
    if [ -s build-ca.crt ]; then export PIP_CERT=/app/build-ca.crt; fi; \
    python3 -m venv /opt/venv; \
    /opt/venv/bin/pip install --no-cache-dir --quiet --upgrade pip; \
    /opt/venv/bin/pip install --no-cache-dir --quiet -r requirements.txt; \
    /opt/venv/bin/pip install --no-cache-dir --quiet --no-deps .; \
    RTAX_FIXTURES_DIR=/opt/rtax/fixtures RTAX_TOOLCHAIN_DIR=/opt/rtax/toolchain \
        /opt/venv/bin/python -m rtax fixtures; \
    rm -rf /opt/rtax/cache /app/data/cache /app/build-ca.crt; \
    chown -R rtax /opt/rtax
COPY app.py rtax.toml ./
COPY pages ./pages
COPY .streamlit ./.streamlit
COPY scripts/app-entrypoint.sh /usr/local/bin/rtax-app
RUN mkdir -p /app/data && chown rtax /app/data

ENV PATH=/opt/venv/bin:$PATH \
    RTAX_DATA_DIR=/app/data \
    RTAX_FIXTURES_DIR=/opt/rtax/fixtures \
    RTAX_TOOLCHAIN_DIR=/opt/rtax/toolchain \
    RTAX_CONFIG=/app/rtax.toml \
    RTAX_DASHBOARD_ADDRESS=0.0.0.0 \
    PYTHONUNBUFFERED=1
USER rtax
VOLUME ["/app/data"]
EXPOSE 8501
HEALTHCHECK --interval=10s --timeout=8s --start-period=90s --retries=3 CMD ["rtax", "health"]
ENTRYPOINT ["tini", "--", "rtax-app"]
