"""One broker rule, two protocols, one state: what RocketMQ 4.x remoting and RocketMQ 5 gRPC do to a broker through
the same rule leaves the same topic configs and the same counters (the broker core, ``txmq.broker.core``).

* Dead letters: a message whose retries ran out over remoting (CONSUMER_SEND_MSG_BACK past maxReconsumeTimes), one
  forwarded over gRPC (ForwardMessageToDeadLetterQueue) and one delivered ``max_delivery_attempts`` times over gRPC
  each land in their group's ``%DLQ%`` topic, created read-write, and count once in
  ``rocketmq_send_to_dlq_messages`` under the topic they were sent to.
* Pull counters: the same messages read by a remoting pull, a gRPC PullMessage and a gRPC ReceiveMessage count the
  same in ``rocketmq_messages_out`` and ``rocketmq_throughput_out``.

One ``txmq server`` process with Prometheus metrics, driven by txmq's remoting client and the project's gRPC stubs.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.grpc.grpc_helpers import BROKER_CONF, start_server
from txmq import (
    Admin,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from txmq.errors import ClientError
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub
from txmq.launch import ServerProcess, free_port
from txmq.topic import PermName

Code = pb.Code
MAX_DELIVERY_ATTEMPTS = 16  # the pop service's (the backoff policy a consumer's settings are answered with)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    conf = BROKER_CONF + f"metricsExporterType=PROM\nmetricsPromExporterPort={free_port()}\n"
    s = start_server(Path(tmp_path_factory.mktemp("one-rule")), conf)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def admin(broker: ServerProcess) -> Iterator[Admin]:
    a = Admin(broker.namesrv).start()
    try:
        yield a
    finally:
        a.shutdown()


@pytest.fixture(scope="module")
def stub(broker: ServerProcess) -> Iterator[tuple[MessagingServiceStub, list[tuple[str, str]]]]:
    channel = grpc.insecure_channel(broker.grpc)
    try:
        yield MessagingServiceStub(channel), [("x-mq-client-id", f"one-rule-{uuid.uuid4().hex[:8]}")]
    finally:
        channel.close()


def metrics(broker: ServerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The broker's Prometheus samples: (name, sorted labels without the node's) -> value."""
    with urllib.request.urlopen(f"http://{broker.addrs['metrics']}/metrics", timeout=5) as r:
        text = r.read().decode()
    node = {"cluster", "node_type", "node_id"}
    return {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in node))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def counter(samples: dict, name: str, topic: str, group: str) -> float | None:
    return samples.get((name, (("consumer_group", group), ("topic", topic))))


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def routed(consumer: PullConsumer, topic: str) -> list[MessageQueue]:
    """The topic's queues once the name server routes it (the broker registers a new topic at once), else []."""
    try:
        return consumer.fetch_subscribe_message_queues(topic)
    except ClientError:
        return []


def topics(admin: Admin) -> dict[str, dict]:
    (stats,) = admin.stats().values()
    return stats["topics"]


def grpc_send(stub, md, topic: str, body: bytes, queue_id: int = 0) -> None:
    m = pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=pb.SystemProperties(
        message_id=uuid.uuid4().hex.upper(), body_encoding=pb.IDENTITY, queue_id=queue_id))
    r = stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=md, timeout=5)
    assert r.status.code == Code.OK, r.status


