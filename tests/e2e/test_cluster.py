"""Several brokers behind one name server: sharing a group's queues, rebalancing, retries, the dead-letter
queue, and consumer offsets across broker restarts. Real processes, real sockets."""

from __future__ import annotations

import itertools
import signal
import threading
import time
from collections.abc import Callable

import pytest

from tests.e2e.helpers import Recorder, owned_queues, push_consumer, wait_until
from txmq import (
    Admin,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
    SendStatus,
)
from txmq.message import MessageExt

# Every retry level is one second, so RECONSUME_LATER comes back quickly.
FAST_RETRY = {"messageDelayLevel": " ".join(["1s"] * 18)}


def test_group_of_two_on_two_brokers_gets_every_message_once_also_after_one_leaves(cluster, listener_on_loop):
    cluster.start_broker("broker-a")
    cluster.start_broker("broker-b")
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("orders", queue_nums=4)
    cluster.wait_route("orders", brokers=2)

    r1, r2 = Recorder(delay_s=0.01), Recorder(delay_s=0.01)
    c1 = push_consumer(cluster.namesrv_addr, "g_pair", "orders", r1, consume_thread_nums=2,
                       listener_on_loop=listener_on_loop)
    c2 = push_consumer(cluster.namesrv_addr, "g_pair", "orders", r2, consume_thread_nums=2,
                       listener_on_loop=listener_on_loop)
    try:
        # The group splits the 8 queues (4 per broker) between its two members, without overlap.
        assert wait_until(lambda: len(owned_queues(c1)) == 4 and len(owned_queues(c2)) == 4, 15), \
            (owned_queues(c1), owned_queues(c2))
        assert not owned_queues(c1) & owned_queues(c2)
        assert {mq.broker_name for mq in owned_queues(c1) | owned_queues(c2)} == {"broker-a", "broker-b"}

        with Producer("p_pair", cluster.namesrv_addr) as producer:
            sent = [producer.send(Message("orders", f"o{i}".encode(), keys=f"k{i}")) for i in range(300)]
            assert {r.message_queue.broker_name for r in sent} == {"broker-a", "broker-b"}
            assert wait_until(lambda: len(r1) + len(r2) >= 100, 20)
            assert len(r1) > 0 and len(r2) > 0  # both members consumed
            t0 = time.monotonic()
            c1.shutdown()  # leaves mid-stream, with pulled messages not yet consumed: its queues move to c2
            assert time.monotonic() - t0 < 3.0  # waits for listener calls in progress only
            assert wait_until(lambda: len(owned_queues(c2)) == 8, 15)
            sent += [producer.send(Message("orders", f"o{i}".encode(), keys=f"k{i}")) for i in range(300, 400)]
        assert all(r.status == SendStatus.SEND_OK for r in sent)

        expected = {r.msg_id for r in sent}
        assert wait_until(lambda: set(r1.ids()) | set(r2.ids()) >= expected, 30)
        counts = r1.ids() + r2.ids()
        assert set(counts) == expected
        duplicates = {k: n for k, n in counts.items() if n != 1}
        assert not duplicates, f"{len(duplicates)} messages delivered more than once"
    finally:
        c1.shutdown()
        c2.shutdown()


def test_reconsume_later_redelivers_with_reconsume_times_one(cluster, listener_on_loop):
    cluster.start_broker("broker-a", FAST_RETRY)
    failed_once: set[str] = set()

    def decide(m):
        if m.msg_id in failed_once:
            return ConsumeStatus.SUCCESS
        failed_once.add(m.msg_id)
        return ConsumeStatus.RECONSUME_LATER

    rec = Recorder(decide)
    with Producer("p_retry", cluster.namesrv_addr) as producer:
        r = producer.send(Message("retry_t", b"again", tags="T1", keys="K1", properties={"color": "red"}))
    consumer = push_consumer(cluster.namesrv_addr, "g_retry", "retry_t", rec, listener_on_loop=listener_on_loop)
    try:
        assert rec.wait_for(2, 20)
        first, second = rec.deliveries[:2]
        assert first.msg_id == second.msg_id == r.msg_id
        assert (first.reconsume_times, second.reconsume_times) == (0, 1)
        # The listener sees the message as it was sent, not as the retry topic stores it.
        assert second.topic == "retry_t" and second.body == b"again"
        assert (second.tags, second.keys, second.properties.get("color")) == ("T1", "K1", "red")
        assert second.at - first.at >= 0.8  # came back after the (1 s) delay level, not at once
        assert not rec.wait_for(3, 2.5)  # success is final
    finally:
        consumer.shutdown()


