"""The transaction table under retention, on a real store whose small segments retention really deletes: the
table forgets the transactions whose half messages are gone (``TransactionalMessageService.trim``), keeps
answering for the rest, refuses late decisions for the gone ones, snapshots its base, and stays bounded by what
the log holds however many transactions went through it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.broker.tx_helpers import Sender, end, halves, later, v1_snapshot
from tests.broker.tx_helpers import open_service as open_default
from txmq.broker.transaction.check_service import TransactionalMessageCheckService
from txmq.broker.transaction.service import TransactionalMessageService
from txmq.broker.transaction.state import Outcome, TransactionStateTable
from txmq.remoting.codes import ResponseCode
from txmq.store import DefaultMessageStore
from txmq.topic import RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC

pytestmark = pytest.mark.dated  # run again at a fixed month end by make test (Makefile, DATED_AT)

SEGMENT = 16 * 1024  # about 60 records a segment: retention has whole segments to delete
TRIMMED = "transaction table trimmed"


async def open_service(root: Path, snapshot_path: Path | None = None
                       ) -> tuple[DefaultMessageStore, TransactionalMessageService]:
    return await open_default(root, snapshot_path, mapped_file_size_commit_log=SEGMENT,
                              mapped_file_size_consume_queue=20 * 256, checkpoint_interval_ms=60_000,
                              clean_resource_interval_ms=60_000, file_reserved_time_hours=1)


def expire(store: DefaultMessageStore, keep: int = 3) -> int:
    """Retention as the store runs it (after a checkpoint: it never deletes past one), judged at the moment of the
    store's elapsed-time account when the segments before the last ``keep`` are older than fileReservedTime (1 h).
    Returns the half queue's new start."""
    store.flush_and_checkpoint()
    boundary = store.commit_log.queue.files[-keep].file_from_offset
    written = store.clock.elapsed_of(boundary, store.commit_log.read_store_timestamp(boundary))
    assert store.clean_expired_files(written + 3600 * 1000) > 0
    return store.get_min_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0)


async def history(service: TransactionalMessageService, first: int, count: int) -> list[tuple[int, int]]:
    """``count`` transactions from ``first``, in rounds of 20 (so each segment holds halves): by half offset
    modulo 4 committed, rolled back, discarded, left pending."""
    out = []
    for at in range(first, first + count, 20):
        tx = await halves(service, at, min(20, first + count - at))
        decided = [(off, clo, Outcome.COMMIT if off % 4 == 0 else Outcome.ROLLBACK) for off, clo in tx if off % 4 < 2]
        assert all(r.code == ResponseCode.SUCCESS for r in await service.end_transactions("g", decided, "test"))
        for off, _ in tx:
            if off % 4 == 2:
                half = service.half_message(off)
                assert half is not None
                await service.discard(half, off, 1, "test")
        out += tx
    return out


def replicate(master: DefaultMessageStore, slave: DefaultMessageStore) -> None:
    """What the slave's HA connection does: append the master's log from where the slave's ends (a call takes
    the records up to its segment's end)."""
    while (at := slave.max_phy_offset) < master.max_phy_offset:
        assert slave.append_replicated(at, master.commit_log.read_raw(at, master.max_phy_offset - at)) > 0


def expected(off: int) -> Outcome:
    return (Outcome.COMMIT, Outcome.ROLLBACK, Outcome.DISCARD, Outcome.PENDING)[off % 4]


def state(t: TransactionStateTable) -> tuple[Any, ...]:
    """What a table knows, its base included."""
    pending = sorted((i.half_offset, i.store_time_s, i.checks, i.topic, i.group) for i in map(t.info, t.pending) if i)
    return t.outcomes_base, bytes(t.outcomes).rstrip(b"\0"), pending, dict(t.discarded), dict(t.pending_per_topic)


def trim_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if TRIMMED in r.getMessage()]


def test_a_table_trimmed_after_retention_keeps_answering_for_the_halves_left(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="txmq.transaction")
    monkeypatch.setattr(TransactionStateTable, "TRIM_AT_LEAST", 64)

    async def go() -> None:
        store, service = await open_service(tmp_path / "store")
        try:
            await history(service, 0, 600)
            grown = len(service.table.outcomes)
            start = expire(store)
            assert 0 < start < 600
            assert service.snapshot() is False  # no snapshot file: the trim runs all the same
            table = service.table
            assert table.outcomes_base == start and len(table.outcomes) <= grown - start
            assert [table.outcome(off) for off in range(start, 600)] == [expected(off) for off in range(start, 600)]
            assert {table.outcome(off) for off in range(start)} == {Outcome.EXPIRED}
            assert sorted(table.pending) == [off for off in range(start, 600) if off % 4 == 3]
            assert sorted(table.discarded) == [off for off in range(start, 600) if off % 4 == 2]
            assert dict(table.pending_per_topic) == {"orders": len(table.pending)}
            below = len(range(3, start, 4)), len(range(2, start, 4))
            assert trim_lines(caplog) == [f"retention deleted the half messages below offset {start}: transaction "
                                          f"table trimmed from 0, {below[0]} pending and {below[1]} discarded "
                                          "transactions dropped with their halves"]
            assert service.snapshot() is False and len(trim_lines(caplog)) == 1  # nothing more to trim

            # Check-back reaches only the transactions left (the dropped ones' wheel entries are skipped).
            checker = TransactionalMessageCheckService(service, check_max=5, check_interval_ms=500)
            checker.senders.append(sender := Sender())
            assert await checker.check_pass(later(service, 5)) == len(table.pending)
            assert sorted(sender.sent) == sorted(table.pending)
        finally:
            await store.shutdown()

    asyncio.run(go())


