"""The timer index against a real store: what a crash can leave between a delivery being stored and its row being
deleted, recovery from the log (never twice, never lost), recall markers, and a slave's table kept from the
replicated records."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from txmq.broker.timer import BATCH, TIMER_DELIVER_MS, RecallError, TimerMessageStore
from txmq.cancel import cancel_and_wait
from txmq.errors import InvalidMessageError
from txmq.message import MessageExt, decode_message
from txmq.store import DefaultMessageStore, StoreConfig


def _config(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root / "store"), timer_precision_ms=20, timer_max_delay_sec=60)


def _timer(body: bytes, in_ms: int) -> MessageExt:
    return MessageExt("orders", body, {TIMER_DELIVER_MS: str(int(time.time() * 1000) + in_ms), "UNIQ_KEY": body.hex()},
                      born_timestamp=int(time.time() * 1000))


def _bodies(store: DefaultMessageStore) -> list[bytes]:
    got = store.get_message("orders", 0, 0, 100)
    return [decode_message(raw)[0].body for raw in got.messages]


async def _put(store: DefaultMessageStore, timers: TimerMessageStore, msg: MessageExt) -> MessageExt:
    assert timers.divert(msg)
    assert (await store.put_message(msg)).stored
    return msg


def _ticking_every_10_s(tmp_path: Path) -> StoreConfig:
    """Ticks far apart: a message indexed before the next one was woken for, not found by a tick."""
    return StoreConfig(store_path_root_dir=str(tmp_path / "store"), timer_precision_ms=10_000,
                       timer_max_delay_sec=600)


@contextlib.asynccontextmanager
async def _loop_running(timers: TimerMessageStore) -> AsyncIterator[None]:
    """The index's loop, as master, for the block's length; the index closed after it."""
    loop = asyncio.create_task(timers.run(deliver=True))
    try:
        yield
    finally:
        await cancel_and_wait(loop)
        timers.close()


def test_a_delivery_stored_before_a_crash_is_not_stored_again(tmp_path):
    """The crash window: the delivered message is in the log, its row still in the table (not committed)."""
    cfg = _config(tmp_path)

    async def first() -> None:
        store = DefaultMessageStore(cfg)
        await store.start()
        timers = TimerMessageStore(store, cfg, tmp_path)
        for body in (b"a", b"b", b"c"):
            await _put(store, timers, _timer(body, 50))
        timers.catch_up()
        assert timers.count == 3
        await asyncio.sleep(0.1)
        # deliver as the loop does, but "crash" before the rows' deletion is committed
        timers.db.execute("BEGIN")
        for (offset,) in timers.db.execute("SELECT offset FROM timer ORDER BY due LIMIT 2").fetchall():
            msg = store.look_message_by_offset(offset)
            assert (await store.put_message(timers._restore(msg, offset))).stored
            timers.db.execute("DELETE FROM timer WHERE offset = ?", (offset,))
        timers.db.execute("ROLLBACK")  # what the crash leaves: the deletions lost, the deliveries in the log
        timers.db.close()
        store.close_without_shutdown()

    async def second() -> None:
        store = DefaultMessageStore(cfg)
        await store.start()
        timers = TimerMessageStore(store, cfg, tmp_path)
        assert timers.count == 3
        timers.catch_up()
        assert timers.count == 1  # the two found delivered in the log
        await timers._deliver_due()
        assert sorted(_bodies(store)) == [b"a", b"b", b"c"]
        timers.close()
        await store.shutdown()

    asyncio.run(first())
    asyncio.run(second())


def test_recall_and_its_marker_survive_a_restart(tmp_path):
    cfg = _config(tmp_path)

    async def first() -> str:
        store = DefaultMessageStore(cfg)
        await store.start()
        timers = TimerMessageStore(store, cfg, tmp_path)
        keep = await _put(store, timers, _timer(b"keep", 100))
        drop = await _put(store, timers, _timer(b"drop", 100))
        timers.catch_up()
        handle = timers.recall_handle(drop, "broker-a")
        assert handle is not None and timers.recall_handle(keep, "broker-a") != handle
        with pytest.raises(RecallError, match="topic not match"):
            await timers.recall("other", handle, "broker-a", ("127.0.0.1", 1))
        with pytest.raises(RecallError, match="another broker"):
            await timers.recall("orders", handle, "broker-b", ("127.0.0.1", 1))
        with pytest.raises(RecallError, match="invalid"):
            await timers.recall("orders", "bm90IGEgaGFuZGxl", "broker-a", ("127.0.0.1", 1))
        assert await timers.recall("orders", handle, "broker-a", ("127.0.0.1", 1)) == b"drop".hex()
        with pytest.raises(RecallError, match="not scheduled"):
            await timers.recall("orders", handle, "broker-a", ("127.0.0.1", 1))
        timers.db.close()  # killed before the marker was read into the table
        store.close_without_shutdown()
        return handle

    async def second(handle: str) -> None:
        store = DefaultMessageStore(cfg)
        await store.start()
        timers = TimerMessageStore(store, cfg, tmp_path)
        timers.catch_up()
        assert timers.count == 1
        await asyncio.sleep(0.15)
        await timers._deliver_due()
        assert _bodies(store) == [b"keep"]
        with pytest.raises(RecallError, match="not scheduled"):
            await timers.recall("orders", handle, "broker-a", ("127.0.0.1", 1))
        timers.close()
        await store.shutdown()

    asyncio.run(second(asyncio.run(first())))


def test_refusals(tmp_path):
    cfg = _config(tmp_path)

    async def go() -> None:
        async with DefaultMessageStore(cfg) as store:
            timers = TimerMessageStore(store, cfg, tmp_path)
            with pytest.raises(InvalidMessageError, match="timerMaxDelaySec"):
                timers.divert(_timer(b"far", 61_000))
            past = _timer(b"past", -1000)
            assert not timers.divert(past) and past.topic == "orders"
            cfg.timer_wheel_enable = False
            with pytest.raises(InvalidMessageError, match="timerWheelEnable"):
                timers.divert(_timer(b"off", 1000))
            timers.close()

    asyncio.run(go())


def test_a_timer_beyond_the_roll_window_is_rolled_then_delivered_once_on_time(tmp_path):
    """A timer record is stored again each roll window (here 2 ticks of 20 ms), so that retention never takes a
    waiting one; it is delivered once, at its time, and a recall by its first handle finds its newest record.
    Due in 2 s, rolls awaited rather than slept for: two rolls (80 ms) come long before it is due also on a loaded
    machine; its delivery awaited too."""
    cfg = _config(tmp_path)
    cfg.timer_roll_window_slot = 2

    async def until(pred: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 10
        while not pred() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def go() -> None:
        async with DefaultMessageStore(cfg) as store:
            timers = TimerMessageStore(store, cfg, tmp_path)
            late = await _put(store, timers, _timer(b"late", 2000))
            drop = await _put(store, timers, _timer(b"drop", 2000))
            handle = timers.recall_handle(drop, "broker-a")
            assert handle is not None
            loop = asyncio.create_task(timers.run(deliver=True))
            try:
                await until(lambda: timers.rolled >= 2)
                assert timers.rolled >= 2 and timers.delivered == 0
                await timers.recall("orders", handle, "broker-a", ("127.0.0.1", 1))
                await until(lambda: timers.delivered > 0)
                await asyncio.sleep(0.2)  # ten ticks: a recalled one left in the table, due with it, would come
            finally:
                loop.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loop
            got = store.get_message("orders", 0, 0, 10)
            delivered = [decode_message(raw)[0] for raw in got.messages]
            assert [m.body for m in delivered] == [b"late"]
            assert delivered[0].store_timestamp >= int(late.properties["TIMER_OUT_MS"])
            assert int(delivered[0].properties["TIMER_ROLL_TIMES"]) >= 2
            assert timers.count == 0
            timers.close()

    asyncio.run(go())


def test_due_timers_behind_a_batch_of_recalled_ones_are_delivered_in_the_same_pass(tmp_path):
    """A whole batch of recalled rows (their markers not applied yet) at the head of the due rows must not end the
    pass: the due rows behind them go in the same pass."""
    cfg = _config(tmp_path)

    async def go() -> None:
        async with DefaultMessageStore(cfg) as store:
            timers = TimerMessageStore(store, cfg, tmp_path)
            recalled = [await _put(store, timers, _timer(f"r{i}".encode(), 100)) for i in range(BATCH)]
            for body in (b"x", b"y", b"z"):
                await _put(store, timers, _timer(body, 200))
            timers.catch_up()
            for msg in recalled:
                handle = timers.recall_handle(msg, "broker-a")
                assert handle is not None
                await timers.recall("orders", handle, "broker-a", ("127.0.0.1", 1))
            await asyncio.sleep(0.3)  # all due, the recall markers not yet read into the table
            await timers._deliver_due()
            assert sorted(_bodies(store)) == [b"x", b"y", b"z"]
            timers.close()

    asyncio.run(go())


def test_a_timer_message_is_indexed_as_soon_as_it_is_written_and_recallable_at_once(tmp_path):
    """The store writes puts in groups, after the step that asked: the loop is woken once the group is written,
    not at ``divert`` (a pass then finds nothing, and the message waited for the next tick), and a recall that
    comes before the loop's pass finds the message all the same rather than answering "not scheduled"."""
    cfg = _ticking_every_10_s(tmp_path)

    async def go() -> None:
        async with DefaultMessageStore(cfg) as store:
            timers = TimerMessageStore(store, cfg, tmp_path)
            async with _loop_running(timers):
                await asyncio.sleep(0.05)  # the loop's first pass is over: it waits for its next tick
                first = await _put(store, timers, _timer(b"first", 60_000))
                began = time.monotonic()
                while timers.count < 1:
                    assert time.monotonic() - began < 5, "the timer message waited for the loop's next tick"
                    await asyncio.sleep(0.005)
                second = await _put(store, timers, _timer(b"second", 60_000))
                for msg in (second, first):  # the second before any pass of the loop could index it
                    handle = timers.recall_handle(msg, "broker-a")
                    assert handle is not None
                    assert await timers.recall("orders", handle, "broker-a", ("127.0.0.1", 1)) == msg.body.hex()

    asyncio.run(go())


