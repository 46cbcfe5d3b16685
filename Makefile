# Two commands on a fresh machine: `make run` and `make test`. Each makes the project venv first.
# pip 23 backtracks for minutes on this dependency set, so the venv gets a current pip and uv,
# and installs the fully pinned lock (requirements.txt).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: venv fixtures run test lint bench clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip uv
	$(VENV)/bin/uv pip install --quiet --python $(PY) -r requirements.txt
	$(VENV)/bin/uv pip install --quiet --python $(PY) --no-deps -e .
	touch $@

venv: $(STAMP)

fixtures: venv
	$(PY) -m rtax fixtures

# For now: build the fixture and run a short probe of every tier on the local substrate into
# data/rtax.db. (The dashboard and the scheduler join this target in later issues.)
run: fixtures
	$(PY) -m rtax probe --substrate local --tier T0 --repeat 5
	$(PY) -m rtax probe --substrate local --tier T1 --repeat 3
	$(PY) -m rtax probe --substrate local --tier T2 --repeat 2
	$(PY) -m rtax probe --substrate local --tier T2 --steps 10 --repeat 1

lint: venv
	$(VENV)/bin/ruff check rtax tests benchmarks
	$(VENV)/bin/ruff format --check rtax tests benchmarks

test: fixtures lint
	$(PY) -m pytest

bench: fixtures
	$(PY) benchmarks/bench_local.py

clean:
	rm -rf $(VENV) data/fixtures data/cache .pytest_cache .ruff_cache
