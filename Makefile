# Two commands on a fresh machine: `make run` and `make test`. Each makes the project venv first.
# pip 23 backtracks for minutes on this dependency set, so the venv gets a current pip and uv,
# and installs the fully pinned development lock: requirements-dev.txt, which is the runtime lock
# requirements.txt (all the app image installs) plus the tests, lint and the cloud emulations.
# `make lock` makes both from pyproject.toml.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: venv lock fixtures docker browser prometheus run demo test lint bench detection-eval faults soak clean

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip uv
	$(VENV)/bin/uv pip install --quiet --python $(PY) -r requirements-dev.txt
	$(VENV)/bin/uv pip install --quiet --python $(PY) --no-deps -e .
	touch $@

venv: $(STAMP)

# Both locks from pyproject.toml (needs PyPI). Every current pin is kept (uv prefers what the
# output file already says), and the runtime lock is the dev lock's pins for the runtime set
# (-c), so a package in both has one version. Upgrade on purpose, e.g.
#   make lock UPGRADE='--upgrade-package streamlit'
LOCK = $(VENV)/bin/uv pip compile pyproject.toml --python-version 3.11 --quiet \
	--annotation-style line --custom-compile-command 'make lock'
lock: venv
	$(LOCK) --extra dev $(UPGRADE) -o requirements-dev.txt
	$(LOCK) -c requirements-dev.txt -o requirements.txt

fixtures: venv
	$(PY) -m rtax fixtures

# A Docker engine with gVisor's runsc runtime and checkpoints (installed and started when this
# machine allows it; required under CI=true), a CRIU that works on this kernel for runc and
# podman checkpoints (built from source, scripts/ensure-criu.sh), Debian's podman for the podman
# kind (likewise), then the runner image when it is missing or stale.
docker: fixtures
	bash scripts/ensure-docker.sh
	bash scripts/ensure-criu.sh
	bash scripts/ensure-podman.sh
	@if docker info >/dev/null 2>&1; then $(PY) -m rtax image build; fi

# Debian's Chromium for the dashboard's browser test (required under CI=true).
browser:
	bash scripts/ensure-browser.sh

# Debian's Prometheus for the test that scrapes the scheduler's /metrics (required under CI=true).
prometheus:
	bash scripts/ensure-prometheus.sh

# The scheduler (rtax.toml: local, and docker / docker-gvisor when an engine answers) in the
# background, and the dashboard on http://127.0.0.1:8501 in the foreground (this machine only:
# `rtax dashboard` listens where rtax.toml's [dashboard] says, docs/dashboard.md#serving);
# stopping the dashboard (Ctrl-C) stops the scheduler too.
# `make run CONFIG=examples/paths.toml` runs another shipped plan the same way (both read it).
CONFIG ?=
WITH_CONFIG = $(if $(CONFIG),--config $(CONFIG))
run: fixtures docker
	@set -e; \
	$(PY) -m rtax schedule $(WITH_CONFIG) & sched=$$!; \
	trap 'kill $$sched 2>/dev/null; wait $$sched 2>/dev/null' EXIT INT TERM; \
	$(PY) -m rtax dashboard $(WITH_CONFIG)

# The opt-in demo: the cloud substrates against their local emulations (labelled emulated).
demo: fixtures docker
	@set -e; \
	$(PY) -m rtax schedule --config examples/emulated.toml & sched=$$!; \
	trap 'kill $$sched 2>/dev/null; wait $$sched 2>/dev/null' EXIT INT TERM; \
	$(PY) -m rtax dashboard --config examples/emulated.toml

lint: venv
	$(VENV)/bin/ruff check rtax tests benchmarks app.py pages
	$(VENV)/bin/ruff format --check rtax tests benchmarks app.py pages

test: fixtures lint docker browser prometheus
	$(PY) -m pytest

# BENCH_RUNS=1000000: the dashboard's pages over a year of a million synthetic runs (~6 GB in a
# temporary folder, a few minutes to make) instead of 100,000 (docs/benchmarks.md).
BENCH_RUNS ?= 100000
bench: fixtures docker
	$(PY) benchmarks/bench_local.py
	$(PY) benchmarks/bench_docker.py
	$(PY) benchmarks/bench_pool.py
	$(PY) benchmarks/bench_paths.py
	$(PY) benchmarks/bench_floor.py
	$(PY) benchmarks/bench_dashboard.py --runs $(BENCH_RUNS)
	$(PY) benchmarks/bench_browser.py
	$(PY) benchmarks/bench_backup.py
	$(PY) benchmarks/bench_ray.py
	$(PY) -m rtax detection-eval

# The detection evaluation (docs/alerts.md#evaluation): the shipped detection and incident
# rules replayed over seeded families of latency series and the real series recorded here
# (benchmarks/series/), false incidents per 1,000 samples and detection delays, each target
# meets or MISSES. A few minutes on two cores.
detection-eval: venv
	$(PY) -m rtax detection-eval

# The fault suite (docs/faults.md): rollouts on every substrate under injected faults, on a
# private dockerd of its own (the system's engine is never restarted); one table, exit 1 on any
# non-zero that must be zero. CI runs FAULTS_SIZE=ci.
FAULTS_SIZE ?= full
faults: fixtures docker
	$(PY) -m rtax.faultsuite --size $(FAULTS_SIZE)

# The soak (docs/soak.md): the scheduler with the shipped plans 10x faster for SOAK_MIN minutes,
# the dashboard read by Chromium, Prometheus scraping /metrics, a local webhook; its memory,
# files, threads and WAL sampled, slopes and a verdict per target, exit 1 on a miss. CI: 5 min.
# SOAK_FLAGS=--keep keeps its folder (logs, database, samples.csv) and prints where.
SOAK_MIN ?= 60
SOAK_FLAGS ?=
soak: fixtures docker browser prometheus
	$(PY) benchmarks/soak.py --minutes $(SOAK_MIN) $(SOAK_FLAGS)

clean:
	rm -rf $(VENV) data/fixtures data/cache .pytest_cache .ruff_cache test-artifacts
