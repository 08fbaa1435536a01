"""A half's CHECK_IMMUNITY_TIME_IN_SECONDS (its producer asks not to be checked back before then) holds after a
restart and a failover, not only while the broker runs: the wheel entries restored from the transaction snapshot
and those a slave takes over count transactionTimeOut, and the check pass reads the immunity from the half, as
RocketMQ's check does (a checker answering ROLLBACK for a local transaction it cannot see yet would lose it)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.broker.tx_helpers import Sender, open_service
from tests.elapsed import advance
from txmq.broker.transaction.check_service import TransactionalMessageCheckService
from txmq.message import MessageConst, MessageExt

pytestmark = pytest.mark.dated


def _immune_half() -> MessageExt:
    return MessageExt("orders", b"x", {MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: "g",
                                       MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS: "60",
                                       MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "I" + "0" * 31},
                      born_timestamp=int(time.time() * 1000), born_host=("127.0.0.1", 1))


async def _checked_after_a_restart(tmp_path: Path, with_snapshot: bool) -> tuple[list[int], list[int]]:
    """Checks sent 5 s after the half was stored (beyond transactionTimeOut, within the 60 s asked for), and 61 s
    after."""
    snap = tmp_path / "state.snapshot"
    store, service = await open_service(tmp_path / "store", snap)  # transactionTimeOut 1 s
    assert (await service.prepare_message(_immune_half())).stored
    if with_snapshot:
        assert service.snapshot()
    await store.shutdown()
    store, service = await open_service(tmp_path / "store", snap)  # restarted
    checker = TransactionalMessageCheckService(service, check_max=5, check_interval_ms=500)
    checker.senders.append(sender := Sender())
    try:
        advance(store, 5)
        await checker.check_pass()
        early = list(sender.sent)
        advance(store, 56)
        await checker.check_pass()
        return early, sender.sent
    finally:
        await store.shutdown()


@pytest.mark.parametrize("with_snapshot", [False, True])
def test_the_immunity_holds_after_a_restart(tmp_path: Path, with_snapshot: bool) -> None:
    early, later = asyncio.run(_checked_after_a_restart(tmp_path, with_snapshot))
    assert early == []
    assert len(later) == 1  # checked once it is over


def test_the_immunity_holds_after_a_failover(tmp_path: Path) -> None:
    """A slave made master (``take_over``) schedules each pending transaction by transactionTimeOut."""

    async def go() -> list[int]:
        mstore, master = await open_service(tmp_path / "m")
        sstore, slave = await open_service(tmp_path / "s")
        sstore.replica = True
        sstore.add_dispatcher(slave.follow)
        try:
            assert (await master.prepare_message(_immune_half())).stored
            assert sstore.append_replicated(0, mstore.commit_log.read_raw(0, mstore.max_phy_offset)) > 0
            sstore.replica = False
            slave.take_over()
            checker = TransactionalMessageCheckService(slave, check_max=5, check_interval_ms=500)
            checker.senders.append(sender := Sender())
            advance(sstore, 5)
            await checker.check_pass()
            assert sender.sent == []
            advance(sstore, 56)
            await checker.check_pass()
            return sender.sent
        finally:
            await mstore.shutdown()
            await sstore.shutdown()

    assert len(asyncio.run(go())) == 1


def test_a_commit_cut_by_a_crash_is_finished_at_its_first_check_whatever_its_immunity(tmp_path: Path) -> None:
    """A half batch asking 60 s of immunity is committed, and the broker crashes with 2 of its 5 messages stored.
    The check pass past transactionTimeOut finishes such a commit (the other 3 stored, the transaction committed),
    which asks nothing of the producer: the immunity is about check-backs. Read from the half before that, it held
    the rest of a committed batch back for the whole immunity (up to the orphan bound: hours)."""
    from tests.broker.test_half_batch import bodies, rows
    from tests.broker.test_transaction_batch import stored
    from txmq.broker.transaction.half import real_messages
    from txmq.broker.transaction.state import Outcome
    from txmq.message import encode_batch

    async def go() -> tuple[list[str], Outcome | None, list[int]]:
        store, service = await open_service(tmp_path)
        half = MessageExt("orders", encode_batch(rows("a", 5)), {
            MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: "g",
            MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS: "60",
            MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "T" + "a" * 30},
            queue_id=1, born_timestamp=int(time.time() * 1000), born_host=("127.0.0.1", 1))
        r = await service.prepare_half_batch(half, 5)
        assert r.append_result is not None
        cut = (r.append_result.logics_offset, r.append_result.wrote_offset)
        taken = service._taken_half(cut[1])[0]
        await store.put_messages(real_messages(taken, *cut)[:2])  # the commit, cut by the crash
        store.commit_log.flush()
        store.close_without_shutdown()

        store, service = await open_service(tmp_path)
        assert cut[0] in service.table.recovered
        checker = TransactionalMessageCheckService(service, check_max=5, check_interval_ms=500)
        checker.senders.append(sender := Sender())
        try:
            advance(store, 5)
            await checker.check_pass()
            return stored(store), service.table.outcome(cut[0]), list(sender.sent)
        finally:
            await store.shutdown()

    visible, outcome, checked = asyncio.run(go())
    assert (visible, outcome, checked) == (bodies("a", 5), Outcome.COMMIT, [])
