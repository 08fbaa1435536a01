"""A slave's transaction table from replicated records (TransactionalMessageService.follow): equal to the
master's, and rebuilt when the slave's log is truncated under it."""

from __future__ import annotations

import asyncio

from tx_helpers import end, half, open_service

from txmq.broker.transaction.state import Outcome


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