def _dead_letters(cluster, group: str) -> int:
    """How many messages ``%DLQ%<group>`` holds on broker-a."""
    with Admin(cluster.namesrv_addr) as admin:
        topics = admin.stats()["broker-a"]["topics"]
    return int(topics.get(f"%DLQ%{group}", {}).get("messages", 0))


def test_after_max_reconsume_times_the_message_is_in_the_dlq(cluster, listener_on_loop):
    cluster.start_broker("broker-a", FAST_RETRY)
    rec = Recorder(lambda m: ConsumeStatus.RECONSUME_LATER)
    with Producer("p_dlq", cluster.namesrv_addr) as producer:
        sent = producer.send(Message("dlq_t", b"poison", keys="poison-1"))
        good = producer.send(Message("dlq_t", b"fine"))
    consumer = push_consumer(cluster.namesrv_addr, "g_dlq", "dlq_t", rec, max_reconsume_times=2,
                             listener_on_loop=listener_on_loop)
    try:
        assert wait_until(lambda: _dead_letters(cluster, "g_dlq") == 2, 20)
        for msg_id in (sent.msg_id, good.msg_id):
            times = sorted(d.reconsume_times for d in rec.deliveries if d.msg_id == msg_id)
            assert times == [0, 1, 2]  # first delivery + max_reconsume_times retries, then the DLQ
        seen = len(rec)
        assert not rec.wait_for(seen + 1, 2.5)  # nothing comes back from the DLQ
    finally:
        consumer.shutdown()
    # As in RocketMQ 5 the dead-letter topic is readable (4.x made it write-only): an operator reads the dead
    # letters (txmq admin printMsg, the console) before resending them; no consumer subscribes to it by itself.
    with PullConsumer("g_dlq_reader", cluster.namesrv_addr) as puller:
        dlq = MessageQueue("%DLQ%g_dlq", "broker-a", 0)
        assert puller.fetch_subscribe_message_queues("%DLQ%g_dlq") == [dlq]
        assert sorted(m.body for m in puller.pull(dlq).msgs) == [b"fine", b"poison"]
    assert _dead_letters(cluster, "g_dlq") == 2


def test_max_reconsume_times_minus_one_means_sixteen_for_a_concurrent_consumer(cluster):
    """-1, the Java client's default ``maxReconsumeTimes``, means 16 retries for a concurrent consumer, as RocketMQ's
    ``DefaultMQPushConsumerImpl.getMaxReconsumeTimes`` sends it back: the broker took -1 as it came and put the
    message in the dead letters at its first failure."""
    cluster.start_broker("broker-a", FAST_RETRY)
    rec = Recorder(lambda m: ConsumeStatus.RECONSUME_LATER)
    with Producer("p_dlq_default", cluster.namesrv_addr) as producer:
        producer.send(Message("dlq_default_t", b"poison"))
    consumer = push_consumer(cluster.namesrv_addr, "g_dlq_default", "dlq_default_t", rec, max_reconsume_times=-1)
    try:
        assert wait_until(lambda: _dead_letters(cluster, "g_dlq_default") == 1, 60), rec.deliveries
    finally:
        consumer.shutdown()
    assert [d.reconsume_times for d in rec.deliveries] == list(range(17))


def _poisoned_orderly_topic(cluster, topic: str, bodies: list[bytes]) -> Recorder:
    """A broker with ``topic`` (one queue, orderly) holding ``bodies``, and a recorder whose listener fails every
    message of body ``poison``."""
    cluster.start_broker("broker-a")
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(topic, queue_nums=1, order=True)
    cluster.wait_route(topic)
    with Producer(f"p_{topic}", cluster.namesrv_addr) as producer:
        for body in bodies:
            producer.send(Message(topic, body))
    return Recorder(lambda m: ConsumeStatus.RECONSUME_LATER if m.body == b"poison" else ConsumeStatus.SUCCESS)


