"""``TransactionLog``'s retention under a stepped wall clock: a real producer process under libfaketime
(tests/clock/faketime.py) over a real database; its wall clock stepped forward past the retention must not delete
a row a check still needs, while rows truly past retention are still deleted. And the cutoff's logic under steps,
with an injected clock."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.clock.faketime import FakeClock, forget
from tests.txlog.databases import create_engine, new_database_url
from tests.txlog.test_txlog import checked, half
from txmq import TransactionLog
from txmq.wallclock import WallClockBounds

CHILD = Path(__file__).with_name("retention_child.py")
ROOT = Path(__file__).resolve().parents[2]
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class Child:
    """retention_child.py on ``clock``: answers checks."""

    def __init__(self, url: str, clock: FakeClock) -> None:
        env = {**os.environ, **clock.env(tz="UTC"), "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, str(CHILD), url], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.readline() == "READY"

    def readline(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def check(self, tx_id: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"check {tx_id}\n")
        self.proc.stdin.flush()
        return self.readline()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        forget([self.proc.pid])
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.mark.clock
def test_a_forward_step_past_retention_deletes_no_row_a_check_needs(db_url: str, tmp_path: Path) -> None:
    with Database(db_url) as db:
        clock = FakeClock(tmp_path / "faketime")
        db.write("needed", 0)  # committed just now: a check may come for days
        db.write("old", 2 * HOUR_MS)  # two hours old, past the child's one-hour retention
        child = Child(db_url, clock)
        try:
            wait_for(lambda: "old" not in db.rows(), "the child's purge of a row past retention")
            clock.step(3 * 3600)  # the child's wall clock jumps three hours ahead (settles: ten purges run)
            db.write("old-after-step", 2 * HOUR_MS)
            wait_for(lambda: "old-after-step" not in db.rows(), "a row truly past retention deleted after the step")
            assert "needed" in db.rows()
            assert child.check("needed") == "COMMIT"
            clock.step(-3 * 3600)  # corrected
            assert child.check("needed") == "COMMIT"
        finally:
            child.close()


@pytest.mark.clock
def test_a_producer_started_with_its_clock_ahead_is_held_back_by_the_servers_clock(postgres: Any, tmp_path: Path,
                                                                                   request: Any) -> None:
    """The anchor itself wrong: PostgreSQL's clock is the second opinion (SQLite's would be the same machine's)."""
    url = new_database_url("postgresql", tmp_path, request)
    with Database(url) as db:
        clock = FakeClock(tmp_path / "faketime")
        clock.step(3 * 3600, settle=False)  # already ahead when the process starts
        db.write("needed", 0)
        db.write("old", 2 * HOUR_MS)
        child = Child(url, clock)
        try:
            wait_for(lambda: "old" not in db.rows(), "the child's purge of a row past retention")
            time.sleep(1.0)  # five more purges
            assert "needed" in db.rows()
            assert child.check("needed") == "COMMIT"
        finally:
            child.close()


