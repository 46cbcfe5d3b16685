# Two commands on a fresh machine: `make run` and `make test`. Each makes the project venv first.
# pip 23 backtracks for minutes on this dependency set, so the venv gets a current pip and uv,
# and installs the fully pinned lock (requirements.txt).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: venv fixtures docker run test lint bench clean

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

# For now: a short probe of every tier on the local substrate (and on docker and docker-gvisor when
# an engine answers) into data/rtax.db. The dashboard and the scheduler join this target later.
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

lint: venv
	$(VENV)/bin/ruff check rtax tests benchmarks
	$(VENV)/bin/ruff format --check rtax tests benchmarks

test: fixtures lint docker
	$(PY) -m pytest

bench: fixtures docker
	$(PY) benchmarks/bench_local.py
	$(PY) benchmarks/bench_docker.py

clean:
	rm -rf $(VENV) data/fixtures data/cache .pytest_cache .ruff_cache
