"""TXMQ_END_TRANSACTION_BATCH (9005) against a real broker process: many transactions ended in one request,
consumers see exactly the committed ones once, and the same request replayed after a SIGKILL and restart of
the broker stores nothing new."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from tests.e2e.test_transactions import (
    TX_CONF,
    UNKNOWN,
    Collector,
    RuleListener,
    create_topic,
    max_offsets,
    scan_topic,
    tx_stats,
)
from txmq import (
    Admin,
    BrokerError,
    HalfMessageRef,
    LocalTransactionState,
    Message,
    Producer,
    SendStatus,
    TransactionProducer,
)
from txmq.message import MessageConst, MessageSysFlag
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient

# No check-back during the test: every decision comes from the batch.
CONF: dict[str, object] = {"flushDiskType": "SYNC_FLUSH", "transactionTimeOut": 120_000}
COMMIT, ROLLBACK = MessageSysFlag.TRANSACTION_COMMIT_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE


class Undecided:
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN


def send_halves(producer: TransactionProducer, topic: str, prefix: str, n: int) -> list[Any]:
    results = [producer.send_message_in_transaction(Message(topic, f"{prefix}-{i}".encode())) for i in range(n)]
    assert all(r.status == SendStatus.SEND_OK for r in results)
    return results


async def raw_batch(addr: str, body: bytes) -> RemotingCommand:
    async with RemotingClient() as client:
        return await client.invoke(addr, RemotingCommand.request(RequestCode.TXMQ_END_TRANSACTION_BATCH, body=body),
                                   10.0)


def answers(resp: RemotingCommand) -> list[int]:
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return [r["code"] for r in orjson.loads(resp.body)["results"]]


def test_one_request_ends_many_and_a_replay_after_a_crash_stores_nothing(cluster):
    broker = cluster.start_broker("broker-a", CONF)
    addr = broker.addrs["broker"]
    topic = "tx_batch"
    create_topic(cluster, topic)
    producer = TransactionProducer("p_tx_batch", Undecided(), cluster.namesrv_addr)
    producer.start()
    collector = Collector(cluster.namesrv_addr, topic, "c_tx_batch")
    try:
        results = send_halves(producer, topic, "raw", 300)
        decisions = [ROLLBACK if i % 3 == 0 else COMMIT for i in range(len(results))]
        entries = [{"tranStateTableOffset": r.queue_offset, "commitLogOffset": HalfMessageRef.of(r).commit_log_offset,
                    "commitOrRollback": d} for r, d in zip(results, decisions, strict=True)]
        # An entry of a transaction already in the batch with the other outcome, and one that names no half.
        entries += [dict(entries[1], commitOrRollback=ROLLBACK), dict(entries[2], commitLogOffset=0)]
        body = orjson.dumps({"producerGroup": producer.group, "entries": entries})
        codes = answers(asyncio.run(raw_batch(addr, body)))
        assert codes == [ResponseCode.SUCCESS] * 300 + [ResponseCode.TRANSACTION_SHOULD_COMMIT,
                                                        ResponseCode.SYSTEM_ERROR]
        committed = {f"raw-{i}" for i, d in enumerate(decisions) if d == COMMIT}
        collector.wait_exactly(committed, 30)
        stats = tx_stats(cluster.namesrv_addr)
        assert (stats["commits"], stats["rollbacks"], stats["pending"]) == (200, 100, 0)

        # The client's method: chunks of 64, per-entry answers in order.
        more = send_halves(producer, topic, "client", 150)
        states = [LocalTransactionState.COMMIT if i % 2 else LocalTransactionState.ROLLBACK for i in range(150)]
        got = producer.end_transactions([(HalfMessageRef.of(r), s) for r, s in zip(more, states, strict=True)],
                                        chunk=64)
        assert [a.code for a in got] == [ResponseCode.SUCCESS] * 150 and all(a.decided for a in got)
        committed |= {f"client-{i}" for i in range(150) if i % 2}
        collector.wait_exactly(committed, 30)

        # SIGKILL, restart, and the same request again: every entry answers as a repeat, nothing is stored.
        # (This consumer group's offsets may be lost with the kill, and it would then see messages again: a
        # new group checks the log instead.)
        collector.close()
        before = max_offsets(cluster.namesrv_addr, topic)
        broker.kill()
        broker.start()
        codes = answers(asyncio.run(raw_batch(addr, body)))
        assert codes == [ResponseCode.SUCCESS] * 300 + [ResponseCode.TRANSACTION_SHOULD_COMMIT,
                                                        ResponseCode.SYSTEM_ERROR]
        again = producer.end_transactions([(HalfMessageRef.of(r), LocalTransactionState.COMMIT) for r in more])
        assert [a.code for a in got] == [ResponseCode.SUCCESS] * 150
        assert [a.code for a in again] == [ResponseCode.SUCCESS if i % 2 else ResponseCode.TRANSACTION_SHOULD_ROLLBACK
                                           for i in range(150)]
        assert max_offsets(cluster.namesrv_addr, topic) == before
        assert sorted(m.body.decode() for m in scan_topic(cluster.namesrv_addr, topic)) == sorted(committed)
        collector = Collector(cluster.namesrv_addr, topic, "c_tx_batch_after")
        collector.wait_exactly(committed, 30)
    finally:
        collector.close()
        producer.shutdown()


def test_malformed_batch_requests_are_refused(cluster):
    broker = cluster.start_broker("broker-a", CONF)
    addr = broker.addrs["broker"]
    for body in (b"", b"[1]", b'{"producerGroup": "g"}',
                 orjson.dumps({"producerGroup": "g", "entries": [{"tranStateTableOffset": 1}]})):
        resp = asyncio.run(raw_batch(addr, body))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "bad request" in (resp.remark or "")
    resp = asyncio.run(raw_batch(addr, orjson.dumps({"producerGroup": "g", "entries": [
        {"tranStateTableOffset": 0, "commitLogOffset": 0, "commitOrRollback": 5},
        {"tranStateTableOffset": 0, "commitLogOffset": 0, "commitOrRollback": 0}]})))
    assert answers(resp) == [ResponseCode.SYSTEM_ERROR, ResponseCode.SUCCESS]


def half_message(topic: str, body: str, group: str) -> Message:
    return Message(topic, body.encode(), properties={MessageConst.TRANSACTION_PREPARED: "true",
                                                     MessageConst.PRODUCER_GROUP: group})


def test_async_half_messages_go_in_batches_and_each_result_names_its_half(cluster):
    """``send_async`` coalesces half messages (the Spark sink's tasks send them so): one store write per
    batch, every half invisible and tracked, each result exact enough to end it, and check-back finds the
    ones nobody ended."""
    cluster.start_broker("broker-a", {**TX_CONF, "transactionTimeOut": 3000})
    topic = "tx_half_batch"
    create_topic(cluster, topic)
    # Checks answer COMMIT only for the halves left to check-back (n % 3 == 0): never against a decision.
    listener = RuleListener(lambda n: UNKNOWN, lambda n: LocalTransactionState.COMMIT if n % 3 == 0 else UNKNOWN)
    responder = TransactionProducer("p_half_batch", listener, cluster.namesrv_addr)
    responder.start()
    collector = Collector(cluster.namesrv_addr, topic, "c_half_batch")
    try:
        with Admin(cluster.namesrv_addr) as admin:
            before = admin.stats()["broker-a"]["store"]
        n = 600
        with Producer("p_half_batch-task", cluster.namesrv_addr, batch_max_messages=64) as task:
            futures = [task.send_async(half_message(topic, f"h-{i}", responder.group)) for i in range(n)]
            results = [f.result(30) for f in futures]
            with pytest.raises(BrokerError) as err:  # a batch is all halves or none
                task.send_batch([half_message(topic, "mixed-0", responder.group), Message(topic, b"mixed-1")])
            assert err.value.code == ResponseCode.MESSAGE_ILLEGAL and "half" in (err.value.remark or "")
        with Admin(cluster.namesrv_addr) as admin:
            after = admin.stats()["broker-a"]["store"]
        assert all(r.status == SendStatus.SEND_OK for r in results)
        assert all(r.transaction_id == r.msg_id for r in results)
        assert len({r.queue_offset for r in results}) == n  # n distinct half offsets
        assert after["put_calls"] - before["put_calls"] < n / 4, (before, after)  # they went in batches
        assert tx_stats(cluster.namesrv_addr)["pending"] == n
        assert scan_topic(cluster.namesrv_addr, topic) == []  # invisible

        decide = [(HalfMessageRef.of(r), LocalTransactionState.COMMIT if i % 3 == 1 else LocalTransactionState.ROLLBACK)
                  for i, r in enumerate(results) if i % 3]
        got = responder.end_transactions(decide)
        assert [a.code for a in got] == [ResponseCode.SUCCESS] * len(decide)  # every ref named its own half
        collector.wait_exactly({f"h-{i}" for i in range(n) if i % 3 != 2}, 60)
        assert set(listener.checked) <= set(range(0, n, 3)) | set(range(1, n, 3))
        assert all(listener.checked[i] >= 1 for i in range(0, n, 3))
        stats = tx_stats(cluster.namesrv_addr)
        assert (stats["commits"], stats["rollbacks"], stats["pending"]) == (2 * n // 3, n // 3, 0)
    finally:
        collector.close()
        responder.shutdown()
