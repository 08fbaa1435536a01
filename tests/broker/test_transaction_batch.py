"""``TransactionalMessageService.end_transactions`` on a real store: per-entry answers, one put and one op record
per outcome, a refused put, races with single decisions, and crashes."""

from __future__ import annotations

import asyncio

import pytest

from tests.broker.tx_helpers import end, half, lose_op_records, open_service
from txmq.broker.processor.end_transaction import _EndAnswer, _log_refusal
from txmq.broker.transaction.service import OP_PROPERTY, EndEntry, EndResult, TransactionalMessageService
from txmq.broker.transaction.state import Outcome, TransactionStateTable
from txmq.errors import StoreError
from txmq.message import MessageConst, MessageExt, decode_message
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.store import DefaultMessageStore, GetMessageStatus, PutMessageResult, PutMessageStatus
from txmq.topic import RMQ_SYS_TRANS_OP_HALF_TOPIC

COMMIT, ROLLBACK = Outcome.COMMIT, Outcome.ROLLBACK
OK, SHOULD_COMMIT, SHOULD_ROLLBACK = (ResponseCode.SUCCESS, ResponseCode.TRANSACTION_SHOULD_COMMIT,
                                      ResponseCode.TRANSACTION_SHOULD_ROLLBACK)


async def halves(service: TransactionalMessageService, count: int) -> list[tuple[int, int]]:
    return [await half(service, n, "B", queue_id=n % 2) for n in range(count)]


def batch(service: TransactionalMessageService, decisions: list[tuple[tuple[int, int], Outcome]],
          group: str = "g") -> asyncio.Future[list]:
    entries: list[EndEntry] = [(off, clo, outcome) for (off, clo), outcome in decisions]
    return asyncio.ensure_future(service.end_transactions(group, entries, "test"))


def stored(store: DefaultMessageStore, topic: str = "orders") -> list[str]:
    """Bodies of every message in ``topic`` queues 0 and 1."""
    out = []
    for qid in (0, 1):
        got = store.get_message(topic, qid, 0, 1000, 64 * 1024 * 1024)
        if got.status == GetMessageStatus.FOUND:
            out += [decode_message(raw)[0].body.decode() for raw in got.messages]
    return sorted(out)


def op_records(store: DefaultMessageStore) -> list[tuple[str, list[int]]]:
    got = store.get_message(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0, 0, 1000, 64 * 1024 * 1024)
    if got.status != GetMessageStatus.FOUND:
        return []
    ops = [decode_message(raw)[0] for raw in got.messages]
    return [(op.properties[OP_PROPERTY], [int(x) for x in op.body.decode().split(",")]) for op in ops]


def count_puts(store: DefaultMessageStore) -> list[list[str]]:
    """Record the topics of every put_messages call from now on."""
    calls: list[list[str]] = []
    real = store.put_messages

    async def counted(msgs: list[MessageExt]) -> PutMessageResult:
        calls.append([m.topic for m in msgs])
        return await real(msgs)
    store.put_messages = counted  # type: ignore[method-assign]
    return calls