class Database:
    """The log's table in a real database, written and read from the test's side (on the real clock)."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url)
        self.table = TransactionLog(self.engine, purge_interval_s=0).table  # creates it

    def write(self, tx_id: str, age_ms: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(self.table.insert().values(transaction_id=tx_id, outcome="COMMIT",
                                                    created_at_ms=int(time.time() * 1000) - age_ms))

    def rows(self) -> set[str]:
        with self.engine.connect() as conn:
            return set(conn.execute(sa.select(self.table.c.transaction_id)).scalars())

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.engine.dispose()


class SteppedClock:
    """A wall clock and an elapsed-time clock for ``WallClockBounds``: time passes, the wall clock steps."""

    def __init__(self) -> None:
        self.wall_ns = 1_700_000_000 * 10**9
        self.elapsed_ns = 10**12

    def passes(self, ms: int) -> None:
        self.wall_ns += ms * 1_000_000
        self.elapsed_ns += ms * 1_000_000

    def step(self, ms: int) -> None:
        self.wall_ns += ms * 1_000_000

    def bounds(self) -> WallClockBounds:
        return WallClockBounds(lambda: self.wall_ns, lambda: self.elapsed_ns)


def test_the_bounds_never_cross_the_anchor_whatever_the_wall_clock_does() -> None:
    c = SteppedClock()
    b = c.bounds()
    start = c.wall_ns // 1_000_000
    assert b.earliest_ms() == b.latest_ms() == start
    c.passes(1000)
    assert b.earliest_ms() == b.latest_ms() == start + 1000  # a steady clock: both follow it
    c.step(10 * DAY_MS)  # ten days ahead
    assert b.earliest_ms() == start + 1000  # not believed by the cutoff
    assert b.latest_ms() == start + 1000 + 10 * DAY_MS  # believed by stamps: what they stamp is kept longer
    c.passes(500)
    assert b.earliest_ms() == start + 1500
    c.step(-10 * DAY_MS)  # corrected
    assert b.earliest_ms() == b.latest_ms() == start + 1500
    c.step(-HOUR_MS)  # an hour behind
    assert b.earliest_ms() == start + 1500 - HOUR_MS  # followed back: deleting later is safe
    assert b.latest_ms() == start + 1500  # not believed by stamps
    c.step(HOUR_MS)  # corrected: no lag is left behind
    c.passes(200)
    assert b.earliest_ms() == b.latest_ms() == start + 1700


def test_retention_cutoff_comes_from_the_earliest_bound_and_stamps_from_the_latest(tmp_path: Path,
                                                                                   request: Any) -> None:
    """On SQLite: PostgreSQL's own clock, the second opinion on stamps and cutoffs, is not the injected one."""
    c = SteppedClock()
    engine = create_engine(new_database_url("sqlite", tmp_path, request))
    with TransactionLog(engine, retention=timedelta(days=1), purge_interval_s=0, clock=c.bounds()) as log:
        def write(tx_id: str) -> None:
            assert log.execute_local_transaction(half(tx_id), None).name == "COMMIT"

        write("a")
        c.passes(HOUR_MS)
        c.step(-2 * DAY_MS)  # stamped by a clock two days behind: must not read as two days old
        write("b")
        c.step(2 * DAY_MS + 30 * DAY_MS)  # a month ahead: nothing is a day old yet by the time that passed
        assert log.purge() == 0
        c.passes(DAY_MS - HOUR_MS + 1000)  # "a" is now a day old in real time, "b" not yet
        assert log.purge() == 1
        assert log.check_local_transaction(checked("b")).name == "COMMIT"
        c.passes(HOUR_MS)
        assert log.purge() == 1  # "b"
        assert log.check_local_transaction(checked("a")).name == "ROLLBACK"  # what a deleted row is answered
    engine.dispose()



def test_rows_of_a_producer_started_with_its_clock_behind_are_not_deleted_early_by_another(
        postgres: Any, tmp_path: Path, request: Any) -> None:
    """Two producers of one group share the log: one started (and stamps) with its clock two days behind, the other
    is right and purges with a retention of one day. PostgreSQL's clock is the second opinion on stamps as it is on
    the cutoff: the row just written must not read as two days old."""
    engine = create_engine(new_database_url("postgresql", tmp_path, request))
    behind = SteppedClock()
    behind.wall_ns = time.time_ns() - 2 * DAY_MS * 1_000_000
    try:
        with TransactionLog(engine, purge_interval_s=0, clock=behind.bounds()) as writer, \
                TransactionLog(engine, retention=timedelta(days=1), purge_interval_s=0, create=False) as purger:
            assert writer.execute_local_transaction(half("behind"), None).name == "COMMIT"
            assert purger.purge() == 0
            assert purger.check_local_transaction(checked("behind")).name == "COMMIT"
    finally:
        engine.dispose()