def test_pending_halves_deleted_by_retention_are_dropped_by_a_check_pass_in_one_trim(tmp_path, caplog):
    """Before the periodic trim is due, a check pass meets a pending transaction whose half is gone: all those
    below the half queue's start are dropped at once, with one log line, and none is discarded (its body is gone:
    no copy to TRANS_CHECK_MAX_TIME_TOPIC), as RocketMQ's check skips a half it can no longer read."""
    caplog.set_level(logging.INFO, logger="txmq.transaction")

    async def go() -> None:
        store, service = await open_service(tmp_path / "store")
        try:
            await history(service, 0, 400)
            copies = store.get_max_offset_in_queue(RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, 0)
            start = expire(store)
            assert not service.snapshot() and service.table.outcomes_base == 0  # under TRIM_AT_LEAST: not due
            checker = TransactionalMessageCheckService(service, check_max=5, check_interval_ms=500)
            checker.senders.append(sender := Sender())
            left = [off for off in range(start, 400) if off % 4 == 3]
            assert await checker.check_pass(later(service, 5)) == len(left)
            assert sorted(sender.sent) == left and sorted(service.table.pending) == left
            assert sorted(service.table.discarded) == [off for off in range(start, 400) if off % 4 == 2]
            assert service.table.outcomes_base == start
            assert store.get_max_offset_in_queue(RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, 0) == copies
            assert len(trim_lines(caplog)) == 1
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        finally:
            await store.shutdown()

    asyncio.run(go())


def test_late_decisions_and_resumes_for_deleted_halves_are_refused_and_store_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(TransactionStateTable, "TRIM_AT_LEAST", 64)

    async def go() -> None:
        store, service = await open_service(tmp_path / "store")
        try:
            tx = await history(service, 0, 600)
            stored = store.get_max_offset_in_queue("orders", 0)
            start = expire(store)
            service.snapshot()
            assert service.table.outcomes_base == start
            committed, rolled_back, discarded, pending = tx[0], tx[1], tx[2], tx[3]
            assert pending[1] in service._recent_halves  # its body is still in memory: only the table can refuse
            for (off, clo), outcome in [(committed, Outcome.COMMIT), (committed, Outcome.ROLLBACK),
                                        (rolled_back, Outcome.ROLLBACK), (rolled_back, Outcome.COMMIT),
                                        (discarded, Outcome.COMMIT), (pending, Outcome.COMMIT),
                                        (pending, Outcome.ROLLBACK)]:
                r = await end(service, off, clo, outcome)
                assert r.code == ResponseCode.SYSTEM_ERROR, (off, outcome, r)
                assert "deleted by retention" in (r.remark or ""), r
            assert store.get_max_offset_in_queue("orders", 0) == stored  # no commit stored anything
            assert "deleted by retention" in (await service.resume(discarded[0]) or "")
            assert service.half_gone(discarded[0]) and not service.half_gone(start)
            # The transactions left are decided as before.
            off, clo = next((o, c) for o, c in tx if o >= start and o % 4 == 3)
            assert (await end(service, off, clo, Outcome.COMMIT)).code == ResponseCode.SUCCESS
            assert store.get_max_offset_in_queue("orders", 0) == stored + 1
        finally:
            await store.shutdown()

    asyncio.run(go())