def test_orderly_consumer_retries_in_place_then_dead_letters_and_goes_on_in_order(cluster, listener_on_loop):
    """An orderly consumer retries a failed message where it is, ``suspend_s`` apart, holding back the messages
    behind it; out of retries it sends it to the dead letters and goes on with the next, in order."""
    rec = _poisoned_orderly_topic(cluster, "ord_dlq_t", [b"first", b"poison", b"after"])
    consumer = push_consumer(cluster.namesrv_addr, "g_ord_dlq", "ord_dlq_t", rec, orderly=True, max_reconsume_times=2,
                             suspend_s=0.3, listener_on_loop=listener_on_loop)
    try:
        assert rec.wait_for(5, 20)
        assert not rec.wait_for(6, 1.0)
    finally:
        consumer.shutdown()
    mine = [d for d in rec.deliveries if d.topic == "ord_dlq_t"]
    assert [(d.body, d.reconsume_times) for d in mine] == [
        (b"first", 0), (b"poison", 0), (b"poison", 1), (b"poison", 2), (b"after", 0)]
    retries = mine[1:4]
    assert all(b.at - a.at >= 0.25 for a, b in itertools.pairwise(retries))  # suspend_s apart
    assert _dead_letters(cluster, "g_ord_dlq") == 1


def test_max_reconsume_times_minus_one_means_no_limit_for_an_orderly_consumer(cluster, listener_on_loop):
    """-1, the Java client's default ``maxReconsumeTimes``, means no limit for an orderly consumer (RocketMQ's
    ``ConsumeMessageOrderlyService.getMaxReconsumeTimes``: ``Integer.MAX_VALUE``): a failing message is consumed
    again in place past 16 retries, never dead-lettered, the messages behind it waiting. It went to the dead letters
    at its first failure."""
    rec = _poisoned_orderly_topic(cluster, "ord_no_limit", [b"poison", b"after"])
    consumer = push_consumer(cluster.namesrv_addr, "g_ord_no_limit", "ord_no_limit", rec, orderly=True,
                             max_reconsume_times=-1, suspend_s=0.05, listener_on_loop=listener_on_loop)
    try:
        assert rec.wait_for(20, 20), [(d.body, d.reconsume_times) for d in rec.deliveries]
    finally:
        consumer.shutdown()
    assert [(d.body, d.reconsume_times) for d in rec.deliveries[:20]] == [(b"poison", n) for n in range(20)]
    assert _dead_letters(cluster, "g_ord_no_limit") == 0


def _consumer_refusing(cluster, topic: str, rec: Recorder, refuses: Callable[[MessageExt, list[int]], bool],
                       sent: list[int], orderly: bool = True, **kw: object) -> PushConsumer:
    """A started consumer of ``topic`` (orderly unless told: ``suspend_s`` 0.3) whose send-backs (an orderly one's
    are its dead letters) are recorded in ``sent`` (queue offsets) and refused, as a broker would answer, when
    ``refuses(msg, sent)`` says so."""
    consumer = PushConsumer(f"g_{topic}", cluster.namesrv_addr, orderly=orderly, suspend_s=0.3,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **kw)  # type: ignore[arg-type]
    consumer.subscribe(topic, "*")
    consumer.register_listener(rec)
    real = consumer._send_back_async

    async def send_back(msg: MessageExt, broker_name: str, delay_level: int) -> bool:
        sent.append(msg.queue_offset)
        if refuses(msg, sent):
            return False
        return await real(msg, broker_name, delay_level)

    consumer._send_back_async = send_back  # type: ignore[method-assign]
    return consumer.start()


