"""A delayed message that falls due while the disk is full (a real tmpfs, over the warning ratio) is delivered
once there is room, not skipped: the store refused its re-put, so the level's offset must not move past it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tests.disk_helpers import fill_disk, leave_for, tmpfs
from txmq.broker.schedule import ScheduleMessageService
from txmq.message import MessageConst, MessageExt, decode_message
from txmq.store import DefaultMessageStore, StoreConfig
from txmq.store.group_commit import DISK_CHECK_INTERVAL_S


def test_a_due_message_the_full_disk_refuses_is_delivered_later(tmp_path):
    with tmpfs(tmp_path / "disk") as disk:

        async def go() -> None:
            async with DefaultMessageStore(StoreConfig(store_path_root_dir=f"{disk}/store")) as store:
                schedule = ScheduleMessageService(store, [10], Path(disk))
                msg = MessageExt("orders", b"later", {MessageConst.DELAY_TIME_LEVEL: "1"}, born_timestamp=1)
                schedule.divert(msg)
                assert (await store.put_message(msg)).ok
                await asyncio.sleep(0.02)  # due
                fill_disk(disk, leave_for(disk, 95))
                await asyncio.sleep(DISK_CHECK_INTERVAL_S)
                await schedule.deliver_due()
                assert store.get_max_offset_in_queue("orders", 0) == 0 and schedule.delivered == 0
                os.unlink(os.path.join(disk, "filler"))
                await asyncio.sleep(DISK_CHECK_INTERVAL_S)
                await schedule.deliver_due()
                await schedule.deliver_due()
                got = store.get_message("orders", 0, 0, 10)
                assert [decode_message(w)[0].body for w in got.messages] == [b"later"]

        asyncio.run(go())
