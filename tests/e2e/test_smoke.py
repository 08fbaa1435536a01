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


def test_a_queue_named_by_the_application_needs_no_route_lookup_first(cluster):
    """A producer and a pull consumer given a queue the application built itself (its broker name and id known
    from configuration), before they looked its topic up: each asks the name server for the route then, as
    RocketMQ's clients do, instead of failing with "no address known for broker"."""
    from txmq import Admin, MessageQueue, PullConsumer, PullStatus

    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("named_q", queue_nums=2)
    cluster.wait_route("named_q")
    mq = MessageQueue("named_q", "broker-a", 1)
    with Producer("p_named", cluster.namesrv_addr) as producer:
        sent = producer.send(Message("named_q", b"to queue 1"), queue=mq)
    assert sent.status == SendStatus.SEND_OK and sent.message_queue == mq
    with PullConsumer("c_named", cluster.namesrv_addr) as consumer:
        pulled = consumer.pull(mq, offset=0)
    assert pulled.status == PullStatus.FOUND and [m.body for m in pulled.msgs] == [b"to queue 1"]
