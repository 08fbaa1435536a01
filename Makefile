# The two commands: `make run` (the main job) and `make test` (the suite).
# Both build .venv from pyproject.toml when it is missing or stale, so each works alone on a fresh clone.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
PY := $(VENV)/bin/python

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,spark]'
	@touch $(STAMP)

run: $(STAMP)
	$(PY) -m txmq.demo

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/store.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info src/*.egg-info
