"""Batches of more messages than one ``pwritev`` takes (IOV_MAX, 1024), against a real broker: plain batches are
stored whole and in order, half batches are committed with each message visible exactly once (also after a
restart), and a batch whose whole body is over ``maxMessageSize`` is refused with nothing stored."""

from __future__ import annotations

import asyncio
from collections import Counter

from tests.e2e.test_half_batches import raw_send
from tests.e2e.test_transactions import TX_CONF, create_topic, scan_topic, tx_stats
from txmq import HalfMessageRef, LocalTransactionState, Message, Producer, SendStatus, TransactionProducer
from txmq.remoting.codes import ResponseCode

SIZES = (1025, 2000, 5000)
MAX_MESSAGE_SIZE = 1 << 20


class Undecided:
    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN


def test_batches_beyond_iov_max_and_over_max_message_size(cluster):
    broker = cluster.start_broker("broker-a", {**TX_CONF, "transactionTimeOut": 60_000,
                                               "maxMessageSize": MAX_MESSAGE_SIZE})
    plain, halves = "big_batches", "big_half_batches"
    create_topic(cluster, plain, 1)
    create_topic(cluster, halves, 1)
    responder = TransactionProducer("p_big", Undecided(), cluster.namesrv_addr)
    responder.start()
    try:
        with Producer("p_big_task", cluster.namesrv_addr) as producer:
            for n in SIZES:
                result = producer.send_batch([Message(plain, f"{n}-{i}".encode()) for i in range(n)])
                assert result.status == SendStatus.SEND_OK
            futures = [producer.send_half_batch_async([Message(halves, f"h{n}-{i}".encode()) for i in range(n)],
                                                      responder.group) for n in SIZES]
            refs = [HalfMessageRef.of(f.result(30)) for f in futures]
        plain_bodies = [f"{n}-{i}" for n in SIZES for i in range(n)]
        assert [m.body.decode() for m in scan_topic(cluster.namesrv_addr, plain)] == plain_bodies

        assert [a.code for a in responder.end_transactions([(r, LocalTransactionState.COMMIT) for r in refs])] == \
            [ResponseCode.SUCCESS] * len(SIZES)
        half_bodies = Counter(f"h{n}-{i}" for n in SIZES for i in range(n))
        assert Counter(m.body.decode() for m in scan_topic(cluster.namesrv_addr, halves)) == half_bodies
        stats = tx_stats(cluster.namesrv_addr)
        assert (stats["commits"], stats["pending"]) == (len(SIZES), 0)

        # Over maxMessageSize as a whole (each message alone fits): refused, nothing stored.
        addr = broker.addrs["broker"]
        big = [Message(plain, b"x" * 16 * 1024) for _ in range(MAX_MESSAGE_SIZE // (16 * 1024) + 8)]
        resp = asyncio.run(raw_send(addr, plain, {}, big))
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL, resp.remark
        assert "over max value" in (resp.remark or "") and str(MAX_MESSAGE_SIZE) in (resp.remark or "")

        broker.kill()
        broker.start()
        assert [m.body.decode() for m in scan_topic(cluster.namesrv_addr, plain)] == plain_bodies
        again = responder.end_transactions([(r, LocalTransactionState.COMMIT) for r in refs])
        assert [a.code for a in again] == [ResponseCode.SUCCESS] * len(SIZES)
        assert Counter(m.body.decode() for m in scan_topic(cluster.namesrv_addr, halves)) == half_bodies
    finally:
        responder.shutdown()
