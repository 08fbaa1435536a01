"""Decisions on a full disk (a real tmpfs, over ``disk_space_warning_level_ratio``): a COMMIT whose messages the
store refuses and a ROLLBACK whose op record it refuses are answered as failed and stay pending, so that a
restart cannot forget a decision answered as done; once there is room, each counts once."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tests.broker.tx_helpers import end, half, open_service
from tests.disk_helpers import fill_disk, leave_for, tmpfs
from txmq.broker.transaction.state import Outcome
from txmq.message import decode_message
from txmq.remoting.codes import ResponseCode
from txmq.store.group_commit import DISK_CHECK_INTERVAL_S


def test_decisions_refused_by_a_full_disk_stay_pending_and_count_once_there_is_room(tmp_path):
    with tmpfs(tmp_path / "disk") as disk:
        root = Path(disk) / "store"

        async def go() -> None:
            store, service = await open_service(root)
            decisions = [(await half(service, 1), Outcome.COMMIT), (await half(service, 2), Outcome.ROLLBACK)]
            fill_disk(disk, leave_for(disk, 95))
            await asyncio.sleep(DISK_CHECK_INTERVAL_S)
            for (off, clo), outcome in decisions:
                result = await end(service, off, clo, outcome)
                assert result.code == ResponseCode.SYSTEM_ERROR, (outcome, result)
                assert service.table.outcome(off) == Outcome.PENDING and service.table.info(off) is not None
            # nothing left as under way: a snapshot now shows both pending, as the log has them
            assert not service._committing and not service._rolling_back and not service._recovered_before
            os.unlink(os.path.join(disk, "filler"))
            await asyncio.sleep(DISK_CHECK_INTERVAL_S)
            for (off, clo), outcome in decisions:
                assert (await end(service, off, clo, outcome)).code == ResponseCode.SUCCESS
            await store.shutdown()

            store, service = await open_service(root)  # the decisions are in the log
            assert [service.table.outcome(off) for (off, _), _ in decisions] == [Outcome.COMMIT, Outcome.ROLLBACK]
            got = store.get_message("orders", 0, 0, 10)
            assert [decode_message(w)[0].body for w in got.messages] == [b"m1"]
            await store.shutdown()

        asyncio.run(go())
