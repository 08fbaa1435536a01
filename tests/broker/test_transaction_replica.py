"""A slave's transaction table from replicated records (TransactionalMessageService.follow): equal to the
master's, and rebuilt when the slave's log is truncated under it."""

from __future__ import annotations

import asyncio

from tests.broker.tx_helpers import end, half, open_service
from txmq.broker.transaction.state import Outcome
from txmq.remoting.codes import ResponseCode
from txmq.store import PutMessageStatus


def _view(service) -> tuple[dict, dict, list]:
    t = service.table
    pending = {o: (i.checks, i.topic, i.group) for o in t.pending if (i := t.info(o)) is not None}
    return pending, dict(t.discarded), [t.outcome(o).name for o in range(8)]


def test_slave_table_follows_the_replicated_log_and_is_rebuilt_after_a_truncation(tmp_path):
    async def go() -> None:
        mstore, master = await open_service(tmp_path / "m")
        sstore, slave = await open_service(tmp_path / "s", tmp_path / "s.snapshot")
        sstore.add_dispatcher(slave.follow)
        sstore.add_truncate_listener(slave.rebuild)
        try:
            h = [await half(master, i) for i in range(5)]
            assert (await end(master, *h[0], Outcome.COMMIT)).code == 0
            assert (await end(master, *h[1], Outcome.ROLLBACK)).code == 0
            checked = [h[2][0], h[2][0], h[3][0]]
            for half_offset in checked:  # what a check pass does: count, then one op record
                master.table.count_check(half_offset)
            await master.record_checks(checked)
            await master.discard(master.half_message(h[4][0]), h[4][0], 2, "test")
            await asyncio.sleep(0)  # op records are written by a task
            h.append(await half(master, 5))  # the last record of the log
            sstore.append_replicated(0, mstore.commit_log.read_raw(0, mstore.max_phy_offset))
            assert sstore.max_phy_offset == mstore.max_phy_offset
            assert _view(slave) == _view(master)
            assert set(slave.table.pending) == {h[2][0], h[3][0], h[5][0]}
            assert slave.table.info(h[2][0]).checks == 2
            # The master lost its last half (and what followed): the slave truncates there.
            sstore.truncate_replicated(h[5][1])
            assert h[5][0] not in slave.table.pending and set(slave.table.pending) == {h[2][0], h[3][0]}
            assert slave.table.outcome(h[4][0]) == Outcome.DISCARD
        finally:
            await mstore.shutdown()
            await sstore.shutdown()

    asyncio.run(go())


def _orders_records(store) -> list[tuple[int, bytes]]:
    """(end offset, body) of every real message of topic "orders" in the log."""
    from txmq.message import decode_message
    from txmq.store.record import read_prefix, to_wire

    raw = store.commit_log.read_raw(0, store.max_phy_offset)
    out, pos = [], 0
    while pos + 8 <= len(raw):
        size = read_prefix(raw, pos)[0]
        m = decode_message(to_wire(raw[pos:pos + size]))[0]
        if m.topic == "orders":
            out.append((pos + size, m.body))
        pos += size
    return out


def test_a_slave_made_master_takes_over_and_does_not_store_a_half_replicated_commit_twice(tmp_path):
    """The old master stored COMMIT's real message, which was replicated, but not its op record: the new master
    (take_over) finds the message in its log on the next COMMIT; first decision wins there too."""
    async def go() -> None:
        mstore, master = await open_service(tmp_path / "m")
        sstore, slave = await open_service(tmp_path / "s")
        sstore.add_dispatcher(slave.follow)
        try:
            h = [await half(master, i) for i in range(3)]
            assert (await end(master, *h[0], Outcome.COMMIT)).code == 0
            await asyncio.sleep(0)
            cut = _orders_records(mstore)[0][0]  # the real message of h0 and nothing after it
            assert cut < mstore.max_phy_offset
            sstore.append_replicated(0, mstore.commit_log.read_raw(0, cut))
            assert set(slave.table.pending) == {h[0][0], h[1][0], h[2][0]}
            assert slave.table.next_due_s() is None  # a slave schedules no checks
            assert slave.take_over() == 3
            assert slave.table.recovered >= {h[0][0], h[1][0], h[2][0]}
            assert slave.table.next_due_s() is not None
            assert (await end(slave, *h[0], Outcome.COMMIT)).code == 0
            assert [body for _, body in _orders_records(sstore)] == [b"m0"]  # not stored again
            assert slave.table.outcome(h[0][0]) == Outcome.COMMIT
            assert (await end(slave, *h[1], Outcome.ROLLBACK)).code == 0
            assert (await end(slave, *h[1], Outcome.COMMIT)).code != 0  # the first decision wins
            assert (await end(slave, *h[2], Outcome.COMMIT)).code == 0
            assert [body for _, body in _orders_records(sstore)] == [b"m0", b"m2"]
        finally:
            await mstore.shutdown()
            await sstore.shutdown()

    asyncio.run(go())


def test_a_commit_in_the_log_but_not_acknowledged_stands_and_is_not_stored_twice(tmp_path):
    """A master whose controller lease lapsed answers a put NOT_ACKNOWLEDGED: the record is in the log, so the
    COMMIT it carried stands; a retried COMMIT (the lease renewed) stores nothing more."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        fenced = True

        def replicate(end_offset: int) -> asyncio.Future[PutMessageStatus]:  # ReplicasManager.replicate's answers
            f = asyncio.get_running_loop().create_future()
            f.set_result(PutMessageStatus.NOT_ACKNOWLEDGED if fenced else PutMessageStatus.PUT_OK)
            return f

        try:
            h, c = await half(service, 0)
            store.replicate = replicate
            first = await end(service, h, c, Outcome.COMMIT)
            assert first.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert service.table.outcome(h) is Outcome.COMMIT and h not in service.table.pending
            fenced = False
            assert (await end(service, h, c, Outcome.COMMIT)).code == ResponseCode.SUCCESS
            got = store.get_message("orders", 0, 0, 10, 1 << 20)
            assert len(got.messages) == 1
        finally:
            await store.shutdown()

    asyncio.run(go())


def test_remembered_halves_are_forgotten_when_the_log_is_truncated(tmp_path):
    """A half the truncation removed is not committed from the cache of recent halves: its half offset belongs to
    the next transaction stored there."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        store.add_truncate_listener(service.rebuild)
        try:
            await half(service, 0)
            h1, c1 = await half(service, 1)
            store.truncate_replicated(c1)  # a master stepping down, cut where the new master's log ends
            stale = await end(service, h1, c1, Outcome.COMMIT)
            assert stale.code != ResponseCode.SUCCESS
            assert store.get_message("orders", 0, 0, 10, 1 << 20).messages == []
            n1, d1 = await half(service, 2)  # the next half takes the freed half offset
            assert n1 == h1 and n1 in service.table.pending
            assert (await end(service, n1, d1, Outcome.ROLLBACK)).code == ResponseCode.SUCCESS
        finally:
            await store.shutdown()

    asyncio.run(go())
