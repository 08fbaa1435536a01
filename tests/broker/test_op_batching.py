"""Decisions that arrive together share op records: one write per loop iteration, one record per kind,
and every decision is in the log before it is answered."""

from __future__ import annotations

import asyncio

from tests.broker.tx_helpers import end, half, open_service
from txmq.broker.transaction.state import Outcome
from txmq.remoting.codes import ResponseCode
from txmq.topic import RMQ_SYS_TRANS_OP_HALF_TOPIC


def test_concurrent_decisions_share_op_records_and_survive_a_crash(tmp_path):
    async def go() -> None:
        store, service = await open_service(tmp_path)
        halves = [await half(service, n) for n in range(40)]
        ops_before = store.get_max_offset_in_queue(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0)
        results = await asyncio.gather(*(end(service, off, clo, Outcome.COMMIT if n % 2 == 0 else Outcome.ROLLBACK)
                                         for n, (off, clo) in enumerate(halves)))
        assert [r.code for r in results] == [ResponseCode.SUCCESS] * 40
        op_records = store.get_max_offset_in_queue(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0) - ops_before
        assert 1 <= op_records <= 8, op_records  # not one per decision
        assert store.get_max_offset_in_queue("orders", 0) == 20
        expected = [service.table.outcome(off) for off, _ in halves]
        store.close_without_shutdown()

        store, service = await open_service(tmp_path)  # the outcomes are in the log, not just in memory
        assert [service.table.outcome(off) for off, _ in halves] == expected
        assert expected == [Outcome.COMMIT if n % 2 == 0 else Outcome.ROLLBACK for n in range(40)]
        assert len(service.table) == 0
        await store.shutdown()

    asyncio.run(go())
