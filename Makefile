# Two commands on a fresh machine: `make run` and `make test`. Each makes the project venv first.
# pip 23 backtracks for minutes on this dependency set, so the venv gets a current pip and uv,
# and installs the fully pinned lock (requirements.txt).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: venv fixtures docker browser run test lint bench clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip uv
	$(VENV)/bin/uv pip install --quiet --python $(PY) -r requirements.txt
	$(VENV)/bin/uv pip install --quiet --python $(PY) --no-deps -e .
	touch $@

venv: $(STAMP)

fixtures: venv
	$(PY) -m rtax fixtures

# A Docker engine with gVisor's runsc runtime (installed and started when this machine allows it;
# required under CI=true), then the runner image when it is missing or stale.
docker: fixtures
	bash scripts/ensure-docker.sh
	@if docker info >/dev/null 2>&1; then $(PY) -m rtax image build; fi

# Debian's Chromium for the dashboard's browser test (required under CI=true).
browser:
	bash scripts/ensure-browser.sh

# A short probe of every tier on the local substrate (and on docker and docker-gvisor when an
# engine answers) into data/rtax.db, then the dashboard on http://localhost:8501.
# (The scheduler joins this target with the live-probing issue.)
run: fixtures docker
	$(PY) -m rtax probe --substrate local --tier T0 --repeat 5
	$(PY) -m rtax probe --substrate local --tier T1 --repeat 3
	$(PY) -m rtax probe --substrate local --tier T2 --repeat 2
	$(PY) -m rtax probe --substrate local --tier T2 --steps 10 --repeat 1
	@if docker info >/dev/null 2>&1; then \
	    $(PY) -m rtax probe --substrate docker --tier T0 --repeat 5 && \
	    $(PY) -m rtax probe --substrate docker --tier T0 --repeat 5 --mode session && \
	    $(PY) -m rtax probe --substrate docker --tier T2 --repeat 2 && \
	    $(PY) -m rtax probe --substrate docker-gvisor --tier T0 --repeat 3; \
	fi
	$(VENV)/bin/streamlit run app.py --server.headless true --browser.gatherUsageStats false

lint: venv
	$(VENV)/bin/ruff check rtax tests benchmarks app.py pages
	$(VENV)/bin/ruff format --check rtax tests benchmarks app.py pages

test: fixtures lint docker browser
	$(PY) -m pytest

bench: fixtures docker
	$(PY) benchmarks/bench_local.py
	$(PY) benchmarks/bench_docker.py
	$(PY) benchmarks/bench_dashboard.py

clean:
	rm -rf $(VENV) data/fixtures data/cache .pytest_cache .ruff_cache test-artifacts