def receive(stub, md, topic: str, group: str, invisible_ms: int = 30_000, poll_ms: int = 0) -> list[pb.Message]:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=32,
        invisible_duration={"seconds": invisible_ms // 1000, "nanos": invisible_ms % 1000 * 1_000_000},
        long_polling_timeout={"seconds": poll_ms // 1000, "nanos": poll_ms % 1000 * 1_000_000})
    return [x.message for x in stub.ReceiveMessage(req, metadata=md, timeout=10) if x.HasField("message")]


def test_a_dead_letter_is_the_same_by_either_protocol(broker, admin, stub):
    s, md = stub
    run = uuid.uuid4().hex[:8]
    remoting, forwarded, exhausted = (f"dlq_{how}_{run}" for how in ("remoting", "forwarded", "exhausted"))
    topic = {group: f"{group}_t" for group in (remoting, forwarded, exhausted)}  # one message each
    for name in topic.values():
        admin.create_topic(name, 1)

    # remoting: a consumer that never succeeds and may not retry: its send-back goes to the dead letters
    with Producer(f"{run}_p", broker.namesrv) as producer:
        producer.send(Message(topic[remoting], b"over remoting"))
    consumer = PushConsumer(remoting, broker.namesrv, max_reconsume_times=0,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(topic[remoting], "*")
    consumer.register_listener(lambda msgs: ConsumeStatus.RECONSUME_LATER)
    consumer.start()
    try:
        assert wait_for(lambda: topics(admin).get(f"%DLQ%{remoting}", {}).get("messages") == 1)
    finally:
        consumer.shutdown()

    # gRPC: a message its consumer forwards to the dead letters
    grpc_send(s, md, topic[forwarded], b"forwarded over grpc")
    (got,) = receive(s, md, topic[forwarded], forwarded)
    r = s.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name=forwarded), topic=pb.Resource(name=topic[forwarded]),
        receipt_handle=got.system_properties.receipt_handle, message_id=got.system_properties.message_id),
        metadata=md, timeout=5)
    assert r.status.code == Code.OK, r.status

    # gRPC: a message never acked, delivered again each time its 1 ms of invisibility passed, until its attempts ran
    # out: the next receive finds it gone to the dead letters
    grpc_send(s, md, topic[exhausted], b"exhausted over grpc")
    attempts: list[int] = []
    for _ in range(MAX_DELIVERY_ATTEMPTS + 3):
        attempts += [m.system_properties.delivery_attempt for m in receive(s, md, topic[exhausted], exhausted, 1)]
        time.sleep(0.005)
    assert attempts == list(range(1, MAX_DELIVERY_ATTEMPTS + 1))

    configs = topics(admin)
    for group in (remoting, forwarded, exhausted):
        dlq = configs[f"%DLQ%{group}"]
        assert (dlq["perm"], dlq["messages"]) == (PermName.READ_WRITE, 1), (group, dlq)
    samples = metrics(broker)
    counted = {g: counter(samples, "rocketmq_send_to_dlq_messages_total", topic[g], g)
               for g in (remoting, forwarded, exhausted)}
    assert counted == {remoting: 1, forwarded: 1, exhausted: 1}


def test_a_pull_counts_the_same_by_either_protocol(broker, admin, stub):
    s, md = stub
    topic = f"pull_{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic, 1)
    bodies = [b"a" * 10, b"b" * 200, b"c" * 3000]
    for body in bodies:
        grpc_send(s, md, topic, body)
    remoting, pulled, received = "pull_remoting", "pull_grpc", "receive_grpc"

    consumer = PullConsumer(remoting, broker.namesrv).start()
    try:
        queues: list[MessageQueue] = []
        assert wait_for(lambda: bool(queues.extend(routed(consumer, topic)) or queues))
        (mq,) = queues
        assert [m.body for m in consumer.pull(mq, offset=0).msgs] == bodies
    finally:
        consumer.shutdown()
    answers = list(s.PullMessage(spb.PullMessageRequest(
        group=pb.Resource(name=pulled), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        offset=0, batch_size=32, filter_expression=pb.FilterExpression(type=pb.TAG, expression="*")),
        metadata=md, timeout=10))
    assert [a.message.body for a in answers if a.HasField("message")] == bodies
    assert sorted(m.body for m in receive(s, md, topic, received)) == bodies

    samples = metrics(broker)
    out = {g: counter(samples, "rocketmq_messages_out_total", topic, g) for g in (remoting, pulled, received)}
    assert out == {remoting: 3, pulled: 3, received: 3}
    size = {g: counter(samples, "rocketmq_throughput_out_total", topic, g) for g in (remoting, pulled, received)}
    assert size[remoting] > sum(map(len, bodies)) and size[pulled] == size[received] == size[remoting], size
