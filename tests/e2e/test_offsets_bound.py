"""Consumer offsets are bounded: only for topics and queues that exist, at most ``consumerOffsetMaxEntries`` of
them, and the offsets file is written only when an offset changed. (An adversarial run had 100,000 made-up
group/topic offsets accepted, the file grown to 4.4 MB and rewritten every 5 s.)"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import orjson

from tests.e2e.helpers import RawClient, wait_until
from txmq import Admin
from txmq.admin.client import MQAdminExt
from txmq.launch import free_port
from txmq.message import MessageConst, MessageSysFlag, decode_offset_msg_id, properties_to_string
from txmq.remoting.codes import RequestCode, ResponseCode

MAX = 20


def update(raw: RawClient, group: str, topic: str = "offs", queue: int = 0, offset: int = 1):
    return raw.call(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic,
                                                         "queueId": str(queue), "commitOffset": str(offset)})


def _saved(path: Path) -> dict[str, dict[str, int]]:
    """The offsets file's table; empty while it is not there."""
    try:
        return orjson.loads(path.read_bytes())["offsetTable"]
    except FileNotFoundError:
        return {}


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
        # written at the next flush (200 ms), awaited: a loaded machine may take longer
        assert wait_until(lambda: _saved(path).get("offs@g0", {}).get("0") == 7)
        saved = _saved(path)
        assert sum(len(q) for q in saved.values()) == MAX and saved["offs@g0"] == {"0": 7, "1": 1}
        # Nothing changed: the file is not written again, nor the delay levels' progress.
        delay = path.parent / "delayOffset.json"
        before = path.stat().st_mtime_ns, delay.exists() and delay.stat().st_mtime_ns
        assert update(raw, "g0", offset=7).code == ResponseCode.SUCCESS
        time.sleep(0.8)
        assert (path.stat().st_mtime_ns, delay.exists() and delay.stat().st_mtime_ns) == before


def test_pull_counters_are_bounded_for_made_up_groups(cluster):
    """A pull names any consumer group: its counters (messages and bytes pulled per topic and group, the offset a
    group's last pull reached per queue) are kept for at most ``consumerOffsetMaxEntries`` groups and queues, as
    the offsets are. (Unbounded, a peer pulling under ever-new group names grew them, and every stats sample
    copied them, without limit.)"""
    broker = cluster.start_broker(conf={"consumerOffsetMaxEntries": MAX})
    with MQAdminExt(cluster.namesrv_addr) as admin:
        admin.create_topic("pulls", queue_nums=1)
        with RawClient(broker.addrs["broker"]) as raw:
            sent = raw.call(RequestCode.SEND_MESSAGE, {"producerGroup": "p", "topic": "pulls", "queueId": "0"},
                            body=b"m")
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            for i in range(MAX + 5):
                got = raw.call(RequestCode.PULL_MESSAGE, {"consumerGroup": f"pull{i}", "topic": "pulls",
                                                          "queueId": "0", "queueOffset": "0", "maxMsgNums": "1"})
                assert got.code == ResponseCode.SUCCESS and got.body, got.remark  # every pull is still served
        counted = [admin.stats_data(broker.addrs["broker"], "GROUP_GET_NUMS", f"pulls@pull{i}")
                   for i in range(MAX + 5)]
    assert all(c is not None for c in counted[:MAX]) and counted[MAX:] == [None] * 5, counted


def test_transaction_counters_are_bounded_for_made_up_producer_groups(cluster):
    """A half names any producer group: the per-group transaction counters (commits, rollbacks, checks, discards,
    commit latency: the metrics' ``producer_group`` label sets) are kept for at most ``consumerOffsetMaxEntries``
    groups; past that a group's transactions still commit and count in the totals."""
    broker = cluster.start_broker(conf={"consumerOffsetMaxEntries": MAX, "metricsExporterType": "PROM",
                                        "metricsPromExporterPort": free_port(), "grpcPort": -1})
    with MQAdminExt(cluster.namesrv_addr) as admin:
        admin.create_topic("txs", queue_nums=1)
    groups = [f"txg{i}" for i in range(MAX + 5)]
    with RawClient(broker.addrs["broker"]) as raw:
        for group in groups:
            props = {MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: group}
            half = raw.call(RequestCode.SEND_MESSAGE, {
                "producerGroup": group, "topic": "txs", "queueId": "0", "bornTimestamp": "0", "flag": "0",
                "sysFlag": str(MessageSysFlag.TRANSACTION_PREPARED_TYPE), "properties": properties_to_string(props)},
                body=b"t")
            assert half.code == ResponseCode.SUCCESS, half.remark
            end = raw.call(RequestCode.END_TRANSACTION, {
                "producerGroup": group, "tranStateTableOffset": half.ext_fields["queueOffset"],
                "commitLogOffset": str(decode_offset_msg_id(half.ext_fields["msgId"])[1]),
                "commitOrRollback": str(MessageSysFlag.TRANSACTION_COMMIT_TYPE)})
            assert end.code == ResponseCode.SUCCESS, end.remark  # every transaction still commits
    with urllib.request.urlopen(f"http://{broker.addrs['metrics']}/metrics", timeout=5) as r:
        text = r.read().decode()
    counted = re.findall(r'^rocketmq_commit_messages_total\{[^}]*producer_group="(txg\d+)"[^}]*\} (\S+)$', text, re.M)
    assert sorted(g for g, _ in counted) == sorted(groups[:MAX]), counted
    assert all(float(v) == 1.0 for _, v in counted), counted
