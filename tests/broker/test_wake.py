"""A wake that arrives while a background loop (check-back, delay levels, timers) is in a pass is not lost: the loop
makes another pass at once instead of waiting out its timeout, which the tests make far longer than they wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.broker.tx_helpers import open_service
from txmq.broker import schedule as schedule_module
from txmq.broker.schedule import ScheduleMessageService
from txmq.broker.timer import TIMER_DELIVER_MS, TimerMessageStore
from txmq.broker.transaction.check_service import TransactionalMessageCheckService
from txmq.message import MessageConst, MessageExt
from txmq.store import DefaultMessageStore, StoreConfig

SECOND_PASS_WITHIN_S = 10.0  # the loops' timeouts below are an hour (a minute for timers)


def _passes(obj: Any, name: str, during_first: Callable[[], Awaitable[None]]) -> asyncio.Event:
    """Wrap the pass ``obj.name``: ``during_first`` runs inside the first pass; the event is set at the second."""
    original = getattr(obj, name)
    count = 0
    second = asyncio.Event()

    async def one_pass(*args: Any) -> Any:
        nonlocal count
        count += 1
        if count == 2:
            second.set()
        result = await original(*args)
        if count == 1:
            await during_first()
        return result

    setattr(obj, name, one_pass)
    return second


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_wake_during_a_check_pass_makes_another_pass(tmp_path):
    async def go() -> None:
        store, service = await open_service(tmp_path)
        checker = TransactionalMessageCheckService(service, check_max=15, check_interval_ms=3_600_000)

        async def resume() -> None:  # as an operator's resume of a discarded transaction wakes it
            checker.wake()

        second = _passes(checker, "check_pass", resume)
        task = asyncio.create_task(checker.run())
        await asyncio.wait_for(second.wait(), SECOND_PASS_WITHIN_S)
        await _stop(task)
        await store.shutdown()

    asyncio.run(go())


def test_a_delayed_message_stored_during_a_pass_is_delivered_without_waiting_out_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(schedule_module, "IDLE_WAIT_S", 3600.0)

    async def go() -> None:
        async with DefaultMessageStore(StoreConfig(store_path_root_dir=str(tmp_path / "store"))) as store:
            schedule = ScheduleMessageService(store, [1], tmp_path)

            async def send() -> None:
                msg = MessageExt("orders", b"later", {MessageConst.DELAY_TIME_LEVEL: "1"}, born_timestamp=1)
                schedule.divert(msg)
                assert (await store.put_message(msg)).stored

            second = _passes(schedule, "deliver_due", send)
            task = asyncio.create_task(schedule.run())
            await asyncio.wait_for(second.wait(), SECOND_PASS_WITHIN_S)
            for _ in range(100):  # the second pass delivers it (due 1 ms after it was stored)
                if schedule.delivered:
                    break
                await asyncio.sleep(0.01)
            await _stop(task)
            assert schedule.delivered == 1 and store.get_max_offset_in_queue("orders", 0) == 1

    asyncio.run(go())


def test_a_timer_sent_during_a_tick_is_indexed_without_waiting_for_the_next_tick(tmp_path):
    precision = 60_000
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"), timer_precision_ms=precision,
                      timer_max_delay_sec=3600)

    async def go() -> None:
        async with DefaultMessageStore(cfg) as store:
            clock = store.clock
            # the account just past a tick: the next one is a whole minute away
            shift_ns = (precision - clock.elapsed_ms() % precision) * 1_000_000
            clock.monotonic_ns = lambda: time.monotonic_ns() + shift_ns
            timers = TimerMessageStore(store, cfg, Path(tmp_path))

            async def send() -> None:
                msg = MessageExt("orders", b"t", {TIMER_DELIVER_MS: str(int(time.time() * 1000) + 600_000)},
                                 born_timestamp=int(time.time() * 1000))
                assert timers.divert(msg)
                assert (await store.put_message(msg)).stored

            second = _passes(timers, "_deliver_due", send)
            task = asyncio.create_task(timers.run(deliver=True))
            await asyncio.wait_for(second.wait(), SECOND_PASS_WITHIN_S)
            await _stop(task)
            assert timers.count == 1 and timers.enqueued == 1  # indexed before the second tick's pass
            timers.close()

    asyncio.run(go())


def test_a_delayed_message_stored_after_another_group_was_written_wakes_the_loop(tmp_path, monkeypatch):
    """A retry diverted to a delay level waits for its new retry topic before its put: another sender's group is
    written in between. The loop's pass is for the delayed message's own group, not for the first to come."""
    monkeypatch.setattr(schedule_module, "IDLE_WAIT_S", 3600.0)

    async def go() -> None:
        async with DefaultMessageStore(StoreConfig(store_path_root_dir=str(tmp_path / "store"))) as store:
            schedule = ScheduleMessageService(store, [1], tmp_path)
            task = asyncio.create_task(schedule.run())
            await asyncio.sleep(0.05)  # the first pass is over: the loop waits out its timeout
            msg = MessageExt("orders", b"later", {MessageConst.DELAY_TIME_LEVEL: "1"}, born_timestamp=1)
            schedule.divert(msg)
            assert (await store.put_message(MessageExt("orders", b"other", {}, born_timestamp=1))).stored
            await asyncio.sleep(0.05)  # a pass woken by that group would be over
            assert (await store.put_message(msg)).stored
            began = time.monotonic()
            while not schedule.delivered:
                assert time.monotonic() - began < SECOND_PASS_WITHIN_S, "the loop waited out its timeout"
                await asyncio.sleep(0.01)
            await _stop(task)
            assert store.get_max_offset_in_queue("orders", 0) == 2

    asyncio.run(go())
