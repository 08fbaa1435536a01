"""A consumer that cannot get its group's member list from the broker (its heartbeat deferred, as while the broker
is busy creating topics, or lost) keeps the queues it holds, as RocketMQ's rebalance skips such a topic, instead of
taking every queue beside the members the broker lists; listed without itself, it holds none (RocketMQ's
averaging gives it none). A real broker and clients; the member list is what this consumer's lookup returns."""

from __future__ import annotations

from tests.e2e.helpers import Recorder, owned_queues, push_consumer, wait_until
from txmq import Admin


def test_a_consumer_without_its_group_s_member_list_keeps_its_queues(cluster, monkeypatch):
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("unlisted_t", queue_nums=4)
    c1 = push_consumer(cluster.namesrv_addr, "g_unlisted", "unlisted_t", Recorder(), rebalance_interval_s=600)
    c2 = push_consumer(cluster.namesrv_addr, "g_unlisted", "unlisted_t", Recorder(), rebalance_interval_s=600)
    try:
        c1._call(c1.rebalance())  # the split of two, now that both are registered
        assert wait_until(lambda: len(owned_queues(c1)) == 2 and len(owned_queues(c2)) == 2, 15), \
            (owned_queues(c1), owned_queues(c2))
        held = owned_queues(c1)
        assert c1.instance is not None and c2.instance is not None
        listed: list[str] = []

        async def members(broker_name: str) -> list[str]:
            return listed

        monkeypatch.setattr(c1, "_consumer_ids", members)
        c1._call(c1.rebalance())  # no list: nothing taken, nothing dropped
        assert owned_queues(c1) == held
        listed.append(c2.instance.client_id)  # listed without itself: none
        c1._call(c1.rebalance())
        assert owned_queues(c1) == set()
        listed.append(c1.instance.client_id)  # both listed: the split of two as before
        c1._call(c1.rebalance())
        assert owned_queues(c1) == held
    finally:
        c1.shutdown()
        c2.shutdown()
