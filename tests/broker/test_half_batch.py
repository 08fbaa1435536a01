"""Half batches on a real store: one half message carrying many messages, one transaction for them all. A COMMIT
stores each as a real message of its own, in puts that never split a batch; a commit cut short by a crash is
finished (never rolled back) after recovery."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.broker.test_transaction_batch import (
    COMMIT,
    OK,
    ROLLBACK,
    SHOULD_COMMIT,
    batch,
    count_puts,
    op_records,
    stored,
)
from tests.broker.tx_helpers import open_service
from txmq.broker.transaction import decision
from txmq.broker.transaction.half import HALF_BATCH
from txmq.broker.transaction.half import real_messages as real_messages_of
from txmq.broker.transaction.service import TransactionalMessageService
from txmq.broker.transaction.state import Outcome
from txmq.message import Message, MessageConst, MessageExt, MessageSysFlag, decode_message, encode_batch
from txmq.remoting.codes import ResponseCode
from txmq.store import DefaultMessageStore, PutMessageStatus


def rows(tag: str, n: int) -> list[Message]:
    return [Message("orders", f"{tag}{i}".encode(), keys=f"k-{tag}{i}",
                    properties={MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"U{tag}{i:028d}"}) for i in range(n)]


async def half_batch(service: TransactionalMessageService, tag: str, n: int, queue_id: int = 1) -> tuple[int, int]:
    """Store a half batch of ``n`` messages as the send processor does; returns (half offset, commit-log offset)."""
    half = MessageExt("orders", encode_batch(rows(tag, n)), {
        MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: "g",
        MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"T{tag:>029}"},
        queue_id=queue_id, born_timestamp=int(time.time() * 1000), born_host=("127.0.0.1", 1))
    r = await service.prepare_half_batch(half, n)
    assert r.status == PutMessageStatus.PUT_OK and r.append_result is not None
    return r.append_result.logics_offset, r.append_result.wrote_offset


def bodies(tag: str, n: int) -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def real_messages(store: DefaultMessageStore, queue_id: int = 1) -> list[MessageExt]:
    got = store.get_message("orders", queue_id, 0, 1000, 64 * 1024 * 1024)
    return [decode_message(raw)[0] for raw in got.messages]


def test_a_committed_half_batch_stores_each_message_once(tmp_path, monkeypatch):
    monkeypatch.setattr(decision, "PUT_SLICE", 5)

    async def go() -> None:
        store, service = await open_service(tmp_path)
        tx = [await half_batch(service, tag, n) for tag, n in (("a", 3), ("b", 2), ("c", 4), ("d", 1), ("e", 2))]
        assert stored(store) == [] and len(service.table) == 5  # invisible, five transactions
        calls = count_puts(store)
        results = await batch(service, [(tx[0], COMMIT), (tx[1], COMMIT), (tx[2], COMMIT), (tx[3], COMMIT),
                                        (tx[4], ROLLBACK)])
        assert [r.code for r in results] == [OK] * 5
        # Puts of at most PUT_SLICE messages, a batch never split: a+b, c+d; then the op records.
        assert [len(c) for c in calls if c[0] == "orders"] == [5, 5]
        assert stored(store) == sorted(bodies("a", 3) + bodies("b", 2) + bodies("c", 4) + bodies("d", 1))
        reals = real_messages(store)
        assert [m.queue_offset for m in reals] == list(range(10))
        a0 = reals[0]
        assert a0.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] == f"Ua{0:028d}"  # its own id
        assert a0.properties[MessageConst.TRANSACTION_ID] == f"T{'a':>029}"  # and its batch's transaction
        assert a0.properties[MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET] == str(tx[0][0])
        assert a0.keys == "k-a0" and MessageConst.TRANSACTION_PREPARED not in a0.properties
        assert a0.prepared_transaction_offset == tx[0][1]
        assert MessageSysFlag.transaction_value(a0.sys_flag) == MessageSysFlag.TRANSACTION_COMMIT_TYPE
        assert op_records(store)[-2:] == [("COMMIT", [off for off, _ in tx[:4]]), ("ROLLBACK", [tx[4][0]])]
        assert service.metrics.commits == 4  # transactions, not messages

        again = await batch(service, [(tx[0], COMMIT), (tx[4], COMMIT)])
        assert [r.code for r in again] == [OK, ResponseCode.TRANSACTION_SHOULD_ROLLBACK]
        assert len(real_messages(store)) == 10
        await store.shutdown()
    asyncio.run(go())


@pytest.mark.parametrize("then", ["rollback", "commit", "check"])
def test_a_commit_cut_short_by_a_crash_is_finished_after_recovery(tmp_path, then):
    """The crash lands inside a batch's put: part of its real messages are in the log, no op record. After
    recovery the transaction is committed whatever comes next (a late ROLLBACK is refused), and only the
    missing messages are stored."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        cut, untouched = await half_batch(service, "a", 5), await half_batch(service, "b", 3)
        half = service._taken_half(cut[1])[0]
        await store.put_messages(real_messages_of(half, *cut)[:2])  # the torn commit
        store.commit_log.flush()
        store.close_without_shutdown()

        store, service = await open_service(tmp_path)
        assert {cut[0], untouched[0]} <= service.table.recovered
        if then == "check":
            assert await service.resolve_recovered(service._taken_half(cut[1])[0], cut[0])
            assert not await service.resolve_recovered(service._taken_half(untouched[1])[0], untouched[0])
        else:
            results = await batch(service, [(cut, ROLLBACK if then == "rollback" else COMMIT), (untouched, ROLLBACK)])
            assert [r.code for r in results] == [SHOULD_COMMIT if then == "rollback" else OK, OK]
        assert service.table.outcome(cut[0]) == Outcome.COMMIT
        assert stored(store) == bodies("a", 5)  # each once
        await store.shutdown()
    asyncio.run(go())


