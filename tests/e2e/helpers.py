"""Shared pieces of the end-to-end tests: a listener that records deliveries and lets a test wait on them."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from txmq import Admin, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, MessageQueue, Producer, PushConsumer
from txmq.message import HEAD_SIZE, create_offset_msg_id, decode_offset_msg_id
from txmq.remoting.codec import FrameDecoder, encode_command
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.store.record import encode_record, seal


@dataclass(frozen=True, slots=True)
class Delivery:
    msg_id: str
    body: bytes
    topic: str
    tags: str | None
    keys: str | None
    queue_id: int
    queue_offset: int
    reconsume_times: int
    properties: dict[str, str]
    at: float  # time.monotonic() when the listener saw it


class Recorder:
    """A message listener that records every delivery; ``decide`` picks the answer (default SUCCESS)."""

    def __init__(self, decide: Callable[[MessageExt], ConsumeStatus] | None = None,
                 delay_s: float = 0.0) -> None:
        self.deliveries: list[Delivery] = []
        self.decide = decide
        self.delay_s = delay_s
        self._cond = threading.Condition()

    def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        status = ConsumeStatus.SUCCESS
        for m in msgs:
            if self.decide is not None and self.decide(m) != ConsumeStatus.SUCCESS:
                status = ConsumeStatus.RECONSUME_LATER
        if self.delay_s:
            time.sleep(self.delay_s)
        now = time.monotonic()
        with self._cond:
            for m in msgs:
                self.deliveries.append(Delivery(m.msg_id, m.body, m.topic, m.tags, m.keys, m.queue_id,
                                                m.queue_offset, m.reconsume_times, dict(m.properties), now))
            self._cond.notify_all()
        return status

    def __len__(self) -> int:
        with self._cond:
            return len(self.deliveries)

    def wait_for(self, n: int, timeout: float = 20.0) -> bool:
        """Wait until at least ``n`` deliveries were recorded."""
        end = time.monotonic() + timeout
        with self._cond:
            while len(self.deliveries) < n:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def ids(self) -> Counter[str]:
        with self._cond:
            return Counter(d.msg_id for d in self.deliveries)

    def bodies(self) -> list[bytes]:
        with self._cond:
            return [d.body for d in self.deliveries]


def push_consumer(namesrv: str, group: str, topic: str, listener: Recorder, expression: str = "*",
                  **kw: object) -> PushConsumer:
    """A started push consumer reading ``topic`` from its first offset."""
    kw.setdefault("consume_from_where", ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c = PushConsumer(group, namesrv, **kw)  # type: ignore[arg-type]
    c.subscribe(topic, expression)
    c.register_listener(listener)
    return c.start()


def owned_queues(consumer: PushConsumer) -> set:
    """The queues ``consumer`` holds, its retry topics' apart. Its loop thread changes the table meanwhile: list()
    copies it at once, where iterating it here could meet a change (dictionary changed size)."""
    return {mq for mq in list(consumer.queues) if not mq.topic.startswith("%RETRY%")}


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, step: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def addr_of(hostport: str) -> tuple[str, int]:
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


class RawClient:
    """One TCP connection speaking remoting frames by hand: requests no client of ours would send. One
    connection for several calls, because the broker ties a heartbeat's registration to its connection."""

    def __init__(self, hostport: str) -> None:
        self.sock = socket.create_connection(addr_of(hostport), timeout=5)
        self.decoder = FrameDecoder()

    def call(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
        request = RemotingCommand.request(code, ext or {}, body=body)
        self.sock.sendall(encode_command(request))
        while True:
            resp = self.decoder.next_command()
            if resp is not None and resp.is_response and resp.opaque == request.opaque:
                return resp
            if resp is not None:  # a request of the broker's (NOTIFY_CONSUMER_IDS_CHANGED): not ours to answer
                continue
            data = self.sock.recv(65536)
            assert data, "connection closed without an answer"
            self.decoder.receive_data(data)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def heartbeat(raw: RawClient, group: str, *topics: str) -> None:
    """A consumer group subscribed to ``topics`` on ``raw``'s connection (for as long as it stays open)."""
    body = {"clientID": f"vis-{group}", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        "subscriptionDataSet": [{"topic": t, "subString": "*"} for t in topics]}]}
    assert raw.call(RequestCode.HEART_BEAT, body=orjson.dumps(body)).code == ResponseCode.SUCCESS


