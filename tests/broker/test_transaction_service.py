"""The transaction service on a real store, in one process: races between a check pass and a decision, a
commit the store refuses, and recovery of resumed transactions."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.broker.tx_helpers import Sender, end, half, later, lose_op_records, open_service
from txmq.broker.transaction.check_service import TransactionalMessageCheckService
from txmq.broker.transaction.service import TransactionalMessageService
from txmq.broker.transaction.state import Outcome, TransactionStateTable
from txmq.broker.transaction.tracking import RECENT_HALF_OVERHEAD
from txmq.message import MessageConst, MessageExt
from txmq.remoting.codes import ResponseCode
from txmq.store import DefaultMessageStore, PutMessageResult, PutMessageStatus
from txmq.topic import RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC

pytestmark = pytest.mark.dated  # run again at a fixed month end by make test (Makefile, DATED_AT)


def test_commit_racing_a_discard_wins_and_resume_cannot_commit_twice(tmp_path):
    async def go() -> None:
        store, service = await open_service(tmp_path)
        checker = TransactionalMessageCheckService(service, check_max=1, check_interval_ms=500)
        checker.senders.append(Sender())
        off, clo = await half(service, 1)
        service.table.count_check(off)  # one check sent: the next pass discards it
        # The discard's first write and the producer's late COMMIT interleave.
        real_put = store.put_message

        async def slow_put(msg):
            if msg.topic == RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC:
                await asyncio.sleep(0.05)
            return await real_put(msg)
        store.put_message = slow_put  # type: ignore[method-assign]
        passing = asyncio.create_task(checker.check_pass(later(service, 10)))
        await asyncio.sleep(0.01)
        assert (await end(service, off, clo, Outcome.COMMIT)).code == ResponseCode.SUCCESS
        await passing
        assert service.table.outcome(off) == Outcome.COMMIT and off not in service.table.discarded
        assert await service.resume(off) is not None  # not discarded: nothing to resume
        assert store.get_max_offset_in_queue("orders", 0) == 1
        await store.shutdown()
        # After a restart the commit stands too (its op record came before the DISCARD one).
        store, service = await open_service(tmp_path)
        assert service.table.outcome(off) == Outcome.COMMIT and not service.table.discarded
        await store.shutdown()
    asyncio.run(go())


def test_a_commit_the_store_refuses_stays_pending_and_can_be_retried(tmp_path):
    async def go() -> None:
        store, service = await open_service(tmp_path)
        off, clo = await half(service, 1)
        service.table.count_check(off)
        real_put = store.put_messages

        async def refuse(msgs):  # a commit stores its real message with put_messages (a batch of one)
            return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, None)
        store.put_messages = refuse  # type: ignore[method-assign]
        assert (await end(service, off, clo, Outcome.COMMIT)).code == ResponseCode.SYSTEM_ERROR
        info = service.table.info(off)
        assert service.table.outcome(off) == Outcome.PENDING and info is not None and info.checks == 1
        store.put_messages = real_put  # type: ignore[method-assign]
        assert (await end(service, off, clo, Outcome.COMMIT)).code == ResponseCode.SUCCESS
        assert store.get_max_offset_in_queue("orders", 0) == 1
        assert service.table.outcome(off) == Outcome.COMMIT and len(service.table) == 0
        await store.shutdown()
    asyncio.run(go())


def test_a_resumed_transaction_is_checked_once_per_pass_after_recovery(tmp_path):
    async def go() -> None:
        store, service = await open_service(tmp_path)
        checker = TransactionalMessageCheckService(service, check_max=1, check_interval_ms=500)
        checker.senders.append(Sender())
        off, clo = await half(service, 1)
        assert await checker.check_pass(later(service, 5)) == 1
        assert await checker.check_pass(later(service, 10)) == 0  # discarded
        assert service.table.outcome(off) == Outcome.DISCARD and service.table.discarded == {off: 1}
        assert store.get_max_offset_in_queue(RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, 0) == 1
        assert await service.resume(off) is None
        await store.shutdown()

        store, service = await open_service(tmp_path)
        info = service.table.info(off)
        assert info is not None and info.checks == 0 and not service.table.discarded
        checker = TransactionalMessageCheckService(service, check_max=5, check_interval_ms=500)
        sender = Sender()
        checker.senders.append(sender)
        assert await checker.check_pass(later(service, 5)) == 1
        assert sender.sent == [off]
        assert (await end(service, off, clo, Outcome.ROLLBACK)).code == ResponseCode.SUCCESS
        assert (await end(service, off, clo, Outcome.COMMIT)).code == ResponseCode.TRANSACTION_SHOULD_ROLLBACK
        assert store.get_max_offset_in_queue("orders", 0) == 0
        await store.shutdown()
    asyncio.run(go())


async def _one_half_checked_every(tmp_path: Path, interval_ms: int) -> tuple[DefaultMessageStore,
                                                                              TransactionalMessageCheckService,
                                                                              Sender, int, int]:
    """A store with one half, a checker of ``interval_ms`` that records what it sends, and the half's first due
    second."""
    store, service = await open_service(tmp_path)
    checker = TransactionalMessageCheckService(service, check_max=5, check_interval_ms=interval_ms)
    sender = Sender()
    checker.senders.append(sender)
    off, _ = await half(service, 1)
    due = service.table.next_due_s()
    assert due is not None
    return store, checker, sender, off, due


def test_checks_follow_one_another_by_the_check_interval(tmp_path):
    """The run loop wakes a pass just after the second its transactions are due in; each is checked again one
    transactionCheckInterval later (RocketMQ's pace), not a second more; after a pass late in its second the next
    check comes no sooner than one interval."""
    async def go() -> None:
        store, checker, sender, off, due = await _one_half_checked_every(tmp_path, 30_000)
        assert await checker.check_pass(due + 0.001) == 1
        assert await checker.check_pass(due + 29.5) == 0
        assert await checker.check_pass(due + 30.001) == 1
        assert await checker.check_pass(due + 60.9) == 1  # late in its second
        assert await checker.check_pass(due + 90.001) == 0
        assert await checker.check_pass(due + 91.001) == 1
        assert sender.sent == [off, off, off, off]
        await store.shutdown()
    asyncio.run(go())


def test_an_interval_of_a_second_and_a_few_ms_is_rounded_up_to_two_seconds(tmp_path):
    """An interval just above whole seconds (1,049 ms) is rounded up to the wheel's next second, as the docs say:
    an on-time pass counted the ON_TIME_MS it forgives off the interval too, and checked every second, 49 ms
    sooner than the interval."""
    async def go() -> None:
        store, checker, sender, off, due = await _one_half_checked_every(tmp_path, 1_049)
        assert await checker.check_pass(due + 0.001) == 1
        assert await checker.check_pass(due + 1.001) == 0
        assert await checker.check_pass(due + 2.001) == 1
        assert sender.sent == [off, off]
        await store.shutdown()
    asyncio.run(go())


def test_a_commit_in_the_log_without_its_op_record_is_found_after_recovery(tmp_path):
    """The crash window between the real message and the op record: recovery finds the transaction pending,
    and the index check turns it into a commit instead of storing a second copy."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        off, clo = await half(service, 1)

        lose_op_records(store, service)
        assert (await end(service, off, clo, Outcome.COMMIT)).code == ResponseCode.SUCCESS
        await store.shutdown()

        store, service = await open_service(tmp_path)
        assert service.table.outcome(off) == Outcome.PENDING and off in service.table.recovered
        assert (await end(service, off, clo, Outcome.COMMIT)).code == ResponseCode.SUCCESS
        assert (await end(service, off, clo, Outcome.ROLLBACK)).code == ResponseCode.TRANSACTION_SHOULD_COMMIT
        assert store.get_max_offset_in_queue("orders", 0) == 1
        await store.shutdown()
        store, service = await open_service(tmp_path)  # and now the op record is there
        assert service.table.outcome(off) == Outcome.COMMIT
        await store.shutdown()
    asyncio.run(go())


def test_a_batch_of_halves_is_one_put_and_each_half_is_tracked_across_a_restart(tmp_path):
    async def go() -> None:
        store, service = await open_service(tmp_path)
        await half(service, 0)
        msgs = [MessageExt("orders", f"b{i}".encode(), {MessageConst.TRANSACTION_PREPARED: "true",
                                                         MessageConst.PRODUCER_GROUP: "g",
                                                         MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"B{i:031d}"},
                           queue_id=i % 2) for i in range(5)]
        puts = store.runtime_info()["put_calls"]
        result = await service.prepare_messages(msgs)
        assert result.status == PutMessageStatus.PUT_OK and result.append_result is not None
        assert result.append_result.logics_offset == 1
        assert [m.queue_offset for m in msgs] == [1, 2, 3, 4, 5]  # consecutive half offsets
        assert [(m.topic, m.queue_id) for m in msgs] == [("orders", i % 2) for i in range(5)]  # the caller's view
        assert all(service.table.outcome(m.queue_offset) == Outcome.PENDING for m in msgs)
        assert store.get_max_offset_in_queue("orders", 0) == 0  # nothing visible
        assert store.runtime_info()["put_calls"] == puts + 1
        await store.shutdown()

        store, service = await open_service(tmp_path)
        assert sorted(service.table.pending) == [0, 1, 2, 3, 4, 5]
        assert (await end(service, 4, msgs[3].commit_log_offset, Outcome.COMMIT)).code == ResponseCode.SUCCESS
        assert store.get_max_offset_in_queue("orders", 1) == 1  # b3 in its real queue
        await store.shutdown()

    asyncio.run(go())


def test_a_stored_half_is_tracked_and_remembered_as_track_andfirst_check_s_would(tmp_path):
    """``_track_stored`` writes ``_track``, ``first_check_s`` and remembering out in one call, reading the immunity
    only when a half carries one: the same pending entries and check seconds, with no immunity, a longer one, one
    beyond the orphan bound and an unreadable one, and every half remembered."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        immunity = MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS
        props = {MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: "g"}
        msgs = [MessageExt("orders", b"x", {**props, **extra}, queue_id=n) for n, extra in enumerate(
            ({}, {immunity: "40"}, {immunity: str(10**9)}, {immunity: "soon"}, {immunity: ""}))]
        assert (await service.prepare_messages(msgs)).stored
        halves = [service._recent_halves[m.commit_log_offset][0] for m in msgs]
        assert [h.queue_offset for h in halves] == [m.queue_offset for m in msgs]
        tracked, service.table = service.table, TransactionStateTable()
        for h in halves:
            service._track(h.queue_offset, h, service.first_check_s(h))
        assert tracked.pending == service.table.pending and len(tracked.pending) == len(msgs)
        assert {s: list(b) for s, b in tracked._wheel.items()} == {s: list(b) for s, b in service.table._wheel.items()}
        assert len(tracked._wheel) == 3  # the usual timeout, 40 s, and the orphan bound
        await store.shutdown()
    asyncio.run(go())


def test_a_decision_uses_the_remembered_half_and_falls_back_to_the_store(tmp_path):
    async def go() -> None:
        store, service = await open_service(tmp_path)
        service.recent_halves_max_bytes = 2 * (2 + RECENT_HALF_OVERHEAD)  # room for two halves of 2-byte bodies
        refs = [await half(service, n) for n in range(1, 4)]  # the first is pushed out by the third
        reads: list[int] = []
        real_look = store.look_message_by_offset

        def counting_look(offset: int):
            reads.append(offset)
            return real_look(offset)
        store.look_message_by_offset = counting_look  # type: ignore[method-assign]
        for off, clo in refs:
            assert (await end(service, off, clo, Outcome.COMMIT)).code == ResponseCode.SUCCESS
        assert reads == [refs[0][1]]  # only the forgotten one was read back
        assert store.get_max_offset_in_queue("orders", 0) == 3
        # A repeat finds nothing remembered (taken by the decision) and answers from the table.
        assert (await end(service, *refs[1], Outcome.COMMIT)).code == ResponseCode.SUCCESS
        assert reads == [refs[0][1], refs[1][1]] and store.get_max_offset_in_queue("orders", 0) == 3
        await store.shutdown()

    asyncio.run(go())


def test_a_half_stored_with_a_late_flush_is_tracked(tmp_path):
    """FLUSH_DISK_TIMEOUT: the half is in the log and the producer is told where; it must be checked back like
    any other, not only after a restart."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        real_put = store.put_messages

        def late_flush(msgs: list[MessageExt], answer: Callable[[PutMessageResult], Any] | None = None,
                       waiter: Any = None) -> Any:
            def late(result: PutMessageResult) -> Any:
                late_result = PutMessageResult(PutMessageStatus.FLUSH_DISK_TIMEOUT, result.append_result)
                return late_result if answer is None else answer(late_result)
            return real_put(msgs, late, waiter)
        store.put_messages = late_flush  # type: ignore[method-assign]
        msgs = [MessageExt("orders", f"late{i}".encode(), {MessageConst.TRANSACTION_PREPARED: "true",
                                                          MessageConst.PRODUCER_GROUP: "g"}) for i in range(3)]
        result = await service.prepare_messages(msgs)
        assert result.status == PutMessageStatus.FLUSH_DISK_TIMEOUT and result.stored
        assert len(service.table) == 3
        assert all(service.table.info(m.queue_offset) is not None for m in msgs)
        await store.shutdown()
    asyncio.run(go())


def test_a_half_whose_sender_is_gone_is_tracked_as_stored(tmp_path):
    """A half put whose waiter was cancelled (a gRPC send whose client went away, a closed connection) is still
    written: the table must track it as the log has it, else it is never checked, and a restart's replay brings
    it back pending, to be committed by a check after the producer's retry committed its copy."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        msgs = [MessageExt("orders", b"gone", {MessageConst.TRANSACTION_PREPARED: "true",
                                               MessageConst.PRODUCER_GROUP: "g"})]
        fut = service.prepare_messages(msgs)
        fut.cancel()
        await half(service, 1)  # a later half: the cancelled one's group is written and answered by then
        assert store.get_max_offset_in_queue("RMQ_SYS_TRANS_HALF_TOPIC", 0) == 2
        assert service.table.info(0) is not None and sorted(service.table.pending) == [0, 1]
        await store.shutdown()
    asyncio.run(go())


def test_names_of_ended_transactions_are_dropped_and_a_pending_one_keeps_its_group(tmp_path):
    """Producers name their groups: halves under made-up group names, each ended, leave no name behind once the
    list is rebuilt (it was kept for the broker's life); a transaction pending across the rebuilds is still
    checked with its own group and commits."""
    class ByGroup:
        def __init__(self) -> None:
            self.asked: list[tuple[str, int]] = []

        def send_check(self, group: str, half: MessageExt, half_offset: int) -> bool:
            self.asked.append((group, half_offset))
            return True

    async def go() -> None:
        store, service = await open_service(tmp_path)
        service.table.COMPACT_AT_NAMES = service.table._compact_at = 8
        kept_off, kept_clo = await half(service, 0, group="kept-group")
        for n in range(1, 40):
            off, clo = await half(service, n, group=f"made-up-{n}")
            outcome = Outcome.COMMIT if n % 2 else Outcome.ROLLBACK
            assert (await end(service, off, clo, outcome, group=f"made-up-{n}")).code == ResponseCode.SUCCESS
        assert len(service.table.names) < 16, service.table.names  # not the 41 names seen
        info = service.table.info(kept_off)
        assert info is not None and (info.topic, info.group) == ("orders", "kept-group")
        checker = TransactionalMessageCheckService(service, check_max=5, check_interval_ms=500)
        sender = ByGroup()
        checker.senders.append(sender)
        assert await checker.check_pass(later(service, 5)) == 1 and sender.asked == [("kept-group", kept_off)]
        assert (await end(service, kept_off, kept_clo, Outcome.COMMIT, group="kept-group")).code == \
            ResponseCode.SUCCESS
        assert store.get_max_offset_in_queue("orders", 0) == 1 + 20  # the kept one and the 20 odd ones
        assert not service.table.pending and not service.table.pending_per_topic
        await store.shutdown()

    asyncio.run(go())


def test_a_slave_following_ended_transactions_drops_their_names(tmp_path):
    """A slave's table follows the master's half and op records (``follow``) and never writes a decision: its
    name list is rebuilt too (it kept every made-up group's name until promoted), and a transaction pending
    across the rebuilds keeps its topic and group for a promotion."""
    async def go() -> None:
        store, master = await open_service(tmp_path)
        slave = TransactionalMessageService(store, transaction_timeout_ms=1000, file_reserved_time_h=72)
        slave.table.COMPACT_AT_NAMES = slave.table._compact_at = 8
        store.add_dispatcher(slave.follow)  # every record the master stores, as replication would bring it
        kept_off, _ = await half(master, 0, group="kept-group")
        for n in range(1, 40):
            off, clo = await half(master, n, group=f"made-up-{n}")
            assert (await end(master, off, clo, Outcome.ROLLBACK, group=f"made-up-{n}")).code == ResponseCode.SUCCESS
        assert store.get_max_offset_in_queue(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0) > 0  # the slave saw op records
        assert sorted(slave.table.pending) == [kept_off]
        assert len(slave.table.names) < 16, slave.table.names  # not the 41 names seen
        info = slave.table.info(kept_off)
        assert info is not None and (info.topic, info.group) == ("orders", "kept-group")
        assert dict(slave.table.pending_per_topic) == {"orders": 1}
        await store.shutdown()

    asyncio.run(go())


def test_names_are_dropped_while_decisions_keep_overlapping(tmp_path):
    """Under steady traffic each decision's write starts before the previous one's ends, so a moment with no
    decision being written may never come: the name list must still be rebuilt while they go on."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        service.table.COMPACT_AT_NAMES = service.table._compact_at = 8
        real_put = store.put_messages

        async def slow_put(msgs, *args):  # a decision's write outlasts the next half's
            await asyncio.sleep(0.03 if msgs[0].topic != RMQ_SYS_TRANS_HALF_TOPIC else 0.02)
            return await real_put(msgs, *args)
        store.put_messages = slow_put  # type: ignore[method-assign]
        deciding, seen = [], []
        for n in range(24):
            off, clo = await half(service, n, group=f"made-up-{n}")
            seen.append(len(service.table.names))
            deciding.append(asyncio.ensure_future(end(service, off, clo, Outcome.ROLLBACK, group=f"made-up-{n}")))
        assert all(r.code == ResponseCode.SUCCESS for r in await asyncio.gather(*deciding))
        assert not service.table.pending
        assert max(seen) < 16, seen  # each half's name goes once it is decided, not at the first pause (25 kept)
        await store.shutdown()

    asyncio.run(go())


async def _rollback_refused_while(store: Any, service: Any, kept: tuple[int, int],
                                  meanwhile: Callable[[], Awaitable[None]]) -> None:
    """The kept transaction's ROLLBACK, its op record held 50 ms while ``meanwhile`` runs and then refused: it is
    pending again with its own topic, group and check count, and commits."""
    kept_off, kept_clo = kept
    real_put = store.put_messages

    async def slow_refusal(msgs, *args):
        if any(m.topic == RMQ_SYS_TRANS_OP_HALF_TOPIC and m.body == str(kept_off).encode() for m in msgs):
            await asyncio.sleep(0.05)
            return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, None)
        return await real_put(msgs, *args)
    store.put_messages = slow_refusal
    refused = asyncio.ensure_future(end(service, kept_off, kept_clo, Outcome.ROLLBACK, group="kept-group"))
    await asyncio.sleep(0.01)
    await meanwhile()
    assert (await refused).code == ResponseCode.SYSTEM_ERROR
    info = service.table.info(kept_off)
    assert info is not None and (info.topic, info.group, info.checks) == ("orders", "kept-group", 1)
    assert dict(service.table.pending_per_topic) == {"orders": 1}
    store.put_messages = real_put
    assert (await end(service, kept_off, kept_clo, Outcome.COMMIT, group="kept-group")).code == ResponseCode.SUCCESS
    assert not service.table.pending


def test_a_refused_rollback_goes_back_to_its_names_after_a_rebuild_during_its_write(tmp_path):
    """The list is rebuilt while a ROLLBACK's op record is being written: refused, the transaction is pending
    again with its own topic, group and checks (its kept entry renumbered with the list), and commits."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        service.table.COMPACT_AT_NAMES = service.table._compact_at = 8
        ended = [await half(service, n, group=f"made-up-{n}") for n in range(1, 12)]
        kept = await half(service, 0, prefix="K", group="kept-group")
        service.table.count_check(kept[0])

        async def end_the_others() -> None:
            for n, (off, clo) in enumerate(ended, 1):
                assert (await end(service, off, clo, Outcome.COMMIT, group=f"made-up-{n}")).code == \
                    ResponseCode.SUCCESS
            assert "made-up-1" not in service.table.names  # rebuilt while the ROLLBACK was written
        await _rollback_refused_while(store, service, kept, end_the_others)
        assert store.get_max_offset_in_queue("orders", 0) == 12
        await store.shutdown()

    asyncio.run(go())


def test_a_refused_rollback_goes_back_to_its_names_after_the_table_is_rebuilt_during_its_write(tmp_path):
    """The table is rebuilt from the snapshot and the log (``rebuild``: a truncated log under it) while a
    ROLLBACK's op record is being written: the new table numbers its names anew, and the refused decision goes
    back to its entry renumbered for it, not to indexes of the old list."""
    async def go() -> None:
        store, service = await open_service(tmp_path, snapshot_path=tmp_path / "tx.snapshot")
        for n in range(1, 6):
            off, clo = await half(service, n, group=f"made-up-{n}")
            assert (await end(service, off, clo, Outcome.COMMIT, group=f"made-up-{n}")).code == ResponseCode.SUCCESS
        kept = await half(service, 0, prefix="K", group="kept-group")
        service.table.count_check(kept[0])
        assert service.snapshot()  # it holds only the pending one's names: a rebuilt table numbers them anew

        async def rebuild() -> None:
            service.rebuild()
        await _rollback_refused_while(store, service, kept, rebuild)
        assert store.get_max_offset_in_queue("orders", 0) == 6
        await store.shutdown()

    asyncio.run(go())


def test_commit_latency_counts_from_the_half_s_store_time_whether_remembered_or_read_back(tmp_path):
    """A commit's latency is the elapsed-time account from its half's storing to the commit stored: the same for a
    half remembered since (its store time kept with it) and for one read back from the log, and never what the
    wall clock says."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        mono, wall = store.clock.monotonic_ns(), store.clock.wall_ns()
        store.clock.monotonic_ns = lambda: mono  # the account moves only when this test moves it
        store.clock.wall_ns = lambda: wall
        remembered = await half(service, 1)
        forgotten = await half(service, 2)
        service._forget_recent_halves()  # the second is read back from the log at its decision
        remembered_again = await half(service, 3)
        mono += 2_000_000_000  # two seconds by the account
        store.clock.wall_ns = lambda: 0  # the wall clock jumps back decades: no latency may follow it
        for off, clo in (remembered, forgotten, remembered_again):
            assert (await end(service, off, clo, Outcome.COMMIT)).code == ResponseCode.SUCCESS
        m = service.metrics
        # Within 1 ms of the two seconds: the account counts whole ms, and the wall and monotonic readings that
        # anchor it at open are each truncated to the ms, so a store time read back can sit 1 ms off the account.
        assert all(1999 <= ms <= 2001 for ms in m.commit_latency_ms) and len(m.commit_latency_ms) == 3
        group = m.groups["g"]
        assert group.commits == 3 and abs(group.latency_sum_ms - 6000) <= 3
        assert sum(group.latency_buckets) == 3 and group.latency_buckets[8] == 3  # the 2,500 ms bucket
        await store.shutdown()
    asyncio.run(go())
