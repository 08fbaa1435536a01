"""The queue-lock table of orderly consumers is bounded: a full table makes room only from expired locks."""

from __future__ import annotations

import time

from txmq.broker.processor import client_manage
from txmq.broker.processor.client_manage import RebalanceLockManager


def _mqs(n: int, start: int = 0) -> list[dict[str, object]]:
    return [{"topic": "t", "brokerName": "b", "queueId": i} for i in range(start, start + n)]


def test_full_table_grants_no_new_lock_but_renews_held_ones():
    locks = RebalanceLockManager(max_entries=4)
    assert len(locks.try_lock("g", _mqs(6), "c1")) == 4
    assert len(locks.locks) == 4
    assert locks.try_lock("g", _mqs(2, start=10), "c2") == []
    assert locks.try_lock("g", _mqs(1), "c1") == _mqs(1)  # a held lock is renewed
    locks.unlock("g", _mqs(1), "c1")
    assert locks.try_lock("g", _mqs(1, start=10), "c2") == _mqs(1, start=10)


def test_expired_locks_make_room(monkeypatch):
    locks = RebalanceLockManager(max_entries=2)
    assert len(locks.try_lock("g", _mqs(2), "c1")) == 2
    later = time.monotonic() + client_manage.REBALANCE_LOCK_MAX_LIVE_S + 1
    monkeypatch.setattr(client_manage.time, "monotonic", lambda: later)
    assert locks.try_lock("g", _mqs(1, start=5), "c2") == _mqs(1, start=5)
    assert len(locks.locks) == 1