def test_a_timer_message_stored_after_another_group_was_written_still_wakes_the_loop(tmp_path):
    """A COMMIT diverts its real message and stores it from a task of its own: another sender's group, or another
    COMMIT's timer message, is written in between. Neither group is the timer message's, and the loop is woken once
    the timer message's own group is written, not by the first group to come."""
    cfg = _ticking_every_10_s(tmp_path)

    async def go() -> None:
        async with DefaultMessageStore(cfg) as store:
            timers = TimerMessageStore(store, cfg, tmp_path)
            async with _loop_running(timers):
                await asyncio.sleep(0.05)  # the loop's first pass is over: it waits for its next tick
                first, second = _timer(b"first", 60_000), _timer(b"second", 60_000)
                assert timers.divert(first) and timers.divert(second)
                other = MessageExt("orders", b"other", {}, born_timestamp=int(time.time() * 1000))
                for put, indexed in ((other, 0), (first, 1), (second, 2)):
                    await asyncio.sleep(0.05)  # a pass woken by the group before would be over
                    assert (await store.put_message(put)).stored
                    began = time.monotonic()
                    while timers.count < indexed:
                        assert time.monotonic() - began < 2, "the timer message waited for the loop's next tick"
                        await asyncio.sleep(0.005)

    asyncio.run(go())