def test_orderly_consumer_whose_dead_letter_send_is_refused_consumes_the_message_again_and_loses_nothing(
        cluster, listener_on_loop):
    """Out of retries, a message the broker would not take into the dead letters (the first send-back refused here)
    stays where it is and is consumed again after ``suspend_s``, counted one more try, as RocketMQ's orderly service
    suspends and counts it; it was dropped from the queue and its offset committed past it, the message lost (and
    later, kept, it was consumed again with the count it had)."""
    rec = _poisoned_orderly_topic(cluster, "ord_dlq_refused", [b"poison", b"after"])
    refused: list[bytes] = []

    def refuse_the_first(msg, sent: list[int]) -> bool:
        if len(sent) == 1:
            refused.append(msg.body)
        return len(sent) == 1

    consumer = _consumer_refusing(cluster, "ord_dlq_refused", rec, refuse_the_first, [],
                                          max_reconsume_times=1, listener_on_loop=listener_on_loop)
    try:
        assert rec.wait_for(4, 20), [(d.body, d.reconsume_times) for d in rec.deliveries]
        assert not rec.wait_for(5, 1.0)
    finally:
        consumer.shutdown()
    assert refused == [b"poison"]
    # poison, its retry, refused by the dead letters: counted one more try (RocketMQ's checkReconsumeTimes) and
    # consumed again, still out of retries, taken by the dead letters this time; then the next in order
    assert [(d.body, d.reconsume_times) for d in rec.deliveries] == [
        (b"poison", 0), (b"poison", 1), (b"poison", 2), (b"after", 0)]
    assert _dead_letters(cluster, "g_ord_dlq_refused") == 1


def test_concurrent_consumer_whose_send_back_is_refused_consumes_the_message_again_one_more_try(
        cluster, listener_on_loop):
    """A failed message the broker would not take back (the first send-back refused here) is consumed again by the
    consumer itself, counted one more try, as RocketMQ's concurrent service counts it (``reconsumeTimes + 1``
    before it submits the message again): it came back with the count it had, so send-backs refused for good kept
    it short of the dead letters for good."""
    rec = _poisoned_orderly_topic(cluster, "conc_back_refused", [b"poison"])
    sent: list[int] = []
    consumer = _consumer_refusing(cluster, "conc_back_refused", rec, lambda _msg, sent: len(sent) == 1, sent,
                                  orderly=False, listener_on_loop=listener_on_loop)
    try:
        assert rec.wait_for(2, 20), [(d.body, d.reconsume_times) for d in rec.deliveries]
    finally:
        consumer.shutdown()
    assert [(d.body, d.reconsume_times) for d in rec.deliveries[:2]] == [(b"poison", 0), (b"poison", 1)]


def test_orderly_batch_partly_taken_by_the_dead_letters_sends_only_the_rest_again(cluster, listener_on_loop):
    """A batch of two out of retries whose second message the dead letters refused once: consumed again, only that
    message is sent again; the first, already taken, is not dead-lettered twice."""
    rec = _poisoned_orderly_topic(cluster, "ord_dlq_part", [b"poison", b"poison", b"after"])
    sent: list[int] = []
    consumer = _consumer_refusing(cluster, "ord_dlq_part", rec, lambda _msg, sent: sent == [0, 1], sent,
                                          max_reconsume_times=0, consume_batch_max_size=2,
                                          listener_on_loop=listener_on_loop)
    try:
        assert wait_until(lambda: any(d.body == b"after" for d in rec.deliveries), 20), rec.bodies()
    finally:
        consumer.shutdown()
    assert sent == [0, 1, 1], sent  # the first message once, the second again after its refusal
    assert _dead_letters(cluster, "g_ord_dlq_part") == 2


