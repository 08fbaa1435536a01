"""QUERY_CONSUME_QUEUE (321) and ``txmq admin queryCq`` against a live broker process over TCP: the entries come
back as the consume queue holds them, those still buffered in memory (not yet in the queue's file) included; the
group's subscription; bounds on ``count``; unknown topics, queue ids and negative indexes refused with the reason."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.helpers import RawClient, Recorder, push_consumer, wait_until
from tests.e2e.test_admin import admin, ok
from txmq import Message, MessageQueue, Producer, PullConsumer
from txmq.message import MessageExt, java_string_hash
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.store.record import TRAILER_SIZE

TOPIC = "cq_t"
SENT = 230  # past one page of entries (204.8): the first are written to the queue's file, the rest stay buffered
ENTRY = struct.Struct(">qiq")


class Live:
    def __init__(self, cluster: Cluster, stored: list[MessageExt]) -> None:
        self.cluster = cluster
        self.stored = stored  # queue 0, by queue offset

    @property
    def broker(self) -> str:
        return self.cluster.procs[-1].addrs["broker"]

    def query(self, **ext: object) -> tuple[int, dict, str]:
        with RawClient(self.broker) as raw:
            resp = raw.call(RequestCode.QUERY_CONSUME_QUEUE, {k: str(v) for k, v in ext.items()})
        return resp.code, orjson.loads(resp.body) if resp.body else {}, resp.remark or ""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """One broker whose checkpoints leave a queue's few entries buffered (flushConsumeQueueThoroughInterval an
    hour); topic cq_t, SENT messages in queue 0 with tags T0..T2, consumed by group cq_g (subscribed to T0||T1)."""
    cluster = Cluster(Path(tmp_path_factory.mktemp("querycq")))
    try:
        cluster.start_namesrv()
        cluster.start_broker(conf={"grpcPort": -1, "flushConsumeQueueThoroughInterval": 3_600_000})
        ok(cluster, "updateTopic", "-t", TOPIC, "-r", "2", "-w", "2")
        cluster.wait_route(TOPIC)
        with Producer("cq_p", cluster.namesrv_addr) as producer:
            for i in range(SENT):
                producer.send(Message(TOPIC, f"body {i}".encode(), tags=f"T{i % 3}"),
                              selector=lambda mqs, msg, arg: next(q for q in mqs if q.queue_id == 0))
        with PullConsumer("cq_reader", cluster.namesrv_addr) as consumer:
            consumer.fetch_subscribe_message_queues(TOPIC)
            stored: list[MessageExt] = []
            while len(stored) < SENT:
                got = consumer.pull(MessageQueue(TOPIC, "broker-a", 0), "*", len(stored), 32)
                assert got.msgs, got
                stored += got.msgs
        yield Live(cluster, stored)
    finally:
        cluster.close()


def as_stored(m: MessageExt) -> dict[str, object]:
    """The entry the consume queue holds for ``m``: its size in the commit log is its record's with the CRC trailer
    (a pulled message carries the wire size, without it)."""
    return {"physicOffset": m.commit_log_offset, "physicSize": m.store_size + TRAILER_SIZE,
            "tagsCode": java_string_hash(m.tags or ""), "eval": False}


def test_entries_come_back_as_stored_buffered_ones_included(live: Live) -> None:
    on_disk = (live.cluster.root / "broker-a" / "consumequeue" / TOPIC / "0" / f"{0:020d}").read_bytes()
    written = next(i for i, e in enumerate(ENTRY.iter_unpack(on_disk[: 250 * 20])) if e[1] == 0)
    assert 0 < written < SENT  # the queue's newest entries are in memory only
    first = written - 5
    code, body, remark = live.query(topic=TOPIC, queueId=0, index=first, count=20)
    assert code == ResponseCode.SUCCESS, remark
    assert (body["minQueueIndex"], body["maxQueueIndex"]) == (0, SENT)
    assert body["queueData"] == [as_stored(m) for m in live.stored[first:first + 20]]  # across the buffered start
    code, body, _ = live.query(topic=TOPIC, queueId=0, index=SENT - 3, count=10)
    assert code == ResponseCode.SUCCESS
    assert body["queueData"] == [as_stored(m) for m in live.stored[SENT - 3:]]  # stops at the queue's end
    code, body, _ = live.query(topic=TOPIC, queueId=1, index=0, count=10)  # a queue nothing was sent to
    assert (code, body["queueData"], body["maxQueueIndex"]) == (ResponseCode.SUCCESS, [], 0)
    code, body, remark = live.query(topic=TOPIC, queueId=0, index=SENT, count=10)
    assert (code, body["queueData"]) == (ResponseCode.SUCCESS, []) and f"past the queue's end ({SENT})" in remark


def test_the_groups_subscription_comes_with_it(live: Live) -> None:
    code, body, _ = live.query(topic=TOPIC, queueId=0, index=0, count=1, consumerGroup="cq_g")
    assert code == ResponseCode.SUCCESS
    assert body["filterData"] == f"cq_g@{TOPIC} is not online!" and "subscriptionData" not in body
    consumer = push_consumer(live.cluster.namesrv_addr, "cq_g", TOPIC, Recorder(), expression="T0 || T1")
    try:
        assert wait_until(lambda: "subscriptionData" in live.query(topic=TOPIC, queueId=0, index=0, count=1,
                                                                  consumerGroup="cq_g")[1])
        code, body, _ = live.query(topic=TOPIC, queueId=0, index=0, count=1, consumerGroup="cq_g")
        assert code == ResponseCode.SUCCESS
    finally:
        consumer.shutdown()
    sub = body["subscriptionData"]
    assert (sub["topic"], sub["subString"], sorted(sub["tagsSet"])) == (TOPIC, "T0 || T1", ["T0", "T1"])
    assert body["queueData"] == [as_stored(live.stored[0])] and "filterData" not in body


@pytest.mark.parametrize(("ext", "code", "says"), [
    ({"topic": "no_such_topic", "queueId": 0, "index": 0, "count": 1}, ResponseCode.TOPIC_NOT_EXIST,
     "topic no_such_topic does not exist"),
    ({"topic": TOPIC, "queueId": 2, "index": 0, "count": 1}, ResponseCode.SYSTEM_ERROR,
     "queue 2 of topic cq_t does not exist: its queue ids are 0 to 1"),
    ({"topic": TOPIC, "queueId": -1, "index": 0, "count": 1}, ResponseCode.SYSTEM_ERROR, "queue -1 of topic"),
    ({"topic": TOPIC, "queueId": 0, "index": -1, "count": 1}, ResponseCode.SYSTEM_ERROR, "index -1 is negative"),
    ({"topic": TOPIC, "queueId": 0, "index": 0, "count": 1001}, ResponseCode.SYSTEM_ERROR,
     "count 1001 is out of range: 1 to 1000"),
    ({"topic": TOPIC, "queueId": 0, "index": 0, "count": 2**31 - 1}, ResponseCode.SYSTEM_ERROR, "out of range"),
    ({"topic": TOPIC, "queueId": 0, "index": 0, "count": 0}, ResponseCode.SYSTEM_ERROR, "out of range"),
    ({"topic": TOPIC, "queueId": 0, "index": "x", "count": 1}, ResponseCode.SYSTEM_ERROR, "index"),
    ({"topic": "../etc", "queueId": 0, "index": 0, "count": 1}, None, "topic"),
])
def test_bad_requests_are_refused_with_the_reason(live: Live, ext: dict, code: int | None, says: str) -> None:
    got, body, remark = live.query(**ext)
    assert got != ResponseCode.SUCCESS and (code is None or got == code), (got, remark)
    assert says in remark and not body
    assert live.query(topic=TOPIC, queueId=0, index=0, count=1)[0] == ResponseCode.SUCCESS  # the broker carries on


def test_mqadmin_query_cq_prints_the_entries(live: Live) -> None:
    out = ok(live.cluster, "queryCq", "-t", TOPIC, "-q", "0", "-i", "3", "-c", "2", "-b", "broker-a")
    assert f"max: {SENT}, min: 0" in out
    for i in (3, 4):
        m = live.stored[i]
        assert (f"idx: {i}\nConsumeQueueData{{physicOffset={m.commit_log_offset}, "
                f"physicSize={m.store_size + TRAILER_SIZE}, "
                f"tagsCode={java_string_hash(m.tags or '')}, extendDataJson='null', bitMap='null', eval=false, "
                "msg='null'}") in out, out
    assert "idx: 5" not in out
    assert len(re.findall(r"^idx: ", ok(live.cluster, "queryCq", "-t", TOPIC, "-q", "0", "-i", "0"), re.M)) == 10
    out = ok(live.cluster, "queryCq", "-t", TOPIC, "-q", "0", "-i", "0", "-c", "1", "-b", live.broker, "-g", "cq_x")
    assert "Filter data: \ncq_x@cq_t is not online!" in out
    code, out = admin(live.cluster, "queryCq", "-t", TOPIC, "-q", "9", "-i", "0")
    assert code == 1 and "queue 9 of topic cq_t does not exist" in out and "Traceback" not in out
