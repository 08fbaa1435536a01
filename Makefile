# The two commands: `make run` (the main job) and `make test` (the suite).
# Both build .venv from pyproject.toml when it is missing or stale, so each works alone on a fresh clone.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
PY := $(VENV)/bin/python

.PHONY: run test test-fast wheel lint bench bench-latency bench-scale clean grpc-clients system-tools

# The compiled modules (setup.py's COMPILED_MODULES) and their .pxd files: editing one rebuilds it, or the stale
# build would shadow the edited source.
COMPILED := $(shell grep -o '"src/txmq/[A-Za-z0-9_/]*\.py"' setup.py | tr -d '"')
COMPILED_PXD := $(wildcard $(COMPILED:.py=.pxd))

$(STAMP): pyproject.toml setup.py $(COMPILED) $(COMPILED_PXD)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# Cython regenerates a module's C only when its .py or .pxd changed: C generated before setup.py's last edit
	@# (its compiler directives) goes, or the build would keep the old directives.
	@find src/txmq -name '*.c' ! -newer setup.py -delete
	$(PY) -m pip install -q -e '.[test,spark,db,bench]'
	@touch $(STAMP)

run: $(STAMP)
	$(PY) -m txmq.demo
	$(PY) -m examples.orders

# The official RocketMQ 5 clients for tests/grpc: the Python one in its own venv (its top-level `rocketmq`
# package would shadow the C++ client `rocketmq==0.4.4` in .venv), the Node.js one from tests/grpc/node/package-lock.json.
RMQ5_VENV := .venv-rmq5
RMQ5_STAMP := $(RMQ5_VENV)/.installed
NODE_DIR := tests/grpc/node
NODE_STAMP := $(NODE_DIR)/node_modules/.installed

$(RMQ5_STAMP):
	@test -x $(RMQ5_VENV)/bin/python || $(PYTHON) -m venv $(RMQ5_VENV)
	$(RMQ5_VENV)/bin/python -m pip install -q rocketmq-python-client==5.1.2
	@touch $@

$(NODE_STAMP): $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

grpc-clients: $(RMQ5_STAMP) $(NODE_STAMP)

# Debian's packages the tests run, installed only when their binaries are missing, all with one apt-get update: a
# real Prometheus (tests/e2e/test_metrics.py), a real browser (the console's tests), libfaketime (the clock
# campaign, tests/clock, and the dated run below), etcd (the controller-mode tests, tests/controller and
# tests/e2e/test_failover*.py) and PostgreSQL (the transaction log's tests, tests/txlog, and bench/txlog.py: the
# tests run its binaries, /usr/lib/postgresql/<version>/bin, on a free port, not the packaged service).
system-tools:
	@missing=""; \
	command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	command -v faketime >/dev/null || missing="$$missing faketime"; \
	command -v etcd >/dev/null || missing="$$missing etcd-server"; \
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing="$$missing postgresql"; \
	test -z "$$missing" || { echo "installing Debian's$$missing"; apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; }

# The dated run: the tests marked `dated` once more with the wall clock of every process (pytest's, and of the
# brokers and clients it starts) at DATED_AT, the last minute of a month whose day is past 24.86, and running on
# from there across the month's end (on TEST_WORKERS processes as the main pass, it takes about a minute): a bug of
# the calendar fails CI on any day, not only on the days it bites.
# libfaketime is preloaded, FAKETIME the offset from the real clock (every process on the same clock).
# FAKETIME_DONT_FAKE_MONOTONIC=1: a faked monotonic clock hangs threading waits; with it CPython 3.11's time.sleep
# fails with EINVAL under libfaketime 0.9.10 (clock_nanosleep on an absolute monotonic deadline), so
# tests/conftest.py replaces time.sleep for the run. NO_FAKE_STAT=1: file times stay real.
DATED_AT := 2027-01-31 23:59:20

# The main pass runs its test files on TEST_WORKERS processes (pytest-xdist, each file whole on one worker, so a
# file's module-scoped servers start once): its tests mostly wait on the servers and clients they start (alone it
# keeps the 2 cores at a load of about 0.4, so three workers on two cores take 11 minutes where two took 16), and
# each test uses free ports and directories of its own. The files go
# to the workers in collection order, the longest first (tests/conftest.py's LONGEST_FIRST), not xdist's default
# order (most tests first), which left the longest single tests to the end on one worker.
TEST_WORKERS ?= 3
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Three pytest runs: the Spark tests share one SparkSession, whose JVM keeps a single socket back to the
# test process (pyspark's accumulator channel) and cannot reopen it once it breaks. They run alone, so no other
# test's threads and sockets share a process with it. Then the dated run. All always run; any failing fails the
# target.
test: $(STAMP) grpc-clients system-tools
	@status=0; \
	$(PY) -m pytest -q $(XDIST) --ignore=tests/spark || status=$$?; \
	$(PY) -m pytest -q tests/spark || status=$$?; \
	offset=$$(( $$(date -ud '$(DATED_AT) UTC' +%s) - $$(date -u +%s) )); \
	LD_PRELOAD=$$(ls /usr/lib/*/faketime/libfaketime.so.1 | head -n 1) FAKETIME=$$(printf '%+d' $$offset) \
		FAKETIME_DONT_FAKE_MONOTONIC=1 NO_FAKE_STAT=1 $(PY) -m pytest -q $(XDIST) -m dated --ignore=tests/spark || status=$$?; \
	exit $$status

# The suite without the tests marked slow (tests/conftest.py marks every end-to-end folder): about a minute.
test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not slow"

# An installable wheel of txmq, its modules compiled, in $(DIST) (pip's isolated build: pyproject.toml's
# build-system, not .venv). The modules the install stamp compiled in place are this checkout's build for this
# Python: copied into setuptools' build directory (newer than their C sources), the wheel's build reuses them
# instead of compiling every module again.
DIST ?= dist
wheel: $(STAMP)
	@lib=build/lib.$$($(PY) -c 'import sys, sysconfig; print(sysconfig.get_platform() + "-" + sys.implementation.cache_tag)'); \
		cd src && find txmq -name '*.so' -exec install -D -m 644 {} ../$$lib/{} \;
	$(PY) -m pip wheel -q --no-deps -w $(DIST) .

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/store.py

# Latency at fixed offered rates beside RabbitMQ and NATS JetStream (bench/latency.py), and how cost grows with
# topics, groups, connections and the log (bench/scale.py). SHORT=1: the quick runs CI makes (txmq only, small
# points); the tables are the same.
bench-latency: $(STAMP)
	$(PY) bench/latency.py $(if $(SHORT),--short,--plot docs/latency.png)

bench-scale: $(STAMP)
	$(PY) bench/scale.py $(if $(SHORT),--short)

clean:
	rm -rf $(VENV) $(RMQ5_VENV) $(NODE_DIR)/node_modules .pytest_cache build dist *.egg-info src/*.egg-info
	rm -f $(COMPILED:.py=.c) $(foreach m,$(COMPILED),$(wildcard $(m:.py=).*.so))
