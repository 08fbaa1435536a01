"""The shortest path through the whole system: one broker, send, consume, over real sockets."""

import threading

from txmq import ConsumeStatus, Message, Producer, PushConsumer, SendStatus
from txmq.client.consumer import ConsumeFromWhere


def test_send_then_consume(cluster):
    cluster.start_broker()
    got: list[bytes] = []
    done = threading.Event()
    with Producer("p_smoke", cluster.namesrv_addr) as producer:
        results = [producer.send(Message("smoke", f"m{i}".encode(), tags="T")) for i in range(20)]
    assert all(r.status == SendStatus.SEND_OK for r in results)

    def listener(msgs):
        got.extend(m.body for m in msgs)
        if len(got) >= 20:
            done.set()
        return ConsumeStatus.SUCCESS

    consumer = PushConsumer("c_smoke", cluster.namesrv_addr,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe("smoke", "T")
    consumer.register_listener(listener)
    consumer.start()
    try:
        assert done.wait(20)
    finally:
        consumer.shutdown()
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(20))