def test_a_mixed_batch_answers_each_entry_and_stores_once(tmp_path):
    async def go() -> None:
        store, service = await open_service(tmp_path)
        tx = await halves(service, 7)
        assert (await end(service, *tx[4], COMMIT)).code == OK
        assert (await end(service, *tx[5], ROLLBACK)).code == OK
        calls = count_puts(store)
        ops_before = len(op_records(store))
        results = await batch(service, [
            (tx[0], COMMIT), (tx[1], COMMIT), (tx[2], ROLLBACK),
            (tx[0], COMMIT),  # the same transaction twice in one batch: a repeat
            (tx[1], ROLLBACK),  # and the reverse of an earlier entry: refused
            (tx[4], COMMIT),  # committed before: a repeat
            (tx[4], ROLLBACK), (tx[5], COMMIT),  # conflicts with earlier decisions
            ((tx[3][0], tx[6][1]), COMMIT),  # invalid: another half message's commit-log offset
            ((tx[3][0], tx[3][1] + 1), COMMIT),  # invalid: no message at that commit-log offset
            (tx[6], ROLLBACK),
        ])
        codes = [r.code for r in results]
        assert codes == [OK, OK, OK, OK, SHOULD_COMMIT, OK, SHOULD_COMMIT, SHOULD_ROLLBACK,
                         ResponseCode.SYSTEM_ERROR, ResponseCode.SYSTEM_ERROR, OK]
        assert "already committed" in results[3].remark and "offset wrong" in results[8].remark
        assert "Find prepared transaction message failed" in results[9].remark
        assert stored(store) == ["m0", "m1", "m4"]
        # One put: the two real messages, then one op record per outcome.
        assert calls == [["orders", "orders", RMQ_SYS_TRANS_OP_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC]]
        assert op_records(store)[ops_before:] == [("COMMIT", [tx[0][0], tx[1][0]]),
                                                  ("ROLLBACK", [tx[2][0], tx[6][0]])]
        assert [service.table.outcome(off) for off, _ in tx] == [COMMIT, COMMIT, ROLLBACK, Outcome.PENDING, COMMIT,
                                                                 ROLLBACK, ROLLBACK]
        m = service.metrics
        assert (m.commits, m.rollbacks, m.duplicates, m.conflicts) == (3, 3, 2, 3)
        assert len(m.commit_latency_ms) == 3
        assert not service._in_flight and not service._committing
        # The real messages carry their transaction, as single commits do.
        got = store.get_message("orders", 1, 0, 10)
        real = decode_message(got.messages[0])[0]
        assert real.prepared_transaction_offset == tx[1][1]
        assert real.properties[MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET] == str(tx[1][0])
        await store.shutdown()
    asyncio.run(go())


def test_a_batch_of_another_group_is_refused_entry_by_entry(tmp_path):
    async def go() -> None:
        store, service = await open_service(tmp_path)
        tx = await halves(service, 2)
        results = await batch(service, [(tx[0], COMMIT), (tx[1], ROLLBACK)], group="other")
        assert [r.code for r in results] == [ResponseCode.SYSTEM_ERROR] * 2
        assert stored(store) == [] and len(service.table) == 2
        await store.shutdown()
    asyncio.run(go())


@pytest.mark.parametrize("how", ["refused", "raises"])
def test_a_batch_whose_put_fails_leaves_its_commits_pending(tmp_path, how):
    async def go() -> None:
        store, service = await open_service(tmp_path)
        tx = await halves(service, 4)
        service.table.count_check(tx[1][0])
        real_put = store.put_messages
        snapshots: list[bytes] = []

        async def failing(msgs: list[MessageExt]) -> PutMessageResult:
            if msgs[0].topic != "orders":
                return await real_put(msgs)
            # While the put is under way, a snapshot shows the batch's commits as they were.
            snapshots.append(service.table.to_snapshot(0, 0, service._committing))
            assert set(service._committing) == {tx[0][0], tx[1][0], tx[2][0]}
            if how == "raises":
                raise OSError("disk gone")
            return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, None)
        store.put_messages = failing  # type: ignore[method-assign]
        decisions = [(tx[0], COMMIT), (tx[1], COMMIT), (tx[2], COMMIT), (tx[3], ROLLBACK)]
        # A put that raises is answered as a refused one: each commit undone with the error, the rollback stands.
        results = await batch(service, decisions)
        assert [r.code for r in results] == [ResponseCode.SYSTEM_ERROR] * 3 + [OK]
        assert ("disk gone" if how == "raises" else "CREATE_MAPPED_FILE_FAILED") in results[0].remark
        assert service.table.outcome(tx[3][0]) == ROLLBACK
        for off, _ in tx[:3]:
            assert service.table.outcome(off) == Outcome.PENDING and service.table.info(off) is not None
        assert service.table.info(tx[1][0]).checks == 1  # as it was, checks included
        assert not service._in_flight and not service._committing
        assert service.metrics.commits == 0
        snap, _, _ = TransactionStateTable.from_snapshot(snapshots[0], lambda s: s, int)
        assert [snap.outcome(off) for off, _ in tx[:3]] == [Outcome.PENDING] * 3
        # Retried once the store is back: each committed once.
        store.put_messages = real_put  # type: ignore[method-assign]
        codes = [r.code for r in await batch(service, decisions[:3])]
        assert codes == [OK, OK, OK]
        assert stored(store) == ["m0", "m1", "m2"]
        await store.shutdown()
    asyncio.run(go())


