"""Half batches against a real broker process (``Producer.send_half_batch_async``, as the Spark sink's tasks send
their rows): one half message and one transaction per batch, invisible until its COMMIT, which makes each message
visible once; ended by the producer or by check-back; a replay after SIGKILL stores nothing new; bad batches are
refused with a clear error."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from tests.e2e.test_transactions import TX_CONF, Collector, create_topic, scan_topic, tx_stats
from txmq import (
    BrokerError,
    HalfMessageRef,
    InvalidMessageError,
    LocalTransactionState,
    Message,
    Producer,
    SendStatus,
    TransactionProducer,
)
from txmq.broker.core.send import is_half
from txmq.message import MessageConst, MessageSysFlag, encode_batch, properties_to_string
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import SendMessageRequestHeader
from txmq.remoting.transport import RemotingClient

CASE = "case"


class ByCase:
    """Check-back answers by the batch's ``case`` property; records the transactions it was asked about."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.checked: dict[str, dict[str, str]] = {}

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        with self.lock:
            self.checked[msg.transaction_id] = dict(msg.properties)
        return {"check-commit": LocalTransactionState.COMMIT,
                "check-rollback": LocalTransactionState.ROLLBACK}.get(msg.properties.get(CASE, ""),
                                                                      LocalTransactionState.UNKNOWN)


def rows(topic: str, case: str, n: int) -> list[Message]:
    return [Message(topic, f"{case}-{i}".encode(), keys=f"{case}-{i}") for i in range(n)]


def test_a_half_batch_is_one_transaction_and_each_message_is_committed_once(cluster):
    broker = cluster.start_broker("broker-a", {**TX_CONF, "flushDiskType": "SYNC_FLUSH", "transactionTimeOut": 3000})
    topic = "tx_half_batches"
    create_topic(cluster, topic)
    listener = ByCase()
    responder = TransactionProducer("p_hb", listener, cluster.namesrv_addr)
    responder.start()
    collector = Collector(cluster.namesrv_addr, topic, "c_hb")
    cases = ("commit", "rollback", "check-commit", "check-rollback")
    try:
        with Producer("p_hb-task", cluster.namesrv_addr) as task:
            sent = {case: rows(topic, case, 50) for case in cases}
            futures = {case: task.send_half_batch_async(msgs, responder.group, {CASE: case})
                       for case, msgs in sent.items()}
            results = {case: f.result(30) for case, f in futures.items()}
        assert all(r.status == SendStatus.SEND_OK and r.transaction_id == r.msg_id for r in results.values())
        assert len({r.queue_offset for r in results.values()}) == 4  # four halves, four transactions
        assert tx_stats(cluster.namesrv_addr)["pending"] == 4
        assert scan_topic(cluster.namesrv_addr, topic) == []  # invisible

        refs = {case: HalfMessageRef.of(r) for case, r in results.items()}
        decided = [(refs["commit"], LocalTransactionState.COMMIT), (refs["rollback"], LocalTransactionState.ROLLBACK)]
        assert [a.code for a in responder.end_transactions(decided)] == [ResponseCode.SUCCESS] * 2
        expected = {f"{case}-{i}" for case in ("commit", "check-commit") for i in range(50)}
        collector.wait_exactly(expected, 60)
        assert set(listener.checked) == {results["check-commit"].transaction_id,
                                         results["check-rollback"].transaction_id}
        assert listener.checked[results["check-commit"].transaction_id][CASE] == "check-commit"

        # Each committed message is a message of its own, in one queue, linked to its batch's transaction.
        committed = [m for m in scan_topic(cluster.namesrv_addr, topic) if m.body.startswith(b"commit-")]
        assert sorted(m.body.decode() for m in committed) == sorted(f"commit-{i}" for i in range(50))
        assert len({m.queue_id for m in committed}) == 1
        assert {m.properties[MessageConst.TRANSACTION_ID] for m in committed} == {results["commit"].transaction_id}
        assert {m.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] for m in committed} == \
            {m.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] for m in sent["commit"]}
        assert all(MessageSysFlag.transaction_value(m.sys_flag) == MessageSysFlag.TRANSACTION_COMMIT_TYPE
                   for m in committed)
        stats = tx_stats(cluster.namesrv_addr)
        assert (stats["commits"], stats["rollbacks"], stats["pending"]) == (2, 2, 0)

        # SIGKILL, restart, the same decisions and their reverse again: nothing new is stored.
        collector.close()
        broker.kill()
        broker.start()
        again = responder.end_transactions([*decided, (refs["check-commit"], LocalTransactionState.ROLLBACK)])
        assert [a.code for a in again] == [ResponseCode.SUCCESS, ResponseCode.SUCCESS,
                                           ResponseCode.TRANSACTION_SHOULD_COMMIT]
        assert sorted(m.body.decode() for m in scan_topic(cluster.namesrv_addr, topic)) == sorted(expected)
        collector = Collector(cluster.namesrv_addr, topic, "c_hb_after")
        collector.wait_exactly(expected, 60)
    finally:
        collector.close()
        responder.shutdown()