def test_the_base_survives_a_restart_from_the_snapshot_and_a_full_replay_starts_at_the_queues_start(
        tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(TransactionStateTable, "TRIM_AT_LEAST", 64)
    caplog.set_level(logging.INFO, logger="txmq.transaction")
    snap = tmp_path / "state.snapshot"

    async def go() -> None:
        store, service = await open_service(tmp_path / "store", snap)
        await history(service, 0, 600)
        start = expire(store)
        assert service.snapshot()
        assert snap.read_bytes()[:8] == b"TXMQTXS3"
        await history(service, 600, 40)  # the tail after the snapshot
        before = state(service.table)
        assert before[0] == start
        store.close_without_shutdown()  # a crash

        store, service = await open_service(tmp_path / "store", snap)
        assert state(service.table) == before
        assert "from snapshot" in caplog.records[-1].getMessage()
        store.close_without_shutdown()

        snap.unlink()
        store, service = await open_service(tmp_path / "store", snap)
        assert state(service.table) == before  # base = the half queue's start: nothing allocated below it
        assert "full replay" in caplog.records[-1].getMessage()
        await store.shutdown()

    asyncio.run(go())


def test_an_upgraded_broker_recovers_from_an_old_format_snapshot_and_trims_it(tmp_path, caplog):
    """A snapshot written before the base ("TXMQTXS1", outcomes from offset 0) is loaded, and what retention
    deleted since is dropped at recovery."""
    caplog.set_level(logging.INFO, logger="txmq.transaction")
    snap = tmp_path / "state.snapshot"

    async def go() -> None:
        store, service = await open_service(tmp_path / "store")
        await history(service, 0, 400)
        half_covered = store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0)
        op_covered = store.get_max_offset_in_queue(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0)
        store.flush_and_checkpoint()
        snap.write_bytes(v1_snapshot(service.table, half_covered, op_covered))
        start = expire(store)
        await store.shutdown()

        store, service = await open_service(tmp_path / "store", snap)
        try:
            assert "from snapshot" in caplog.records[-1].getMessage()
            table = service.table
            assert table.outcomes_base == start and len(trim_lines(caplog)) == 1
            assert [table.outcome(off) for off in range(start, 400)] == [expected(off) for off in range(start, 400)]
            assert sorted(table.pending) == [off for off in range(start, 400) if off % 4 == 3]
            assert table.recovered == set(table.pending) | set(table.discarded)
            assert service.snapshot() and snap.read_bytes()[:8] == b"TXMQTXS3"
        finally:
            await store.shutdown()

    asyncio.run(go())


@pytest.mark.slow
def test_the_table_and_its_snapshot_stay_bounded_over_many_store_then_expire_cycles(tmp_path, monkeypatch):
    """20 rounds of 300 transactions, each followed by retention and the periodic snapshot: the table holds the
    transactions of about one round, not of all 6000 (before the base, it held one byte for each, for ever)."""
    monkeypatch.setattr(TransactionStateTable, "TRIM_AT_LEAST", 256)
    snap = tmp_path / "state.snapshot"

    async def go() -> None:
        store, service = await open_service(tmp_path / "store", snap)
        try:
            sizes, snapshots = [], []
            for rnd in range(20):
                await history(service, rnd * 300, 300)
                expire(store)
                assert service.snapshot()
                sizes.append(len(service.table.outcomes))
                snapshots.append(snap.stat().st_size)
            assert store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0) == 6000
            assert max(sizes) <= 4096, sizes  # one byte per transaction ever stored: at least 6000
            assert max(snapshots) <= 8192, snapshots
            assert service.table.outcomes_base > 5000
        finally:
            await store.shutdown()

    asyncio.run(go())


def test_a_slave_trims_its_followed_table_and_takes_over_what_is_left(tmp_path, monkeypatch):
    """A slave's table follows the replicated records and is trimmed at its own periodic moment after its own
    retention; op records the master writes later for halves the slave forgot are passed over; a promotion takes
    over the transactions left."""
    monkeypatch.setattr(TransactionStateTable, "TRIM_AT_LEAST", 64)

    async def go() -> None:
        mstore, master = await open_service(tmp_path / "m")
        sstore, slave = await open_service(tmp_path / "s", tmp_path / "s.snapshot")
        sstore.add_dispatcher(slave.follow)
        try:
            tx = await history(master, 0, 400)
            replicate(mstore, sstore)
            start = expire(sstore)
            assert slave.snapshot() and slave.table.outcomes_base == start
            forgotten = [(off, clo, Outcome.ROLLBACK) for off, clo in tx if off % 4 == 3 and off < start]
            assert forgotten and all(r.code == ResponseCode.SUCCESS
                                     for r in await master.end_transactions("g", forgotten, "test"))
            await history(master, 400, 100)
            replicate(mstore, sstore)
            assert [slave.table.outcome(off) for off in range(start, 500)] == \
                [master.table.outcome(off) for off in range(start, 500)]
            assert {slave.table.outcome(off) for off, _, _ in forgotten} == {Outcome.EXPIRED}
            assert sorted(slave.table.pending) == sorted(off for off in master.table.pending if off >= start)
            assert sorted(slave.table.discarded) == sorted(off for off in master.table.discarded if off >= start)
            now = slave.now_s()
            assert slave.take_over() == len(slave.table.pending) > 0
            assert sorted(slave.table.pop_due(now + 3600)) == sorted(slave.table.pending)
        finally:
            await mstore.shutdown()
            await sstore.shutdown()

    asyncio.run(go())
