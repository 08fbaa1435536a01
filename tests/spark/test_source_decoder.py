"""The source's column decoder (``txmq.message_columns``) on bodies a real broker sent: the same columns as
``decode_message`` for compressed bodies, batch-stored messages, committed transactions and committed half
batches (``__transactionId__``), with and without a tag filter. No Spark needed: the session's broker."""

from __future__ import annotations

import time
from typing import Any

import pytest

import txmq.message_columns as compiled
from tests.spark.spark_helpers import create_topic
from tests.test_message_columns import columns, reference
from txmq import HalfMessageRef, LocalTransactionState, Message, Producer, PullConsumer, TransactionProducer
from txmq.client.instance import MessageQueue
from txmq.errors import RemoteProtocolError
from txmq.message import MessageConst


class Commit:
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, msg: Message) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


def test_pulled_bodies_give_the_columns_of_decode_message(txmq_cluster: Any) -> None:
    topic, ns = "sp-decoder", txmq_cluster.namesrv_addr
    create_topic(txmq_cluster, topic, 1)
    big = b"compress me " * 100
    with TransactionProducer("sp-decoder-tx", Commit(), ns) as tx, \
            Producer("sp-decoder-p", ns, compress_threshold=256) as plain:
        plain.send(Message(topic, big, tags="TagA", keys="big", properties={"ключ": "значение"}))
        plain.send(Message(topic, b"small", tags="TagB", keys=["k1", "k2"]))
        plain.send_batch([Message(topic, f"batch-{i}".encode(), tags="TagA", keys=f"b{i}") for i in range(3)])
        committed = tx.send_message_in_transaction(Message(topic, b"one transaction", tags="TagA"))
        with Producer("sp-decoder-tx-task", ns) as task:
            half = task.send_half_batch_async([Message(topic, f"row-{i}".encode(), keys=f"r{i}") for i in range(4)],
                                              tx.group).result(30)
        assert [a.code for a in tx.end_transactions([(HalfMessageRef.of(half), LocalTransactionState.COMMIT)])] \
            == [0]

    with PullConsumer("sp-decoder-reader", ns) as consumer:
        mq = MessageQueue(topic, "broker-a", 0)
        deadline = time.monotonic() + 30
        while consumer.max_offset(mq) < 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        raw = consumer.pull(mq, "*", 0, 32, decode=False)
        decoded = consumer.pull(mq, "*", 0, 32)
        assert raw.msgs == [] and raw.next_begin_offset == decoded.next_begin_offset == 10

        got = columns(compiled, raw.body)
        assert got == reference(raw.body)
        assert got["body"] == [m.body for m in decoded.msgs]  # what every other consumer of the broker sees
        assert got["msg_id"] == [m.msg_id for m in decoded.msgs]
        assert got["body"][:2] == [big, b"small"] and got["keys"][1] == "k1 k2"
        assert dict(got["properties"][0])["ключ"] == "значение"
        assert got["transaction_id"][:5] == [None] * 5
        assert got["transaction_id"][5] == committed.transaction_id
        assert got["transaction_id"][6:] == [half.transaction_id] * 4
        assert {dict(p)[MessageConst.TRANSACTION_ID] for p in got["properties"][6:]} == {half.transaction_id}

        tagged = consumer.pull(mq, "TagA", 0, 32, decode=False)
        got = columns(compiled, tagged.body, tags={"TagA"})
        assert got == reference(tagged.body, tags={"TagA"})
        assert got["body"] == [m.body for m in consumer.pull(mq, "TagA", 0, 32).msgs]
        assert len(got["body"]) == 5

        with pytest.raises(RemoteProtocolError, match="bad message size"):
            columns(compiled, raw.body[:-1])
