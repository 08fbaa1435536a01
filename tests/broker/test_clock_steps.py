"""Check-backs, orphans and delayed messages on a real store whose wall clock steps (``elapsed.wall_step``) and
whose time passes (``elapsed.advance``) without waiting: each counts on the store's elapsed-time account, so a
step of the wall clock neither stalls nor hastens any of them, also across a restart. The same through real
processes under libfaketime: tests/clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.broker.tx_helpers import Sender, half, open_service
from tests.elapsed import advance, wall_step
from txmq.broker.schedule import ScheduleMessageService
from txmq.broker.transaction.check_service import TransactionalMessageCheckService
from txmq.broker.transaction.state import Outcome
from txmq.message import MessageConst, MessageExt
from txmq.store import DefaultMessageStore, StoreConfig

pytestmark = pytest.mark.dated  # run again at a fixed month end by make test (Makefile, DATED_AT)


class Nobody:
    """No producer of any group is connected."""

    def send_check(self, group: str, half: MessageExt, half_offset: int) -> bool:
        return False

    def held_up(self, group: str) -> bool:
        return False


def test_a_step_back_neither_stalls_the_first_check_nor_a_step_forward_hastens_it(tmp_path: Path) -> None:
    """transactionTimeOut 1 s: checked once a second of the account has passed (rounded up to the check wheel's
    whole seconds), not when the wall clock says so (-120 s used to hold the first check for 122 s; +1 h checked
    at once)."""

    async def go() -> None:
        store, service = await open_service(tmp_path)
        checker = TransactionalMessageCheckService(service, check_max=5, check_interval_ms=500)
        checker.senders.append(sender := Sender())
        try:
            wall_step(store, -120)
            back, _ = await half(service, 1)
            wall_step(store, 120 + 3600)
            ahead, _ = await half(service, 2)
            assert await checker.check_pass() == 0  # an hour ahead by the wall clock: not due
            advance(store, 2.1)  # the wheel's whole seconds: due at the first whole second past the timeout
            wall_step(store, -3600)
            assert await checker.check_pass() == 2 and sorted(sender.sent) == [back, ahead]
        finally:
            await store.shutdown()

    asyncio.run(go())


def test_the_orphan_bound_and_file_reserved_time_count_the_account_not_the_wall_clock(tmp_path: Path) -> None:
    """With no producer connected a half is discarded as an orphan transactionTimeOut x transactionOrphanFactor
    after it was stored (here 1 s x 600), and one older than fileReservedTime (72 h) is discarded: neither because
    the wall clock stepped an hour, or 73 hours, ahead."""

    async def go() -> None:
        store, service = await open_service(tmp_path)
        checker = TransactionalMessageCheckService(service, check_max=5, check_interval_ms=500)
        checker.senders.append(Nobody())
        try:
            off, _ = await half(service, 1)
            for step in (3600, 72 * 3600):
                wall_step(store, step)
                advance(store, 1.5)
                await checker.check_pass()
                assert service.table.outcome(off) == Outcome.PENDING and not service.table.discarded
                assert service.metrics.orphans == 0
            advance(store, 600)
            await checker.check_pass()
            assert service.table.outcome(off) == Outcome.DISCARD and service.metrics.orphans == 1
        finally:
            await store.shutdown()

    asyncio.run(go())


def test_a_restart_resumes_first_checks_where_they_were_whatever_the_wall_clock_did(tmp_path: Path) -> None:
    """Pending transactions come back from the snapshot (and from the log) due when they were: a wall clock a year
    ahead across the restart checks nothing early, one stepped back stalls nothing."""
    snap = tmp_path / "state.snapshot"

    async def go() -> None:
        store, service = await open_service(tmp_path / "store", snap)
        await half(service, 1)
        assert service.snapshot()
        await half(service, 2)  # after the snapshot: replayed from the log
        await store.shutdown()
        # A year ahead: nothing is due before its second of the account has passed.
        store, service = await open_service(tmp_path / "store", snap)
        wall_step(store, 365 * 24 * 3600)
        checker = TransactionalMessageCheckService(service, check_max=5, check_interval_ms=500)
        checker.senders.append(sender := Sender())
        assert len(service.table) == 2 and await checker.check_pass() == 0
        advance(store, 2.1)
        assert await checker.check_pass() == 2 and sorted(sender.sent) == sorted(service.table.pending)
        await store.shutdown()
        # Two years back (the clock corrected, and more): overdue ones are checked at once, not in two years.
        store, service = await open_service(tmp_path / "store", snap)
        wall_step(store, -2 * 365 * 24 * 3600)
        checker = TransactionalMessageCheckService(service, check_max=5, check_interval_ms=500)
        checker.senders.append(sender := Sender())
        assert await checker.check_pass() == 2
        await store.shutdown()

    asyncio.run(go())


def test_a_delayed_message_is_due_its_delay_after_it_was_stored_whatever_the_wall_clock_does(tmp_path: Path) -> None:
    async def go() -> None:
        async with DefaultMessageStore(StoreConfig(store_path_root_dir=str(tmp_path / "store"))) as store:
            schedule = ScheduleMessageService(store, [2000], tmp_path)
            msg = MessageExt("orders", b"later", {MessageConst.DELAY_TIME_LEVEL: "1"}, born_timestamp=1)
            schedule.divert(msg)
            assert (await store.put_message(msg)).ok
            for step in (3600, -7200):  # an hour ahead, then an hour behind
                wall_step(store, step)
                assert await schedule.deliver_due() is not None and schedule.delivered == 0
            advance(store, 2.1)
            assert await schedule.deliver_due() is None and schedule.delivered == 1
            assert store.get_max_offset_in_queue("orders", 0) == 1

    asyncio.run(go())


def test_a_lost_clock_file_stalls_no_transaction_of_the_snapshot(tmp_path: Path) -> None:
    """The store's clock file deleted (an operator, a restore without it): the account starts again at 0, and a
    snapshot's store seconds from the old account, far past it, are taken as now: checked once their timeout
    passes, not when the new account reaches the old one."""
    snap = tmp_path / "state.snapshot"

    async def go() -> None:
        store, service = await open_service(tmp_path / "store", snap)
        advance(store, 5000)
        await half(service, 1)
        assert service.snapshot()
        await store.shutdown()
        (tmp_path / "store" / "clock").unlink()
        store, service = await open_service(tmp_path / "store", snap)
        checker = TransactionalMessageCheckService(service, check_max=5, check_interval_ms=500)
        checker.senders.append(sender := Sender())
        advance(store, 2.1)
        assert await checker.check_pass() == 1 and sender.sent
        await store.shutdown()

    asyncio.run(go())