def test_a_batch_racing_a_single_commit_stores_one_message(tmp_path):
    async def go() -> None:
        store, service = await open_service(tmp_path)
        tx = await halves(service, 3)
        real_put = store.put_messages

        async def slow(msgs: list[MessageExt]) -> PutMessageResult:
            if msgs[0].topic == "orders":
                await asyncio.sleep(0.05)
            return await real_put(msgs)
        store.put_messages = slow  # type: ignore[method-assign]

        def single(t: tuple[int, int], outcome: Outcome):
            return asyncio.ensure_future(end(service, *t, outcome))
        # The batch first, the single COMMIT while the batch's put is under way ...
        running = batch(service, [(tx[0], COMMIT), (tx[1], COMMIT)])
        await asyncio.sleep(0.01)
        one = single(tx[0], COMMIT)
        other = single(tx[1], ROLLBACK)
        assert [r.code for r in await running] == [OK, OK]
        assert (await one).code == OK and (await other).code == SHOULD_COMMIT
        # ... and the single COMMIT first, a batch with it while its put is under way.
        one = single(tx[2], COMMIT)
        await asyncio.sleep(0.01)
        again = batch(service, [(tx[2], COMMIT), (tx[2], ROLLBACK), (tx[0], COMMIT)])
        assert (await one).code == OK
        assert [r.code for r in await again] == [OK, SHOULD_COMMIT, OK]
        assert stored(store) == ["m0", "m1", "m2"]
        assert service.metrics.commits == 3
        await store.shutdown()
    asyncio.run(go())


def test_two_batches_waiting_for_each_other_do_not_deadlock(tmp_path):
    async def go() -> None:
        store, service = await open_service(tmp_path)
        tx = await halves(service, 2)
        a = batch(service, [(tx[0], COMMIT), (tx[1], COMMIT)])
        b = batch(service, [(tx[1], COMMIT), (tx[0], COMMIT)])
        results = await asyncio.wait_for(asyncio.gather(a, b), 5)
        assert [[r.code for r in rs] for rs in results] == [[OK, OK], [OK, OK]]
        assert stored(store) == ["m0", "m1"]
        await store.shutdown()
    asyncio.run(go())


def test_outcomes_of_a_batch_stand_after_a_crash(tmp_path):
    async def go() -> None:
        store, service = await open_service(tmp_path)
        tx = await halves(service, 4)
        decisions = [(tx[0], COMMIT), (tx[1], COMMIT), (tx[2], ROLLBACK)]
        assert [r.code for r in await batch(service, decisions)] == [OK, OK, OK]
        store.close_without_shutdown()

        store, service = await open_service(tmp_path)
        assert [service.table.outcome(off) for off, _ in tx] == [COMMIT, COMMIT, ROLLBACK, Outcome.PENDING]
        # The producer replays its batch (it never saw the answer): nothing new is stored.
        assert [r.code for r in await batch(service, [*decisions, (tx[2], COMMIT)])] == [OK, OK, OK, SHOULD_ROLLBACK]
        assert stored(store) == ["m0", "m1"]
        await store.shutdown()
    asyncio.run(go())


