"""Snapshots of the transaction state table: the format round-trips, damage is refused, and recovery from a
snapshot plus the tail of the half and op queues gives the same table as replaying everything."""

from __future__ import annotations

import asyncio
import errno
import logging
import os

import pytest

from tests.broker.tx_helpers import Sender, end, half, later, open_service, v1_snapshot
from txmq.broker.transaction.check_service import TransactionalMessageCheckService
from txmq.broker.transaction.service import TransactionalMessageService
from txmq.broker.transaction.state import Outcome, TransactionStateTable
from txmq.message import MessageExt
from txmq.remoting.codes import ResponseCode
from txmq.store import PutMessageResult, PutMessageStatus

pytestmark = pytest.mark.dated  # run again at a fixed month end by make test (Makefile, DATED_AT)


def _table() -> TransactionStateTable:
    t = TransactionStateTable()
    for i in range(6):
        t.add_pending(i, f"topic{i % 2}", "g", 1000 + i, 1006 + i)
    t.count_check(1)
    t.count_check(1)
    t.decide(2, Outcome.COMMIT)
    t.decide(3, Outcome.ROLLBACK)
    t.count_check(4)
    t.decide(4, Outcome.DISCARD)
    return t


def _state(t: TransactionStateTable) -> tuple:
    """Everything a table knows, but whether a pending transaction came through a restart."""
    pending = sorted((i.half_offset, i.store_time_s, i.checks, i.topic, i.group) for i in map(t.info, t.pending) if i)
    return bytes(t.outcomes).rstrip(b"\0"), pending, dict(t.discarded), dict(t.pending_per_topic)


def test_snapshot_round_trip():
    t = _table()
    loaded, half_from, op_from = TransactionStateTable.from_snapshot(t.to_snapshot(6, 9, {}), lambda s: s + 6, int)
    assert (half_from, op_from) == (6, 9)
    assert _state(loaded) == _state(t)
    assert loaded.info(1).checks == 2 and loaded.discarded == {4: 1}
    assert sorted(loaded.pop_due(10_000)) == [0, 1, 5]  # every pending transaction is scheduled again


def test_a_commit_still_being_written_is_snapshotted_as_it_was():
    t = _table()
    before = t.info(5)
    packed = t.pending[5]  # what a decision keeps (Before): the packed entry, nothing unpacked
    t.decide(5, Outcome.COMMIT)
    loaded, _, _ = TransactionStateTable.from_snapshot(t.to_snapshot(6, 9, {5: (Outcome.PENDING, packed, 0)}),
                                                       lambda s: s, int)
    assert loaded.outcome(5) == Outcome.PENDING and loaded.info(5) == before
    assert t.outcome(5) == Outcome.COMMIT


@pytest.mark.parametrize("damage", ["flip", "truncate", "magic"])
def test_damaged_snapshot_is_refused(damage):
    data = bytearray(_table().to_snapshot(6, 9, {}))
    if damage == "flip":
        data[30] ^= 0x40
    elif damage == "truncate":
        del data[-7:]
    else:
        data[0:8] = b"NOTASNAP"
    with pytest.raises(ValueError):
        TransactionStateTable.from_snapshot(bytes(data), lambda s: s, int)


async def _decide_some(service: TransactionalMessageService, first: int, count: int) -> None:
    checker = TransactionalMessageCheckService(service, check_max=1, check_interval_ms=500)
    checker.senders.append(Sender())
    for n in range(first, first + count):
        off, clo = await half(service, n, "S")
        if n % 4 == 0:
            await end(service, off, clo, Outcome.COMMIT)
        elif n % 4 == 1:
            await end(service, off, clo, Outcome.ROLLBACK)
    await checker.check_pass(later(service, 5))  # checks the undecided ones once
    await checker.check_pass(later(service, 10))  # and discards them (check_max=1) ...
    undecided = list(service.table.discarded)[:2]
    for off in undecided:  # ... but a couple come back
        assert await service.resume(off) is None


def test_recovery_from_snapshot_equals_full_replay_and_replays_only_the_tail(tmp_path, caplog):
    snap = tmp_path / "state.snapshot"
    caplog.set_level(logging.INFO, logger="txmq.transaction")

    def recovery_line() -> str:
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("transactions recovered")]
        return lines[-1]

    async def go() -> None:
        store, service = await open_service(tmp_path / "store", snap)
        await _decide_some(service, 0, 40)
        assert service.snapshot()
        assert not service.snapshot()  # unchanged: nothing written
        await _decide_some(service, 40, 12)  # the tail after the snapshot
        expected = _state(service.table)
        store.close_without_shutdown()  # a crash: no final snapshot, no clean checkpoint

        store, service = await open_service(tmp_path / "store", snap)
        assert _state(service.table) == expected
        assert set(service.table.recovered) == set(service.table.pending) | set(service.table.discarded)
        assert "from snapshot" in recovery_line() and ": 12 half," in recovery_line()  # the 12 after it
        store.close_without_shutdown()

        snap.unlink()  # without a snapshot: the whole history is replayed, to the same table
        store, service = await open_service(tmp_path / "store", snap)
        assert _state(service.table) == expected
        assert "full replay" in recovery_line() and ": 52 half," in recovery_line()
        await store.shutdown()

    asyncio.run(go())