def test_a_recall_while_the_loop_is_in_a_long_pass_finds_the_message_just_sent(tmp_path):
    """A pass that delivers a large batch of due timers awaits their puts (a slow disk's fsyncs) for longer than a
    recall would wait for the next pass: the recall reads the timer topic into the index itself rather than
    answering "not scheduled" for a message the loop would then deliver."""
    cfg = _ticking_every_10_s(tmp_path)

    async def go() -> None:
        async with DefaultMessageStore(cfg) as store:
            timers = TimerMessageStore(store, cfg, tmp_path)
            in_pass, release = asyncio.Event(), asyncio.Event()
            deliver_due = timers._deliver_due

            async def long_pass() -> int | None:
                in_pass.set()
                await release.wait()  # the pass's puts, not answered yet
                return await deliver_due()

            timers._deliver_due = long_pass  # type: ignore[method-assign]
            async with _loop_running(timers):
                try:
                    await in_pass.wait()
                    msg = await _put(store, timers, _timer(b"sent-now", 60_000))
                    handle = timers.recall_handle(msg, "broker-a")
                    assert handle is not None
                    assert await timers.recall("orders", handle, "broker-a", ("127.0.0.1", 1)) == msg.body.hex()
                finally:
                    release.set()

    asyncio.run(go())