def test_a_plain_message_carrying_a_real_message_s_id_is_no_commit_of_the_first_half(tmp_path):
    """After a crash, a commit is looked for among the messages that carry its real messages' ids and name the half
    as theirs (PREPAREDTRANSACTIONOFFSET). A plain message's field is 0, the first record's offset: a plain message
    with such an id (any producer may choose one) is no commit of the half at offset 0, which stays pending."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        first = await half_batch(service, "a", 2)
        assert first[1] == 0
        plain = rows("a", 1)[0]
        assert (await store.put_message(MessageExt(plain.topic, b"not the commit", dict(plain.properties),
                                                   queue_id=1, born_host=("127.0.0.1", 1)))).status \
            == PutMessageStatus.PUT_OK
        store.commit_log.flush()
        store.close_without_shutdown()

        store, service = await open_service(tmp_path)
        assert first[0] in service.table.recovered
        assert not await service.resolve_recovered(service._taken_half(first[1])[0], first[0])
        assert [r.code for r in await batch(service, [(first, ROLLBACK)])] == [OK]
        assert stored(store) == ["not the commit"]
        await store.shutdown()
    asyncio.run(go())


def test_only_the_broker_marks_a_half_batch(tmp_path):
    """A sender's own ``TXMQ_HALF_BATCH`` on a plain half is dropped: its COMMIT stores its body as it is
    (read as a batch, the decision would fail). A stored batch body that cannot be read fails its entry only."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        forged = MessageExt("orders", b"plain body", {MessageConst.TRANSACTION_PREPARED: "true",
                                                     MessageConst.PRODUCER_GROUP: "g", HALF_BATCH: "3"},
                            queue_id=1, born_timestamp=int(time.time() * 1000))
        r = await service.prepare_message(forged)
        assert r.append_result is not None
        plain = (r.append_result.logics_offset, r.append_result.wrote_offset)
        assert HALF_BATCH not in service._taken_half(plain[1])[0].properties
        good = await half_batch(service, "g", 2)
        broken = await half_batch(service, "x", 2)
        service._taken_half(broken[1])  # forgotten: read back from the store below, then its body damaged
        real_look = store.look_message_by_offset

        def damaged(offset: int) -> MessageExt:
            m = real_look(offset)
            if offset == broken[1]:
                m.body = m.body[:-3]
            return m
        store.look_message_by_offset = damaged  # type: ignore[method-assign]
        results = await batch(service, [(plain, COMMIT), (broken, COMMIT), (good, COMMIT)])
        assert [r.code for r in results] == [OK, ResponseCode.SYSTEM_ERROR, OK]
        assert "unreadable" in results[1].remark
        assert stored(store) == sorted(["plain body", *bodies("g", 2)])
        assert service.table.outcome(broken[0]) == Outcome.PENDING  # left to check-back, and in the end discard
        await store.shutdown()
    asyncio.run(go())
