"""An orderly consumer whose listener runs on the client's loop (``listener_on_loop``) gives the loop a turn
after each batch: a queue's backlog does not hold the consumer's pulls, heartbeats, lock renewals and other
queues until all of it is consumed."""

from __future__ import annotations

import asyncio

from tests.e2e.helpers import push_consumer, wait_until
from txmq import Admin, ConsumeStatus, Message, Producer
from txmq.client.consumer import MessageExt


def test_the_loop_gets_a_turn_between_orderly_batches(cluster):
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("ord_turns", queue_nums=1, order=True)
    with Producer("p_ord_turns", cluster.namesrv_addr) as producer:
        producer.send_batch([Message("ord_turns", f"m{i}".encode()) for i in range(200)])
    calls = {"n": 0, "probe_posted_at": -1, "probe_ran_at": -1}

    def probe() -> None:
        calls["probe_ran_at"] = calls["n"]

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        calls["n"] += 1
        if calls["n"] == 10:  # a callback for the loop's next turn, posted mid-backlog
            calls["probe_posted_at"] = calls["n"]
            asyncio.get_running_loop().call_soon(probe)
        return ConsumeStatus.SUCCESS

    consumer = push_consumer(cluster.namesrv_addr, "g_ord_turns", "ord_turns", listener,  # type: ignore[arg-type]
                             orderly=True, listener_on_loop=True, pull_batch_size=64)
    try:
        assert wait_until(lambda: calls["n"] >= 200, 20), calls
    finally:
        consumer.shutdown()
    # the probe ran at the next batch's turn, not after the rest of the pulled backlog (54 more messages)
    assert 10 <= calls["probe_ran_at"] <= 11, calls