def test_a_batch_cut_between_its_real_messages_and_its_op_record(tmp_path):
    """The crash window, with a snapshot taken while the batch's put was under way: recovery finds the
    transactions pending, and a replayed batch finds their real messages through the index."""
    snap = tmp_path / "state.snapshot"

    async def go() -> None:
        store, service = await open_service(tmp_path / "store", snap)
        tx = await halves(service, 3)
        lose_op_records(store, service)
        real_put = store.put_messages

        async def snapshot_first(msgs: list[MessageExt]) -> PutMessageResult:
            if msgs[0].topic == "orders":
                assert service.snapshot()
            return await real_put(msgs)
        store.put_messages = snapshot_first  # type: ignore[method-assign]
        assert [r.code for r in await batch(service, [(tx[0], COMMIT), (tx[1], COMMIT)])] == [OK, OK]
        store.commit_log.flush()
        store.close_without_shutdown()

        store, service = await open_service(tmp_path / "store", snap)
        assert [service.table.outcome(off) for off, _ in tx] == [Outcome.PENDING] * 3
        assert {tx[0][0], tx[1][0]} <= service.table.recovered
        results = await batch(service, [(tx[0], COMMIT), (tx[1], ROLLBACK), (tx[2], COMMIT)])
        assert [r.code for r in results] == [OK, SHOULD_COMMIT, OK]
        assert stored(store) == ["m0", "m1", "m2"]
        assert op_records(store)[-1] == ("COMMIT", [tx[0][0], tx[1][0], tx[2][0]])  # the missing ones included
        store.close_without_shutdown()

        store, service = await open_service(tmp_path / "store", snap)
        assert [service.table.outcome(off) for off, _ in tx] == [COMMIT] * 3
        assert [r.code for r in await batch(service, [(t, COMMIT) for t in tx])] == [OK] * 3
        assert stored(store) == ["m0", "m1", "m2"]
        await store.shutdown()
    asyncio.run(go())


def test_an_oversized_commit_fails_alone_in_the_put_it_shares_with_op_records(tmp_path):
    """Decisions that arrive together store their real messages and op records in one put; a put is all or nothing,
    so when the store refuses it (one real message over maxMessageSize), each commit is stored alone: the
    neighbours commit, the oversized one is answered with the refusal and stays pending, the rollback stands, and
    the op records name only what was stored."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        tx = await halves(service, 3)
        r = await service.prepare_message(MessageExt(
            "orders", b"B" * 2000, {MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: "g",
                                    MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "BIG"}))
        assert r.stored and r.append_result is not None
        oversized = (r.append_result.logics_offset, r.append_result.wrote_offset)
        store.config.max_message_size = 1000  # the small ones fit, the big one no longer does
        calls = count_puts(store)
        ops_before = len(op_records(store))
        results = await batch(service, [(tx[0], COMMIT), (oversized, COMMIT), (tx[1], ROLLBACK), (tx[2], COMMIT)])
        assert [r.code for r in results] == [OK, ResponseCode.SYSTEM_ERROR, OK, OK]
        assert "MESSAGE_ILLEGAL" in results[1].remark
        real, op = "orders", RMQ_SYS_TRANS_OP_HALF_TOPIC
        assert calls == [[real, real, real, op, op],  # together: refused whole
                         [real, real, real],  # the commits' slice: refused whole too
                         [real], [real], [real],  # each alone
                         [op, op]]  # the outcomes of what was stored
        assert stored(store) == ["m0", "m2"]
        assert op_records(store)[ops_before:] == [("COMMIT", [tx[0][0], tx[2][0]]), ("ROLLBACK", [tx[1][0]])]
        assert service.table.outcome(oversized[0]) == Outcome.PENDING and service.table.info(oversized[0])
        assert not service._in_flight and not service._committing
        store.config.max_message_size = 4096  # once it fits, the retried commit is stored
        assert (await end(service, *oversized, COMMIT)).code == OK
        assert len(stored(store)) == 3
        await store.shutdown()
    asyncio.run(go())


def test_a_late_flush_of_the_shared_put_answers_each_decision_and_keeps_it(tmp_path):
    """FLUSH_DISK_TIMEOUT for the one put of real messages and op records: it stored them (the flush is late, not
    failed), so the commits stand and answer FLUSH_DISK_TIMEOUT, the rollback stands, and nothing is put again."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        tx = await halves(service, 3)
        calls = count_puts(store)
        counted_put = store.put_messages

        async def late_flush(msgs: list[MessageExt]) -> PutMessageResult:
            result = await counted_put(msgs)
            return PutMessageResult(PutMessageStatus.FLUSH_DISK_TIMEOUT, result.append_result)
        store.put_messages = late_flush  # type: ignore[method-assign]
        results = await batch(service, [(tx[0], COMMIT), (tx[1], ROLLBACK), (tx[2], COMMIT)])
        assert [r.code for r in results] == [ResponseCode.FLUSH_DISK_TIMEOUT, OK, ResponseCode.FLUSH_DISK_TIMEOUT]
        assert len(calls) == 1 and stored(store) == ["m0", "m2"]
        assert [service.table.outcome(off) for off, _ in tx] == [COMMIT, ROLLBACK, COMMIT]
        assert op_records(store)[-2:] == [("COMMIT", [tx[0][0], tx[2][0]]), ("ROLLBACK", [tx[1][0]])]
        await store.shutdown()
    asyncio.run(go())


