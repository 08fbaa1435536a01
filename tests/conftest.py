"""Shared by every folder of the suite (a package: its helpers are imported as ``tests.<folder>.<module>``)."""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from pathlib import Path

import pytest

from tests.compiled import install_source_first

install_source_first()  # TXMQ_INTERPRETED=1: the compiled modules from their .py files (tests/compiled.py)


def _sleep(seconds: float) -> None:
    """``time.sleep`` for a run under libfaketime (``make test``'s dated run): with FAKETIME_DONT_FAKE_MONOTONIC=1
    (a faked monotonic clock hangs ``threading.Event.wait``), CPython 3.11's ``time.sleep`` fails with EINVAL
    under libfaketime 0.9.10 (its ``clock_nanosleep`` on an absolute CLOCK_MONOTONIC deadline); a wait on an
    event that is never set sleeps the same, on the real monotonic clock."""
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    threading.Event().wait(seconds)


def _forget_faketime_files() -> None:
    """libfaketime leaves an 8-byte shared-memory file and a semaphore named by the process that made them."""
    for name in (f"faketime_shm_{os.getpid()}", f"sem.faketime_sem_{os.getpid()}"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"/dev/shm/{name}")


if "faketime" in os.environ.get("LD_PRELOAD", ""):
    time.sleep = _sleep
    atexit.register(_forget_faketime_files)


# pytest-xdist's workers (``make test`` runs its main pass on two): each picks free ports from a share of the range
# of its own, and so do the servers it starts (txmq.ports reads TXMQ_PORT_SLICE), so two workers never race for one.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and _WORKER[2:].isdigit():
    os.environ["TXMQ_PORT_SLICE"] = f"{_WORKER[2:]}/{os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1')}"


# Folders whose every test starts real clusters (name servers, brokers, controllers on etcd), other languages'
# clients, Spark, a browser or a fuzz campaign against a live server: end to end (``e2e``) and ``slow``.
# ``pytest -m "not slow"`` (``make test-fast``) runs the rest, without the few tests elsewhere marked ``slow``.
E2E_FOLDERS = frozenset({"e2e", "clock", "console", "controller", "fuzz", "grpc", "spark", "txlog"})
_TESTS = Path(__file__).parent


# The files that take longest in the main pass (25 s or more on two workers), longest first. ``make test`` gives
# pytest-xdist the files in collection order (``--no-loadscope-reorder``: its default order, most tests first,
# left single long tests such as the fuzz model last, with one worker idle meanwhile); these go first, so that the
# short files fill in behind them and the two workers end together. The rest keep pytest's order.
LONGEST_FIRST = (
    "clock/test_broker_steps.py", "e2e/test_cluster.py", "fuzz/test_tx_model.py", "grpc/test_official_clients.py",
    "e2e/test_transactions.py", "grpc/test_timers.py", "e2e/test_failover.py", "e2e/test_soak.py",
    "e2e/test_bench_latency_scale.py", "e2e/test_ha_grpc_failover.py", "e2e/test_timers.py", "clock/test_calendar.py",
    "txlog/test_txlog_e2e.py", "e2e/test_wheel.py", "e2e/test_ha_auth.py", "e2e/test_listener_failures.py",
    "e2e/test_consumers.py", "e2e/test_async_producer.py", "e2e/test_failover_timers.py", "e2e/test_memory_bounds.py",
    "e2e/test_console.py", "fuzz/test_campaign.py",
)
_RANK = {name: rank for rank, name in enumerate(LONGEST_FIRST)}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.relative_to(_TESTS).parts
        if len(parts) > 1 and parts[0] in E2E_FOLDERS:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.slow)
    items.sort(key=_rank)  # stable: each file's tests keep their order


def _rank(item: pytest.Item) -> int:
    """Where ``item``'s file comes in ``LONGEST_FIRST``; after all of them when it is not there."""
    return _RANK.get(item.path.relative_to(_TESTS).as_posix(), len(LONGEST_FIRST))
