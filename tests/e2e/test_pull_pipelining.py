"""The push consumer's pull loop: the next pull of a queue goes out before the client works on the answer it got
(RocketMQ's client issues it from the pull callback), and the process queue's bound still holds."""

from __future__ import annotations

import threading
from typing import Any

from tests.e2e.helpers import push_consumer, wait_until
from txmq import Admin, ConsumeStatus, Message, MessageExt, Producer
from txmq.client import consumer as consumer_module
from txmq.remoting.codec import FrameDecoder
from txmq.remoting.codes import RequestCode


class WireSpy:
    """Stands in front of a connection's socket transport and reads the frames written to it: the offsets of the
    PULL_MESSAGE requests that left for the broker."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._decoder = FrameDecoder()
        self.pull_offsets: list[int] = []

    def _saw(self, data: bytes) -> None:
        self._decoder.receive_data(data)
        while (cmd := self._decoder.next_command()) is not None:
            if not cmd.is_response and cmd.code == RequestCode.PULL_MESSAGE:
                self.pull_offsets.append(int(cmd.ext_fields["queueOffset"]))

    def write(self, data: bytes) -> None:
        self._saw(bytes(data))
        self._transport.write(data)

    def writelines(self, chunks: list[bytes]) -> None:
        for data in chunks:
            self._saw(bytes(data))
        self._transport.writelines(chunks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def test_next_pull_is_sent_before_the_answer_is_prepared_for_the_listener(cluster, monkeypatch, listener_on_loop):
    """Each message is prepared for the listener only once the pull after its answer was written to the socket: a
    message sent meanwhile finds a pull held at the broker instead of waiting for this client's work and a round
    trip."""
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("pipe_t", queue_nums=1)
    cluster.wait_route("pipe_t")
    got = threading.Event()
    seen: list[int] = []

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        seen.extend(m.queue_offset for m in msgs)
        if len(seen) >= 30:
            got.set()
        return ConsumeStatus.SUCCESS

    consumer = push_consumer(cluster.namesrv_addr, "g_pipe", "pipe_t", listener,  # type: ignore[arg-type]
                             listener_on_loop=listener_on_loop)
    assert consumer.instance is not None
    (conn,) = [c for addr, c in consumer.instance.remoting._connections.items()  # the broker's, not the name server's
               if addr == consumer.instance.broker_addr("broker-a")]
    spy = WireSpy(conn._transport)
    conn._transport = spy
    prepared: list[tuple[int, int]] = []  # (the message's offset, the highest offset a pull was written for)
    prepare = consumer_module.prepare_for_user

    def spying_prepare(m: MessageExt) -> MessageExt:
        prepared.append((m.queue_offset, max(spy.pull_offsets, default=-1)))
        return prepare(m)

    monkeypatch.setattr(consumer_module, "prepare_for_user", spying_prepare)
    try:
        with Producer("p_pipe", cluster.namesrv_addr) as producer:
            for i in range(3):  # three answers of ten: each is followed by a pull from past its last message
                producer.send_batch([Message("pipe_t", f"m{i}-{j}".encode()) for j in range(10)])
                assert wait_until(lambda n=10 * (i + 1): len(seen) >= n, 20)
        assert got.wait(20)
    finally:
        consumer.shutdown()
    assert sorted(seen) == list(range(30))
    assert [offset for offset, _ in prepared] == list(range(30))
    late = [(offset, pulled) for offset, pulled in prepared if pulled <= offset]
    assert not late, f"messages prepared before the next pull was sent: {late[:5]}"


def test_next_pull_waits_while_the_process_queue_is_full(cluster):
    """With the listener stuck, a queue is pulled until its process queue would pass ``pull_threshold``, and no
    further; once the listener goes on, every message arrives once."""
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("full_t", queue_nums=1)
    cluster.wait_route("full_t")
    threshold = 10
    go = threading.Event()
    seen: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        go.wait(30)
        with lock:
            seen.extend(m.body for m in msgs)
        return ConsumeStatus.SUCCESS

    with Producer("p_full", cluster.namesrv_addr) as producer:
        producer.send_batch([Message("full_t", f"f{j}".encode()) for j in range(40)])
    batch = 4
    consumer = push_consumer(cluster.namesrv_addr, "g_full", "full_t", listener,  # type: ignore[arg-type]
                             pull_batch_size=batch, pull_threshold=threshold)
    try:
        assert wait_until(lambda: any(mq.topic == "full_t" for mq in list(consumer.queues)), 20)
        (pq,) = [pq for mq, pq in list(consumer.queues.items()) if mq.topic == "full_t"]
        # pulls of 4 while the queue holds under 10 with the answer: 4, 8, then 12 and no further
        assert wait_until(lambda: len(pq.msgs) >= 12, 20)
        assert not wait_until(lambda: len(pq.msgs) > 12, 1.0)
        assert pq.next_offset == 12
        go.set()
        assert wait_until(lambda: len(seen) >= 40, 20)
    finally:
        go.set()
        consumer.shutdown()
    assert sorted(seen) == sorted(f"f{j}".encode() for j in range(40))
