"""The timer index on a disk that fills up (a real tmpfs): a write to the index that fails (sqlite's "database or
disk is full") does not end the timer loop. Once there is room again, the timers due meanwhile are delivered, each
once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

from tests.disk_helpers import fill_disk, tmpfs
from txmq.broker.timer import TIMER_DELIVER_MS, TimerMessageStore
from txmq.message import MessageExt, decode_message
from txmq.store import DefaultMessageStore, StoreConfig
from txmq.store.group_commit import DISK_CHECK_INTERVAL_S


def test_the_timer_loop_outlives_a_full_disk_and_delivers_once_there_is_room(tmp_path, caplog):
    with tmpfs(tmp_path / "disk") as disk:

        async def go() -> None:
            cfg = StoreConfig(store_path_root_dir=f"{disk}/store", timer_precision_ms=20, timer_max_delay_sec=60)
            async with DefaultMessageStore(cfg) as store:
                timers = TimerMessageStore(store, cfg, Path(disk))
                loop = asyncio.create_task(timers.run(deliver=True))
                try:
                    now = int(time.time() * 1000)
                    msgs = [MessageExt("orders", b"t%d" % i, {TIMER_DELIVER_MS: str(now + 400)}, born_timestamp=now)
                            for i in range(3)]
                    for msg in msgs:
                        assert timers.divert(msg)
                        assert (await store.put_message(msg)).stored
                    await asyncio.sleep(0.1)
                    assert timers.count == 3
                    fill_disk(disk, 0)  # the index's next write fails; the store refuses puts
                    await asyncio.sleep(DISK_CHECK_INTERVAL_S + 0.6)  # due, and tried on the full disk
                    assert store.get_max_offset_in_queue("orders", 0) == 0
                    os.unlink(os.path.join(disk, "filler"))
                    for _ in range(100):
                        await asyncio.sleep(0.05)
                        if store.get_max_offset_in_queue("orders", 0) >= 3 and timers.count == 0:
                            break
                    assert not loop.done(), loop.exception()
                    await asyncio.sleep(0.2)
                    got = store.get_message("orders", 0, 0, 10)
                    assert sorted(decode_message(raw)[0].body for raw in got.messages) == [b"t0", b"t1", b"t2"]
                    assert timers.count == 0
                    # the write did fail, said once however many ticks it failed
                    assert [r.getMessage()[:24] for r in caplog.records if "timer index" in r.getMessage()] == \
                        ["timer index not written "]
                finally:
                    loop.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await loop
                    timers.db.close()

        asyncio.run(go())