def test_snapshot_ahead_of_the_log_is_ignored(tmp_path):
    snap = tmp_path / "state.snapshot"
    snap.write_bytes(TransactionStateTable().to_snapshot(10_000, 10_000, {}))

    async def go() -> None:
        store, service = await open_service(tmp_path / "store", snap)
        await half(service, 1, "S")
        assert len(service.table) == 1
        await store.shutdown()

    asyncio.run(go())


@pytest.mark.parametrize("op_put", ["refused", "stored"])
def test_a_rollback_still_being_written_is_snapshotted_as_the_log_has_it(tmp_path, op_put):
    """A ROLLBACK is decided in the table before its op record is written. A snapshot taken before the record is
    in the log shows the transaction pending: its put refused, the ROLLBACK is undone and its producer told it
    was not recorded, and a restart from that snapshot must not bring it back (a COMMIT would then be refused).
    A snapshot taken once the record is in the log, before the put is answered, keeps the ROLLBACK."""
    snap = tmp_path / "state.snapshot"

    async def go() -> None:
        store, service = await open_service(tmp_path / "store", snap)
        off, clo = await half(service, 1, "R")
        real_put = store.put_messages

        async def put(msgs: list[MessageExt]) -> PutMessageResult:
            if op_put == "refused":  # asked twice: with the decisions' put, then alone
                service.snapshot()
                return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, None)
            result = await real_put(msgs)
            assert service.snapshot()  # the record is in the log, the decision not answered yet
            return result
        store.put_messages = put  # type: ignore[method-assign]
        result = await end(service, off, clo, Outcome.ROLLBACK)
        assert result.code == (ResponseCode.SYSTEM_ERROR if op_put == "refused" else ResponseCode.SUCCESS)
        assert snap.exists()
        store.close_without_shutdown()  # a crash: the snapshot above is the last one

        store, service = await open_service(tmp_path / "store", snap)
        if op_put == "refused":
            assert service.table.outcome(off) == Outcome.PENDING
            assert (await end(service, off, clo, Outcome.COMMIT)).code == ResponseCode.SUCCESS
        else:
            assert service.table.outcome(off) == Outcome.ROLLBACK
        await store.shutdown()

    asyncio.run(go())


def test_snapshot_round_trips_the_base_of_a_trimmed_table():
    t = _table()
    for i in range(6, 40):
        t.add_pending(i, "topic0", "g", 1000 + i, 1006 + i)
        t.decide(i, Outcome.ROLLBACK if i % 3 else Outcome.COMMIT)
    t.trim(4)  # drops pending 0 and 1, and the decided 2 and 3
    data = t.to_snapshot(40, 9, {})
    assert data[:8] == b"TXMQTXS3"
    loaded, half_from, op_from = TransactionStateTable.from_snapshot(data, lambda s: s, int)
    assert (half_from, op_from, loaded.outcomes_base) == (40, 9, 4)
    assert _state(loaded) == _state(t) and bytes(loaded.outcomes) == bytes(t.outcomes)
    assert [loaded.outcome(i) for i in (3, 4, 5, 6, 7)] == [Outcome.EXPIRED, Outcome.DISCARD, Outcome.PENDING,
                                                            Outcome.COMMIT, Outcome.ROLLBACK]
    # A decision still being written below the base is gone with its half: the snapshot leaves it out.
    assert TransactionStateTable.from_snapshot(t.to_snapshot(40, 9, {1: (Outcome.PENDING, 0, 0)}),
                                               lambda s: s, int)[0].info(1) is None


def test_an_old_format_snapshot_still_loads_with_base_zero():
    t = _table()
    loaded, half_from, op_from = TransactionStateTable.from_snapshot(v1_snapshot(t, 6, 9), lambda s: s + 6, int)
    assert (half_from, op_from, loaded.outcomes_base) == (6, 9, 0)
    assert _state(loaded) == _state(t) and loaded.discarded == {4: 1}
    assert sorted(loaded.pop_due(10_000)) == [0, 1, 5]


def test_no_snapshot_is_written_once_the_store_lost_its_durability(tmp_path, caplog):
    """A snapshot stands for records flushed to disk, and once the store lost its durability (a failed fsync)
    nothing is flushed again: no snapshot is written until a restart, quietly (the store logged why, once), not a
    durability error raised out of every periodic try (a traceback every ``transactionSnapshotInterval``) and out of
    the stop."""
    snap = tmp_path / "state.snapshot"

    async def go() -> None:
        store, service = await open_service(tmp_path / "store", snap)
        await half(service, 1, "S")
        assert service.snapshot() and snap.exists()
        written = snap.read_bytes()
        await half(service, 2, "S")
        store.durability.lose("a segment", OSError(errno.EIO, os.strerror(errno.EIO)))
        caplog.clear()
        assert not service.snapshot()
        assert snap.read_bytes() == written and caplog.records == []
        await store.shutdown()

    asyncio.run(go())