def forged_record(fake: MessageExt, at: int) -> bytes:
    """``fake`` as the store would write it at commit-log offset ``at``: a whole record, valid in every field (magic,
    PHYSICALOFFSET, CRC trailer), that a producer can carry in the body of a plain message."""
    fake.commit_log_offset = at
    rec = encode_record(fake)
    seal(rec)
    return bytes(rec)


def carry_forged_record(producer: Producer, topic: str, fake: MessageExt) -> str:
    """Send plain messages to ``topic`` whose body is ``forged_record(fake, ...)`` until one lands where it says it
    is; the offset message id (the broker's address, the commit-log offset) of the forged record. Each send's record
    has the same size, so the third lands where the first two predict."""
    landed: list[int] = []
    for _ in range(6):
        at = landed[-1] + (landed[-1] - landed[-2]) + HEAD_SIZE if len(landed) > 1 else 0
        r = producer.send(Message(topic, forged_record(fake, at)))
        host, offset = decode_offset_msg_id(r.offset_msg_id)
        landed.append(offset)
        if offset + HEAD_SIZE == at:
            return create_offset_msg_id(host, at)
    raise AssertionError(f"the forged record never landed where it said: {landed}")


def roundtrip(hostport: str, cmd: RemotingCommand) -> RemotingCommand:
    """One request on a fresh connection, its answer."""
    with RawClient(hostport) as raw:
        return raw.call(cmd.code, cmd.ext_fields, cmd.body)


def messages_out(metrics_addr: str, topic: str, group: str) -> float:
    """The broker's own count of ``topic``'s messages that ``group`` pulled (``rocketmq_messages_out``, from its
    Prometheus endpoint): what left the broker."""
    text = urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=5).read().decode()
    total = 0.0
    for labels, value in re.findall(r"^rocketmq_messages_out_total{(.*)} (\S+)$", text, re.M):
        if {f'topic="{topic}"', f'consumer_group="{group}"'} <= set(labels.split(",")):
            total += float(value)
    return total


if TYPE_CHECKING:
    import pytest

    from tests.e2e.cluster import Cluster
    from txmq.client.base import ClientBase


def one_held_message_per_queue(cluster: Cluster, topic: str, queue_nums: int) -> list[MessageQueue]:
    """``topic`` created with ``queue_nums`` queues on the cluster's broker (started here), one message in each."""
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(topic, queue_nums=queue_nums)
    cluster.wait_route(topic)
    with Producer(f"p_{topic}", cluster.namesrv_addr) as producer:
        queues = producer.publish_queues(topic)
        for mq in queues:
            producer.send(Message(topic, b"held"), queue=mq)
    return queues


def member_holding_every_queue(cluster: Cluster, group: str, topic: str, queues: list[MessageQueue],
                               release: threading.Event, **kwargs: Any) -> PushConsumer:
    """A started push consumer of ``group`` (from the first offset) whose listener holds each call until
    ``release`` (30 s at most), returned once a call runs on every one of ``queues``."""
    entered = threading.Semaphore(0)

    def held(msgs: list[MessageExt]) -> ConsumeStatus:
        entered.release()
        release.wait(30)
        return ConsumeStatus.SUCCESS

    member = PushConsumer(group, cluster.namesrv_addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                          **kwargs)
    member.subscribe(topic)
    member.register_listener(held)
    member.start()
    for _ in queues:
        if not entered.acquire(timeout=20):
            member.shutdown()
            raise AssertionError("no listener call in progress on every queue")
    return member


def hold_unregister(client: ClientBase, monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Hold ``client``'s shutdown in its unregistration, its loop still running: (set once the shutdown got there,
    set by the test to let it go on)."""
    assert client.instance is not None
    unregistering, release = threading.Event(), threading.Event()
    real_unregister = client.instance.unregister

    async def held_unregister(**kwargs: str) -> None:
        unregistering.set()
        await asyncio.to_thread(release.wait, 10)
        await real_unregister(**kwargs)

    monkeypatch.setattr(client.instance, "unregister", held_unregister)
    return unregistering, release


@contextlib.contextmanager
def silent_servers(count: int) -> Iterator[list[str]]:
    """``count`` addresses that accept connections and never answer (a hung name server, a half-open path):
    listening sockets nobody accepts on, closed at the end."""
    listening = [socket.create_server(("127.0.0.1", 0)) for _ in range(count)]
    try:
        yield [f"127.0.0.1:{s.getsockname()[1]}" for s in listening]
    finally:
        for s in listening:
            s.close()
