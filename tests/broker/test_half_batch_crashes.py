"""Half batches whose commit goes wrong: a crash-cut commit whose finish fails, a store that refuses one commit
of a shared put, a decision cancelled between puts, a crash-cut commit of a discarded transaction. Each message
of a committed batch stays visible exactly once, and a ROLLBACK never stands beside visible messages.
(Found by a review of the half-batch change; each test failed before its fix.)"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from tests.broker.test_half_batch import bodies, half_batch
from tests.broker.test_transaction_batch import COMMIT, OK, ROLLBACK, batch, stored
from tests.broker.tx_helpers import open_service
from txmq.broker.transaction.half import real_messages
from txmq.broker.transaction.state import Outcome
from txmq.message import Message, MessageConst, MessageExt, encode_batch
from txmq.remoting.codes import ResponseCode
from txmq.store import PutMessageResult, PutMessageStatus


@pytest.mark.parametrize("then", [ROLLBACK, COMMIT], ids=["rollback", "commit"])
def test_a_failed_finish_of_a_cut_commit_is_still_finished_later(tmp_path, then):
    """A crash inside a half batch's commit (2 of 5 messages in the log); after the restart the COMMIT that would
    finish it meets a store refusal. The transaction stays one whose commit was cut: a later ROLLBACK is refused,
    a later COMMIT stores each message once."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        cut = await half_batch(service, "a", 5)
        half = service._taken_half(cut[1])[0]
        await store.put_messages(real_messages(half, *cut)[:2])  # the torn commit
        store.commit_log.flush()
        store.close_without_shutdown()

        store, service = await open_service(tmp_path)
        assert cut[0] in service.table.recovered
        real_put = store.put_messages

        async def refuse(msgs):
            if msgs[0].topic == "orders":
                return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, None)
            return await real_put(msgs)
        store.put_messages = refuse
        r = (await batch(service, [(cut, COMMIT)]))[0]
        assert r.code == ResponseCode.SYSTEM_ERROR
        store.put_messages = real_put
        r = (await batch(service, [(cut, then)]))[0]
        if then == ROLLBACK:
            # the promise: refused (already part committed) and the rest finished
            assert not (r.code == OK and service.table.outcome(cut[0]) == Outcome.ROLLBACK), \
                f"ROLLBACK accepted with {stored(store)} visible"
        else:
            assert r.code == OK
            assert stored(store) == bodies("a", 5), f"duplicates: {stored(store)}"
        await store.shutdown()
    asyncio.run(go())


def test_one_unstorable_half_batch_does_not_fail_its_neighbours(tmp_path):
    """Inner properties that fit the batch entry but not a stored message (with the commit's link added; the send
    processor refuses such a batch, the service alone does not): its COMMIT fails, its neighbours' do not."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        good = await half_batch(service, "g", 2)
        big = Message("orders", b"x", properties={MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "U" * 32,
                                                   "pad": "p" * 32740})
        h = MessageExt("orders", encode_batch([big]), {
            MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: "g",
            MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "T" * 32},
            queue_id=1, born_timestamp=int(time.time() * 1000), born_host=("127.0.0.1", 1))
        pr = await service.prepare_half_batch(h, 1)
        assert pr.status == PutMessageStatus.PUT_OK  # accepted at send
        poisoned = (pr.append_result.logics_offset, pr.append_result.wrote_offset)
        results = await batch(service, [(good, COMMIT), (poisoned, COMMIT)])
        assert results[0].code == OK, "the good transaction failed because of its neighbour"
        await store.shutdown()
    asyncio.run(go())


def test_a_decision_cancelled_between_puts_still_records_what_it_stored(tmp_path, monkeypatch):
    """A decision cancelled (gRPC deadline, shutdown) after its first put: what was stored is recorded as
    committed, so a retried COMMIT stores nothing again."""
    from txmq.broker.transaction import decision
    monkeypatch.setattr(decision, "PUT_SLICE", 2)

    async def go() -> None:
        store, service = await open_service(tmp_path)
        a, b = await half_batch(service, "a", 2), await half_batch(service, "b", 2)
        real_put = store.put_messages
        outer: list[asyncio.Task] = []

        async def put_then_cancel(msgs):
            r = await real_put(msgs)
            if msgs[0].topic == "orders" and outer:
                outer.pop().cancel()
            return r
        store.put_messages = put_then_cancel
        t = batch(service, [(a, COMMIT), (b, COMMIT)])
        outer.append(t)
        with contextlib.suppress(asyncio.CancelledError):
            await t
        await asyncio.sleep(0.05)
        store.put_messages = real_put
        assert [r.code for r in await batch(service, [(a, COMMIT), (b, COMMIT)])] == [OK, OK]
        assert stored(store) == sorted(bodies("a", 2) + bodies("b", 2)), f"duplicates: {stored(store)}"
        await store.shutdown()
    asyncio.run(go())


def test_a_cut_commit_of_a_discarded_transaction_is_found_after_resume(tmp_path):
    """COMMIT of a DISCARDed half batch is allowed; a crash inside it leaves part in the log. Recovery looks up
    discarded transactions too, so after `tx resume` a COMMIT stores only the rest."""
    async def go() -> None:
        store, service = await open_service(tmp_path)
        cut = await half_batch(service, "a", 5)
        half = service._taken_half(cut[1])[0]
        await service.discard(half, cut[0], 15, "test")
        await store.put_messages(real_messages(half, *cut)[:2])  # the torn commit
        store.commit_log.flush()
        store.close_without_shutdown()
        store, service = await open_service(tmp_path)
        assert await service.resume(cut[0]) is None
        r = (await batch(service, [(cut, COMMIT)]))[0]
        assert r.code == OK
        assert stored(store) == bodies("a", 5), f"duplicates: {stored(store)}"
        await store.shutdown()
    asyncio.run(go())
