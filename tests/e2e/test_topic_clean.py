"""A deleted topic's messages come back only until an operator cleans them (RocketMQ's ``cleanUnusedTopic``): the
consume queues of a topic the broker's table does not hold are dropped when asked, and a topic created again under
the name starts empty. A delayed message delivered to its topic after the topic's deletion is how such queues come
about in a running broker: the delivery stores it as any put, recreating the queue the deletion dropped. No broker
cleans by itself: its table may lag the cluster's (a slave's, or a slave's made master by hand)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.helpers import RawClient, wait_until
from tests.e2e.test_admin import ok
from txmq import Message, MessageConst, Producer, PullConsumer
from txmq.client.admin import Admin
from txmq.client.pull_consumer import PullStatus
from txmq.remoting.codes import RequestCode, ResponseCode

# Delayed messages are due after a second, and their delivery's progress is saved every 100 ms.
CONF = {"grpcPort": -1, "autoCreateTopicEnable": "false", "messageDelayLevel": "1s",
        "flushConsumerOffsetInterval": 100}


def delivered_and_saved(store: Path, count: int) -> bool:
    """Whether the broker's ``config/delayOffset.json`` says ``count`` delayed messages of level 1 were
    delivered (saved: a kill then does not deliver them again)."""
    try:
        saved = orjson.loads((store / "config" / "delayOffset.json").read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return False
    return int(saved["offsetTable"].get("1", 0)) >= count


def delete_with_a_delivery_after(cluster: Cluster, topic: str) -> Path:
    """``topic`` created with 2 queues, 4 messages sent to it and one delayed (level 1), then deleted; returns once
    the delayed one was delivered to the deleted topic (and that saved). broker-a's store directory."""
    store = cluster.root / "broker-a"
    queues = store / "consumequeue" / topic
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(topic, 2)
    cluster.wait_route(topic)
    with Producer("p_clean", cluster.namesrv_addr) as producer:
        for i in range(4):
            producer.send(Message(topic, f"old {i}".encode()))
        producer.send(Message(topic, b"old delayed", properties={MessageConst.DELAY_TIME_LEVEL: "1"}))
    with Admin(cluster.namesrv_addr) as admin:
        admin.delete_topic(topic)
    assert wait_until(lambda: queues.is_dir() and delivered_and_saved(store, 1), 15), "no delivery to the topic"
    return store


def created_again_and_empty(cluster: Cluster, topic: str) -> None:
    """``topic`` created again: its queues start at offset 0 and a new group pulls nothing from there."""
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(topic, 2)
    cluster.wait_route(topic)
    with PullConsumer("g_clean_new", cluster.namesrv_addr) as pc:
        queues = pc.fetch_subscribe_message_queues(topic)
        assert len(queues) == 2
        for mq in queues:
            r = pc.pull(mq, "*", 0, 32)
            assert r.status != PullStatus.FOUND, f"queue {mq.queue_id} serves the deleted topic's {r.msgs}"
            assert pc.max_offset(mq) == 0


@pytest.mark.parametrize("role", ["master", "slave"])
def test_a_restarted_broker_keeps_the_queues_and_cleans_them_when_asked(cluster, role):
    """Killed and started again, as a master or as a slave of the same store, the broker keeps the queues a late
    delivery made (its table might lag: it cannot tell a deleted topic from one it has not heard of) and drops them
    on CLEAN_UNUSED_TOPIC, answered in any role."""
    broker = cluster.start_broker(conf=CONF)
    store = delete_with_a_delivery_after(cluster, f"clean_{role}")
    broker.kill()
    if role == "master":
        broker.start()
    else:
        broker = cluster.broker(conf={**CONF, "brokerRole": "SLAVE", "brokerId": 1}).start()
    queues = store / "consumequeue" / f"clean_{role}"
    assert queues.is_dir()
    with RawClient(broker.addrs["broker"]) as client:
        resp = client.call(RequestCode.CLEAN_UNUSED_TOPIC)
    assert resp.code == ResponseCode.SUCCESS and orjson.loads(resp.body) == {"topics": [f"clean_{role}"]}
    assert not queues.exists()
    if role == "master":
        created_again_and_empty(cluster, "clean_master")


def test_mqadmin_clean_unused_topic(cluster):
    broker = cluster.start_broker(conf=CONF)
    store = delete_with_a_delivery_after(cluster, "clean_a")
    addr = broker.addrs["broker"]
    out = ok(cluster, "cleanUnusedTopic", "-b", addr)
    assert out == f"clean unused topic success, broker-a {addr}: the queues of 1 topic dropped: clean_a\n"
    assert not (store / "consumequeue" / "clean_a").exists()
    assert ok(cluster, "cleanUnusedTopic", "-c", "DefaultCluster").endswith("the queues of 0 topics dropped\n")
    created_again_and_empty(cluster, "clean_a")