async def raw_send(addr: str, topic: str, batch_props: dict[str, str], msgs: list[Message]) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group="p_hb_raw", topic=topic, default_topic="TBW102", default_topic_queue_nums=4, queue_id=0,
        sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE if is_half(batch_props) else 0,
        born_timestamp=int(time.time() * 1000), flag=0,
        properties=properties_to_string(batch_props), reconsume_times=0, batch=True)
    cmd = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, header.to_v2_ext(), body=encode_batch(msgs))
    async with RemotingClient() as client:
        return await client.invoke(addr, cmd, 10.0)


def test_bad_half_batches_are_refused_and_store_nothing(cluster):
    broker = cluster.start_broker("broker-a", {**TX_CONF, "maxMessageSize": 64 * 1024})
    topic = "tx_half_batches_bad"
    create_topic(cluster, topic, 1)
    uniq = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
    with Producer("p_hb_bad", cluster.namesrv_addr) as producer:
        half = Message(topic, b"h", properties={MessageConst.TRANSACTION_PREPARED: "true"})
        for msgs, why in (([], "empty"), ([half], "plain messages"),
                          ([Message(topic, b"a"), Message(topic + "_other", b"b")], "same topic")):
            with pytest.raises(InvalidMessageError, match=why):
                producer.send_half_batch_async(msgs, "p_hb")
        # Too big for maxMessageSize as one half message (each message alone would fit).
        big = [Message(topic, b"x" * 1024) for _ in range(100)]
        with pytest.raises(BrokerError) as err:
            producer.send_half_batch_async(big, "p_hb").result(30)
        assert err.value.code == ResponseCode.MESSAGE_ILLEGAL and "maxMessageSize" in (err.value.remark or "")

    addr = broker.addrs["broker"]
    props = {MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: "p_hb", uniq: "T" * 32}
    with_ids = [Message(topic, f"m{i}".encode(), properties={uniq: f"U{i:031d}"}) for i in range(2)]
    for batch_props, msgs, why in (
            (props, [Message(topic, b"no id")], f"needs a {uniq}"),
            ({k: v for k, v in props.items() if k != uniq}, with_ids, "its own UNIQ_KEY"),
            (props, [Message(topic, b"h", properties={uniq: "U" * 32, MessageConst.TRANSACTION_PREPARED: "true"})],
             "plain messages"),
            # Fits the batch entry, not a stored message once COMMIT adds the link: refused now, not at COMMIT.
            (props, [Message(topic, b"p", properties={uniq: "U" * 32, "pad": "p" * 32700})], "would not fit")):
        resp = asyncio.run(raw_send(addr, topic, batch_props, msgs))
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and why in (resp.remark or ""), resp.remark
    assert tx_stats(cluster.namesrv_addr)["pending"] == 0
    assert scan_topic(cluster.namesrv_addr, topic) == []
    # The broker is unharmed: a good raw half batch goes through.
    assert asyncio.run(raw_send(addr, topic, props, with_ids)).code == ResponseCode.SUCCESS
    assert tx_stats(cluster.namesrv_addr)["pending"] == 1
