"""A consumer the broker does not list among its group's members (its heartbeat refused, as while the broker is
busy creating topics, or lost) keeps the queues it holds and asks again soon, instead of dropping them or taking
every queue beside the members the broker does list (RocketMQ's rebalance skips such a topic). A real broker and
clients; the broker's list of members is what this consumer's lookup returns."""

from __future__ import annotations

from tests.e2e.helpers import Recorder, push_consumer, wait_until
from txmq import Admin


def _owned(consumer) -> set:
    return {mq for mq in consumer.queues if not mq.topic.startswith("%RETRY%")}


def test_a_consumer_not_listed_keeps_its_queues_and_asks_again(cluster, monkeypatch):
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("unlisted_t", queue_nums=4)
    c1 = push_consumer(cluster.namesrv_addr, "g_unlisted", "unlisted_t", Recorder(), rebalance_interval_s=600)
    c2 = push_consumer(cluster.namesrv_addr, "g_unlisted", "unlisted_t", Recorder(), rebalance_interval_s=600)
    try:
        c1._call(c1.rebalance())  # the split of two, now that both are registered
        assert wait_until(lambda: len(_owned(c1)) == 2 and len(_owned(c2)) == 2, 15), (_owned(c1), _owned(c2))
        held = _owned(c1)
        assert c1.instance is not None and c2.instance is not None
        listed = [c2.instance.client_id]
        asked: list[str] = []

        async def only_the_other(broker_name: str) -> list[str]:
            asked.append(broker_name)
            return listed

        monkeypatch.setattr(c1, "_consumer_ids", only_the_other)
        assert not c1._call(c1.rebalance())  # incomplete: asked again within a second
        assert _owned(c1) == held and asked
        listed.append(c1.instance.client_id)  # listed again: the split of two as before
        assert c1._call(c1.rebalance())
        assert _owned(c1) == held
    finally:
        c1.shutdown()
        c2.shutdown()
