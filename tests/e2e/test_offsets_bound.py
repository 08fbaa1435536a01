"""Consumer offsets are bounded: only for topics and queues that exist, at most ``consumerOffsetMaxEntries`` of
them, and the offsets file is written only when an offset changed. (An adversarial run had 100,000 made-up
group/topic offsets accepted, the file grown to 4.4 MB and rewritten every 5 s.)"""

from __future__ import annotations

import time

import orjson
from helpers import RawClient

from txmq import Admin
from txmq.remoting.codes import RequestCode, ResponseCode

MAX = 20


def update(raw: RawClient, group: str, topic: str = "offs", queue: int = 0, offset: int = 1):
    return raw.call(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic,
                                                         "queueId": str(queue), "commitOffset": str(offset)})


def test_offsets_are_bounded_and_written_only_when_changed(cluster):
    broker = cluster.start_broker(conf={"consumerOffsetMaxEntries": MAX, "flushConsumerOffsetInterval": 200})
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("offs", queue_nums=2)
    path = cluster.root / "broker-a" / "config" / "consumerOffset.json"
    with RawClient(broker.addrs["broker"]) as raw:
        resp = update(raw, "g", topic="no_such_topic")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST, resp.remark
        resp = update(raw, "g", queue=2)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "queueId[2] is illegal" in (resp.remark or "")
        for i in range(MAX):
            assert update(raw, f"g{i // 2}", queue=i % 2).code == ResponseCode.SUCCESS
        resp = update(raw, "one_too_many")
        assert resp.code == ResponseCode.SYSTEM_ERROR and "consumerOffsetMaxEntries" in (resp.remark or ""), \
            resp.remark
        assert update(raw, "g0", offset=7).code == ResponseCode.SUCCESS  # offsets already kept still move
        time.sleep(0.6)
        saved = orjson.loads(path.read_bytes())["offsetTable"]
        assert sum(len(q) for q in saved.values()) == MAX and saved["offs@g0"] == {"0": 7, "1": 1}
        # Nothing changed: the file is not written again, nor the delay levels' progress.
        delay = path.parent / "delayOffset.json"
        before = path.stat().st_mtime_ns, delay.exists() and delay.stat().st_mtime_ns
        assert update(raw, "g0", offset=7).code == ResponseCode.SUCCESS
        time.sleep(0.8)
        assert (path.stat().st_mtime_ns, delay.exists() and delay.stat().st_mtime_ns) == before