@pytest.mark.parametrize("torn", [1, 2], ids=["in-the-second-real-message", "in-the-commit-op-record"])
def test_a_shared_put_torn_inside_a_record_by_a_crash(tmp_path, torn):
    """The one put of two commits' real messages and the op records, cut by a crash inside one of its records
    (the log ends mid-record): recovery keeps the whole records before it, finds every transaction pending, and
    the producer's replayed decisions store each real message once (found through the index when in the log)."""
    root = tmp_path / "store"

    async def go() -> None:
        store, service = await open_service(root)
        tx = await halves(service, 3)
        start = store.commit_log.max_offset
        decisions = [(tx[0], COMMIT), (tx[1], COMMIT), (tx[2], ROLLBACK)]
        assert [r.code for r in await batch(service, decisions)] == [OK, OK, OK]
        end_ = store.commit_log.max_offset
        whole = start  # where the torn record starts: the log keeps what is before it
        for _ in range(torn):
            whole += len(store.commit_log.read(whole))
        cut = whole + 40
        store.commit_log.flush()
        store.close_without_shutdown()
        for seg in sorted((root / "commitlog").iterdir()):
            base = int(seg.name)
            lo, hi = max(cut, base), min(end_, base + seg.stat().st_size)
            if lo < hi:
                with seg.open("r+b") as f:
                    f.seek(lo - base)
                    f.write(bytes(hi - lo))

        store, service = await open_service(root)
        assert store.commit_log.max_offset == whole
        assert stored(store) == ["m0", "m1"][:torn]
        assert [service.table.outcome(off) for off, _ in tx] == [Outcome.PENDING] * 3
        assert {off for off, _ in tx} <= service.table.recovered
        assert [r.code for r in await batch(service, decisions)] == [OK, OK, OK]
        assert stored(store) == ["m0", "m1"]
        assert [service.table.outcome(off) for off, _ in tx] == [COMMIT, COMMIT, ROLLBACK]
        store.close_without_shutdown()

        store, service = await open_service(root)
        assert [service.table.outcome(off) for off, _ in tx] == [COMMIT, COMMIT, ROLLBACK]
        assert stored(store) == ["m0", "m1"]
        await store.shutdown()
    asyncio.run(go())