def test_orderly_message_behind_a_batch_out_of_retries_gets_its_own_retries(cluster, listener_on_loop):
    """A message that arrives while the batch before it is out of retries (its dead-letter send refused, so it is
    consumed again) gets its own ``max_reconsume_times`` retries before the dead letters: the retry count was the
    batch's first message's, so it went to the dead letters untried."""
    rec = _poisoned_orderly_topic(cluster, "ord_dlq_join", [b"poison"])
    mq = MessageQueue("ord_dlq_join", "broker-a", 0)
    joined = threading.Event()  # the dead letters refuse the first message until the second was pulled
    sent: list[int] = []
    consumer = _consumer_refusing(cluster, "ord_dlq_join", rec,
                                          lambda msg, _sent: msg.queue_offset == 0 and not joined.is_set(), sent,
                                          max_reconsume_times=1, consume_batch_max_size=2,
                                          listener_on_loop=listener_on_loop)
    try:
        assert wait_until(lambda: 0 in sent, 20), rec.bodies()  # out of retries, and refused
        with Producer("p_ord_dlq_join_late", cluster.namesrv_addr) as producer:
            producer.send(Message("ord_dlq_join", b"poison"))
        assert wait_until(lambda: 1 in consumer.queues[mq].msgs, 20)
        joined.set()
        assert wait_until(lambda: _dead_letters(cluster, "g_ord_dlq_join") == 2, 20)
        assert not rec.wait_for(len(rec) + 1, 1.0)  # nothing is consumed again from the dead letters
    finally:
        consumer.shutdown()
    assert [d.reconsume_times for d in rec.deliveries if d.queue_offset == 1] == [0, 1]
    assert sent.count(1) == 1


def test_orderly_batch_consumed_again_without_its_dead_letters_in_order_and_committed_past_them(
        cluster, listener_on_loop):
    """A batch of three out of retries whose middle message the dead letters refused once: only that message is
    consumed again (the two the dead letters took are not), then the next in order; the offset never passes the
    message still to consume, and ends past them all."""
    rec = _poisoned_orderly_topic(cluster, "ord_dlq_again", [b"poison"] * 3 + [b"after"])
    mq = MessageQueue("ord_dlq_again", "broker-a", 0)
    offsets: list[int] = []  # the consumed offset as each dead-letter send leaves

    def refuse_the_middle_once(msg: MessageExt, sent: list[int]) -> bool:
        offsets.append(consumer.queues[mq].consumed_offset())
        return sent == [0, 1]

    sent: list[int] = []
    consumer = _consumer_refusing(cluster, "ord_dlq_again", rec, refuse_the_middle_once, sent,
                                          max_reconsume_times=1, consume_batch_max_size=3,
                                          listener_on_loop=listener_on_loop)
    try:
        assert wait_until(lambda: b"after" in rec.bodies(), 20), rec.bodies()
        assert not rec.wait_for(len(rec) + 1, 1.0)
    finally:
        consumer.shutdown()  # commits its offsets
    assert [(d.queue_offset, d.reconsume_times) for d in rec.deliveries] == [
        (0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (1, 2), (3, 0)]  # the refused one counted one more try
    assert sent == [0, 1, 2, 1], sent
    assert offsets == [0, 1, 1, 1], offsets
    assert _dead_letters(cluster, "g_ord_dlq_again") == 3
    with PullConsumer("g_ord_dlq_again", cluster.namesrv_addr) as puller:
        assert puller.fetch_consume_offset(mq) == 4


def test_orderly_consumer_counts_the_retries_a_message_had_before_it_came_through_the_retry_topic(cluster):
    """A message of the group's retry topic (failed by a concurrent member before) carries its retries so far: an
    orderly consumer judges it by them, as RocketMQ's ``checkReconsumeTimes`` reads the message's own count; its
    count started again at 0, the listener saw 3, 1, 2, 3 and the message got ``max_reconsume_times`` more."""
    cluster.start_broker("broker-a", FAST_RETRY)
    with Producer("p_ord_retried", cluster.namesrv_addr) as producer:
        producer.send(Message("ord_retried_t", b"poison"))
    before = Recorder(lambda m: ConsumeStatus.RECONSUME_LATER)
    consumer = push_consumer(cluster.namesrv_addr, "g_ord_retried", "ord_retried_t", before)
    try:  # the third failure sends it back to the retry topic with 3 retries
        assert wait_until(lambda: [d.reconsume_times for d in before.deliveries] == [0, 1, 2], 20), before.deliveries
    finally:
        consumer.shutdown()
    after = Recorder(lambda m: ConsumeStatus.RECONSUME_LATER)
    consumer = push_consumer(cluster.namesrv_addr, "g_ord_retried", "ord_retried_t", after, orderly=True,
                             max_reconsume_times=3, suspend_s=0.3)
    try:
        assert wait_until(lambda: _dead_letters(cluster, "g_ord_retried") == 1, 20)
        assert not after.wait_for(2, 1.0)
    finally:
        consumer.shutdown()
    assert [d.reconsume_times for d in after.deliveries] == [3]  # out of retries: to the dead letters at once


def _consume_exactly(cluster, group: str, topic: str, n: int, timeout: float = 20.0) -> Recorder:
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, group, topic, rec)
    try:
        assert rec.wait_for(n, timeout), f"got {len(rec)} of {n}"
        assert not rec.wait_for(n + 1, 1.0), "more messages than expected"
    finally:
        consumer.shutdown()  # commits its offsets
    return rec


