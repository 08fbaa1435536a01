"""Timer rows hold times of the store's elapsed-time account: a record older than the account's start (a new
slave copying an old log) has a negative due, and an account that started again (its file lost) is behind every
row the index kept. Neither may hold a timer back."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tests.elapsed import advance
from txmq.broker.timer import TIMER_DELIVER_MS, TimerMessageStore
from txmq.cancel import cancel_and_wait
from txmq.message import MessageExt, decode_message
from txmq.store import DefaultMessageStore, StoreConfig

pytestmark = pytest.mark.dated


def _config(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root / "store"), timer_precision_ms=20)


def _timer(body: bytes, in_ms: int) -> MessageExt:
    now = int(time.time() * 1000)
    return MessageExt("orders", body, {TIMER_DELIVER_MS: str(now + in_ms), "UNIQ_KEY": body.hex()},
                      born_timestamp=now)


def _bodies(store: DefaultMessageStore) -> list[bytes]:
    return [decode_message(raw)[0].body for raw in store.get_message("orders", 0, 0, 100).messages]


def test_an_overdue_timer_a_new_slave_copied_is_delivered_after_a_failover(tmp_path: Path) -> None:
    """The master goes down before delivering a timer; a new slave (its account starting at 0) copies the log and
    is made master: the row's due is below 0 on its account, and the pass over due rows started at -1."""

    async def main() -> None:
        mcfg, scfg = _config(tmp_path / "master"), _config(tmp_path / "slave")
        master = DefaultMessageStore(mcfg)
        await master.start()
        mtimers = TimerMessageStore(master, mcfg, tmp_path / "master")
        m = _timer(b"due in 200 ms", 200)
        assert mtimers.divert(m)
        assert (await master.put_message(m)).stored
        await asyncio.sleep(0.5)  # overdue, never delivered: the master's loop is not running
        data = master.commit_log.read_raw(0, master.max_phy_offset)
        mtimers.close()
        await master.shutdown()

        slave = DefaultMessageStore(scfg)
        slave.replica = True
        await slave.start()
        assert slave.append_replicated(0, data) == len(data)
        stimers = TimerMessageStore(slave, scfg, tmp_path / "slave")
        stimers.catch_up()
        [(due,)] = stimers.db.execute("SELECT due FROM timer").fetchall()
        assert due < -1  # the case: older than the new account
        slave.replica = False  # made master
        loop = asyncio.create_task(stimers.run(deliver=True))
        for _ in range(100):
            await asyncio.sleep(0.02)
            if _bodies(slave):
                break
        await cancel_and_wait(loop)
        delivered = _bodies(slave)
        stimers.close()
        await slave.shutdown()
        assert delivered == [b"due in 200 ms"]

    asyncio.run(main())


def test_timers_keep_their_waits_when_the_account_starts_again(tmp_path: Path) -> None:
    """A broker up a month indexes a timer due in a second; its clock file is lost before the restart (the account
    starts again at 0): the row was due a month on, and now keeps the second it had left."""
    cfg = _config(tmp_path)

    async def main() -> None:
        store = DefaultMessageStore(cfg)
        await store.start()
        advance(store, 30 * 24 * 3600)
        timers = TimerMessageStore(store, cfg, tmp_path)
        assert timers.divert(m := _timer(b"in one second", 1000))
        assert (await store.put_message(m)).stored
        timers.catch_up()
        assert timers.count == 1
        timers.close()
        await store.shutdown()

        os.unlink(tmp_path / "store" / "clock")
        store = DefaultMessageStore(cfg)
        await store.start()
        timers = TimerMessageStore(store, cfg, tmp_path)
        [(real,)] = timers.db.execute("SELECT real FROM timer").fetchall()
        assert real - store.clock.elapsed_ms() <= 1000
        timers.close()  # opened again: the rows are not moved twice
        timers = TimerMessageStore(store, cfg, tmp_path)
        assert timers.db.execute("SELECT real FROM timer").fetchall() == [(real,)]
        timers.catch_up()
        await asyncio.sleep(1.2)
        await timers._deliver_due()
        delivered = _bodies(store)
        timers.close()
        await store.shutdown()
        assert delivered == [b"in one second"]

    asyncio.run(main())