@pytest.mark.parametrize("result, line", [
    (EndResult(14), "SERVICE_NOT_AVAILABLE"),
    (EndResult(11, "fenced"), "SLAVE_NOT_AVAILABLE (fenced)"),
    (EndResult(9999), "9999")])
def test_a_refused_oneway_decision_is_logged_by_its_codes_name_and_a_missing_remark_not_as_none(caplog, result,
                                                                                               line):
    _log_refusal("10.9.8.7", result)
    assert [r.getMessage() for r in caplog.records] == [
        f"broker refused a oneway END_TRANSACTION from 10.9.8.7: {line}"]


class _Wire:
    """The connection side of ``_EndAnswer``: what would be written, and the handler-failure answer."""

    remote_address = "10.9.8.6:1234"

    def __init__(self) -> None:
        self.written: list[tuple[RemotingCommand, object]] = []

    def _reply(self, request: RemotingCommand, response: object) -> None:
        if not request.is_oneway:  # as the transport's: nothing goes out for a oneway request
            self.written.append((request, response))

    def _failed(self, cmd: RemotingCommand, exc: BaseException) -> RemotingCommand:
        return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")


def test_single_decisions_of_one_iteration_answer_each_its_own_reply_a_bad_neighbour_alone(tmp_path, caplog):
    """END_TRANSACTIONs gathered in one loop iteration are decided together, each answered through its own
    ``_EndAnswer`` (no future): two-way ones get their own code and remark, a oneway one nothing but a log line
    when refused; the decision naming no half fails alone."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        (a, a_clo), (b, _), (c, c_clo) = await halves(service, 3)
        wire = _Wire()
        cmds = [RemotingCommand.request(RequestCode.END_TRANSACTION, oneway=oneway) for oneway in
                (False, False, True, True, False)]
        answers = [_EndAnswer(wire, cmd) for cmd in cmds]  # type: ignore[arg-type]
        asked = [(a, a_clo, COMMIT), (b, 1 << 40, COMMIT), (c, c_clo, ROLLBACK), (b, 1 << 40, COMMIT),
                 (c, c_clo, COMMIT)]
        for (off, clo, outcome), answer in zip(asked, answers, strict=True):
            assert service.end_transaction(producer_group="g", half_offset=off, commit_log_offset=clo,
                                           outcome=outcome, source="test", waiter=answer) is answer
        while not all(answer.done() for answer in answers):
            await asyncio.sleep(0.01)
        assert [(req.opaque, resp.code) for req, resp in wire.written] == [
            (cmds[0].opaque, OK), (cmds[1].opaque, ResponseCode.SYSTEM_ERROR), (cmds[4].opaque, SHOULD_ROLLBACK)]
        assert [answer.code for answer in answers] == [OK, ResponseCode.SYSTEM_ERROR, OK,
                                                       ResponseCode.SYSTEM_ERROR, SHOULD_ROLLBACK]
        refused = [r.getMessage() for r in caplog.records if "oneway" in r.getMessage()]
        assert len(refused) == 1  # the second oneway, not the first (a ROLLBACK: SUCCESS, quiet)
        assert refused[0].startswith("broker refused a oneway END_TRANSACTION from 10.9.8.6: SYSTEM_ERROR (Find "
                                     "prepared transaction")
        assert [service.table.outcome(off) for off in (a, b, c)] == [COMMIT, Outcome.PENDING, ROLLBACK]
        await store.shutdown()
    asyncio.run(go())


def test_a_decision_that_raises_is_answered_as_a_handlers_failure(caplog):
    wire = _Wire()
    two_way, oneway = (RemotingCommand.request(RequestCode.END_TRANSACTION, oneway=o) for o in (False, True))
    for cmd in (two_way, oneway):
        _EndAnswer(wire, cmd).set_exception(StoreError("disk gone"))  # type: ignore[arg-type]
    assert [(req, resp.code, resp.remark) for req, resp in wire.written] == [
        (two_way, ResponseCode.SYSTEM_ERROR, "StoreError: disk gone")]