def test_offsets_survive_a_clean_broker_restart(cluster):
    broker = cluster.start_broker("broker-a")
    with Producer("p_restart", cluster.namesrv_addr) as producer:
        for i in range(10):
            producer.send(Message("restart_t", f"before-{i}".encode()))
    first = _consume_exactly(cluster, "g_restart", "restart_t", 10)
    assert sorted(first.bodies()) == sorted(f"before-{i}".encode() for i in range(10))

    broker.stop()  # SIGTERM: offsets persisted, store checkpointed
    broker.start()
    cluster.wait_route("restart_t")
    with Producer("p_restart", cluster.namesrv_addr) as producer:
        for i in range(5):
            producer.send(Message("restart_t", f"after-{i}".encode()))
    second = _consume_exactly(cluster, "g_restart", "restart_t", 5)
    assert sorted(second.bodies()) == sorted(f"after-{i}".encode() for i in range(5))


def _unflushed(admin: Admin) -> bool:
    """Whether broker-a's commit log holds bytes no fsync covered yet (in the page cache only)."""
    store = admin.stats()["broker-a"]["store"]
    return store["flushed_offset"] < store["max_offset"]


# ASYNC_FLUSH with the flush thread waiting a minute: the sends acknowledged last are in the page cache only when the
# broker is killed (dirty pages outlive the process). Recovery drops the cached pages of the tail it reads, so that it
# reads what the disk holds (docs/storage.md, "A failed fsync"): it must drop clean pages only, never these.
@pytest.mark.parametrize("conf", [{"flushDiskType": "SYNC_FLUSH"},
                                  {"flushDiskType": "ASYNC_FLUSH", "flushIntervalCommitLog": 60_000}],
                         ids=["sync-flush", "async-flush-unflushed"])
def test_sigkill_of_the_broker_loses_nothing(cluster, conf):
    broker = cluster.start_broker("broker-a", conf)
    with Producer("p_kill", cluster.namesrv_addr) as producer:
        for i in range(20):
            assert producer.send(Message("kill_t", f"m-{i}".encode())).status == SendStatus.SEND_OK
    _consume_exactly(cluster, "g_kill", "kill_t", 20)
    sent = 20
    with Producer("p_kill", cluster.namesrv_addr) as producer, Admin(cluster.namesrv_addr) as admin:
        # At least 10 more; under ASYNC_FLUSH until some are unflushed (a checkpoint, every 3 s, flushes the log).
        while sent < 30 or (conf["flushDiskType"] == "ASYNC_FLUSH" and not _unflushed(admin)):
            assert producer.send(Message("kill_t", f"m-{sent}".encode())).status == SendStatus.SEND_OK
            sent += 1

    broker.kill(signal.SIGKILL)
    broker.start()
    cluster.wait_route("kill_t")
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "g_kill", "kill_t", rec)
    try:
        # At least once: every unconsumed one comes; consumed ones may come again (offsets not yet flushed).
        assert wait_until(lambda: {f"m-{i}".encode() for i in range(20, sent)} <= set(rec.bodies()), 20)
    finally:
        consumer.shutdown()
    # And every acknowledged message is still in the store.
    with PullConsumer("g_kill_audit", cluster.namesrv_addr) as puller:
        bodies = []
        for mq in puller.fetch_subscribe_message_queues("kill_t"):
            offset = 0
            while True:
                r = puller.pull(mq, offset=offset)
                if not r.msgs:
                    break
                bodies += [m.body for m in r.msgs]
                offset = r.next_begin_offset
    assert sorted(bodies) == sorted(f"m-{i}".encode() for i in range(sent))
