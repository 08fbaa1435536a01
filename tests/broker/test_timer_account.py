"""Timer rows hold times of the store's elapsed-time account: a record older than the account's start (stored
before its clock file was lost) has a negative due, and an account that started again (its file lost) is behind every
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


async def _restarted_without_its_clock_file(store: DefaultMessageStore, timers: TimerMessageStore, cfg: StoreConfig,
                                           root: Path) -> tuple[DefaultMessageStore, TimerMessageStore]:
    """The broker stopped, its store's clock file lost (the account starts again at 0), and started again."""
    timers.close()
    await store.shutdown()
    os.unlink(root / "store" / "clock")
    store = DefaultMessageStore(cfg)
    await store.start()
    return store, TimerMessageStore(store, cfg, root)


def test_an_overdue_timer_stored_before_the_account_started_is_delivered(tmp_path: Path) -> None:
    """A timer due 200 ms after it was stored, not indexed yet when the broker stops; its clock file is lost, and
    the account starts again at 0 when it restarts: the record is older than the account, and its row's due is
    below zero on it. The pass over due rows started at -1 and never selected it."""
    cfg = _config(tmp_path)

    async def main() -> None:
        store = DefaultMessageStore(cfg)
        await store.start()
        timers = TimerMessageStore(store, cfg, tmp_path)
        assert timers.divert(m := _timer(b"due in 200 ms", 200))
        assert (await store.put_message(m)).stored
        await asyncio.sleep(1.0)  # overdue, and stopped before its loop indexed it
        store, timers = await _restarted_without_its_clock_file(store, timers, cfg, tmp_path)
        timers.catch_up()
        [(due,)] = timers.db.execute("SELECT due FROM timer").fetchall()
        assert due < -1  # the case: older than the account
        loop = asyncio.create_task(timers.run(deliver=True))
        for _ in range(100):
            await asyncio.sleep(0.02)
            if _bodies(store):
                break
        await cancel_and_wait(loop)
        delivered = _bodies(store)
        timers.close()
        await store.shutdown()
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
        store, timers = await _restarted_without_its_clock_file(store, timers, cfg, tmp_path)
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


DAY_MS = 24 * 3600 * 1000


def test_an_idle_timer_index_keeps_the_waits_left_when_the_account_starts_again(tmp_path: Path) -> None:
    """The account is saved with the index's progress, which only timer activity committed: an index idle for 47
    hours saved an account far behind the one the clock file lost, and its rows were moved back by too little (a
    timer with 5.04 days left waited 7). The loop saves it every ``ACCOUNT_SAVE_MS`` too."""
    # timerPrecisionMs and timerRollWindowSlot at their defaults: a row is looked at (rolled) every two days
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"))

    async def main() -> None:
        store = DefaultMessageStore(cfg)
        await store.start()
        timers = TimerMessageStore(store, cfg, tmp_path)
        assert timers.divert(m := _timer(b"in seven days", 7 * DAY_MS))
        assert (await store.put_message(m)).stored
        loop = asyncio.create_task(timers.run(deliver=True))  # the broker's timer loop, as master
        for _ in range(100):
            await asyncio.sleep(0.02)
            if timers.count == 1:
                break
        assert timers.count == 1
        advance(store, 47 * 3600)  # 47 quiet hours (no other timer, no roll yet: nothing for the index to commit)
        await asyncio.sleep(1.2)  # the loop ticks on (a tick at most a second of the loop's time away)
        await cancel_and_wait(loop)
        timers.close()
        await store.shutdown()  # the clock file saved at the account 47 h on

        os.unlink(tmp_path / "store" / "clock")  # ... and lost before the restart: the account starts again
        store = DefaultMessageStore(cfg)
        await store.start()
        timers = TimerMessageStore(store, cfg, tmp_path)
        [(real,)] = timers.db.execute("SELECT real FROM timer").fetchall()
        left = real - store.clock.elapsed_ms()
        timers.close()
        await store.shutdown()
        had = 7 * DAY_MS - 47 * 3600 * 1000
        assert left <= had + 60_000, f"the timer waits {left / DAY_MS:.2f} days more; it had {had / DAY_MS:.2f} left"

    asyncio.run(main())
