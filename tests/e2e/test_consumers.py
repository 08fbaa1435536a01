"""Ways to send and consume over real sockets: broadcasting, orderly, pull, batch, oneway, delayed messages and
tag filtering."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

from tests.e2e.helpers import (
    Recorder,
    member_holding_every_queue,
    one_held_message_per_queue,
    push_consumer,
    wait_until,
)
from txmq import (
    Admin,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageConst,
    MessageModel,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendStatus,
)
from txmq.errors import ClientError

pytestmark = pytest.mark.dated  # run again at a fixed month end by make test (Makefile, DATED_AT)


def test_broadcasting_gives_every_consumer_every_message(cluster, listener_on_loop):
    cluster.start_broker()
    r1, r2 = Recorder(), Recorder()
    c1 = push_consumer(cluster.namesrv_addr, "g_bc", "bc_t", r1, message_model=MessageModel.BROADCASTING,
                       listener_on_loop=listener_on_loop)
    c2 = push_consumer(cluster.namesrv_addr, "g_bc", "bc_t", r2, message_model=MessageModel.BROADCASTING,
                       listener_on_loop=listener_on_loop)
    try:
        with Producer("p_bc", cluster.namesrv_addr) as producer:
            ids = {producer.send(Message("bc_t", f"b{i}".encode())).msg_id for i in range(40)}
        assert r1.wait_for(40, 20) and r2.wait_for(40, 20)
        assert r1.ids() == r2.ids() == {i: 1 for i in ids}
        assert len(c1.queues) == len(c2.queues) == 4  # each takes every queue
    finally:
        c1.shutdown()
        c2.shutdown()


def test_orderly_consumer_keeps_per_queue_order(cluster, listener_on_loop):
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("order_t", queue_nums=4, order=True)
    cluster.wait_route("order_t")
    with Producer("p_order", cluster.namesrv_addr) as producer:
        results = [producer.send_orderly(Message("order_t", f"{i % 6}:{i}".encode()), sharding_key=i % 6)
                   for i in range(120)]
    queue_of_key: dict[int, set[int]] = defaultdict(set)
    for i, r in enumerate(results):
        queue_of_key[i % 6].add(r.queue_id)
    assert all(len(q) == 1 for q in queue_of_key.values())  # one sharding key, one queue

    rec = Recorder(delay_s=0.002)
    consumer = push_consumer(cluster.namesrv_addr, "g_order", "order_t", rec, orderly=True, consume_thread_nums=4,
                             listener_on_loop=listener_on_loop)
    try:
        assert rec.wait_for(120, 30)
    finally:
        consumer.shutdown()
    per_queue: dict[int, list[int]] = defaultdict(list)
    per_key: dict[int, list[int]] = defaultdict(list)
    for d in rec.deliveries:
        per_queue[d.queue_id].append(d.queue_offset)
        key, seq = map(int, d.body.split(b":"))
        per_key[key].append(seq)
    assert len(rec.deliveries) == 120
    for offsets in per_queue.values():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    for key, seqs in per_key.items():
        assert seqs == list(range(key, 120, 6))


def test_pull_consumer_reads_offsets_and_long_polls(cluster):
    cluster.start_broker()
    with Producer("p_pull", cluster.namesrv_addr) as producer:
        sent = [producer.send(Message("pull_t", f"p{i}".encode(), tags="A" if i % 2 else "B")) for i in range(12)]
        with PullConsumer("g_pull", cluster.namesrv_addr) as puller:
            mqs = puller.fetch_subscribe_message_queues("pull_t")
            assert len(mqs) == 4
            got = {}
            for mq in mqs:
                r = puller.pull(mq, offset=0, max_nums=32)
                assert r.status == PullStatus.FOUND
                assert r.next_begin_offset == puller.max_offset(mq) == r.max_offset == len(r.msgs)
                assert [m.queue_offset for m in r.msgs] == list(range(len(r.msgs)))
                got.update({m.msg_id: m.body for m in r.msgs})
            assert got == {s.msg_id: f"p{i}".encode() for i, s in enumerate(sent)}

            mq = sent[0].message_queue
            # Tag filtering on a pull: only B messages, the next offset moves past the rest.
            r = puller.pull(mq, "B", offset=0)
            assert r.msgs and {m.tags for m in r.msgs} == {"B"}
            # The group's offsets are the application's to commit.
            assert puller.fetch_consume_offset(mq) in (-1, 0)
            puller.update_consume_offset(mq, 2)
            assert puller.fetch_consume_offset(mq) == 2
            # At the end of the queue: nothing new, at once ...
            end = puller.max_offset(mq)
            t0 = time.monotonic()
            assert puller.pull(mq, offset=end).status == PullStatus.NO_NEW_MSG
            assert time.monotonic() - t0 < 1.0
            # ... or held until a message arrives (long polling), answered as soon as it does.
            later = threading.Timer(0.5, lambda: producer.send(Message("pull_t", b"late"), queue=mq))
            later.start()
            t0 = time.monotonic()
            r = puller.pull(mq, offset=end, block_s=10)
            waited = time.monotonic() - t0
            later.join()
            assert r.status == PullStatus.FOUND and [m.body for m in r.msgs] == [b"late"]
            assert 0.3 < waited < 5


def test_batch_send_stores_consecutive_offsets_in_one_queue(cluster):
    cluster.start_broker()
    msgs = [Message("batch_t", f"x{i}".encode(), tags="TB", keys=f"key{i}", properties={"n": str(i)})
            for i in range(10)]
    with Producer("p_batch", cluster.namesrv_addr) as producer:
        r = producer.send_batch(msgs)
    assert r.status == SendStatus.SEND_OK
    assert r.queue_offset == 0
    ids = r.msg_id.split(",")
    assert len(ids) == 10
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "g_batch", "batch_t", rec)
    try:
        assert rec.wait_for(10, 20)
    finally:
        consumer.shutdown()
    by_body = {d.body: d for d in rec.deliveries}
    assert len(rec.deliveries) == 10
    for i in range(10):
        d = by_body[f"x{i}".encode()]
        assert (d.queue_id, d.queue_offset, d.msg_id) == (r.queue_id, i, ids[i])
        assert (d.tags, d.keys, d.properties["n"]) == ("TB", f"key{i}", str(i))


def test_oneway_sends_arrive(cluster):
    cluster.start_broker()
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "g_oneway", "oneway_t", rec)
    try:
        with Producer("p_oneway", cluster.namesrv_addr) as producer:
            producer.send(Message("oneway_t", b"first"))  # creates the topic
            for i in range(30):
                producer.send_oneway(Message("oneway_t", f"o{i}".encode()))
        assert rec.wait_for(31, 20)
        assert sorted(rec.bodies()) == sorted([b"first", *(f"o{i}".encode() for i in range(30))])
    finally:
        consumer.shutdown()


def test_delayed_message_arrives_after_its_delay_not_before(cluster):
    cluster.start_broker(conf={"messageDelayLevel": "1s 3s 10s"})
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "g_delay", "delay_t", rec)
    try:
        with Producer("p_delay", cluster.namesrv_addr) as producer:
            producer.send(Message("delay_t", b"now"))
            assert rec.wait_for(1, 10)
            t0 = time.monotonic()
            r = producer.send(Message("delay_t", b"later", tags="D",
                                      properties={MessageConst.DELAY_TIME_LEVEL: "2"}))
        assert r.status == SendStatus.SEND_OK
        assert not rec.wait_for(2, 2.5)  # level 2 = 3 s: not before
        assert rec.wait_for(2, 5)
        d = rec.deliveries[1]
        assert d.body == b"later" and d.tags == "D" and d.topic == "delay_t" and d.msg_id == r.msg_id
        assert 2.8 <= d.at - t0 < 6
    finally:
        consumer.shutdown()


def test_tag_expression_delivers_only_matching_tags(cluster):
    cluster.start_broker()
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "g_tags", "tags_t", rec, expression="TagA || TagB")
    try:
        with Producer("p_tags", cluster.namesrv_addr) as producer:
            for i in range(30):
                producer.send(Message("tags_t", f"{i}".encode(), tags=("TagA", "TagB", "TagC")[i % 3]))
            producer.send(Message("tags_t", b"untagged"))
        assert rec.wait_for(20, 20)
        assert not rec.wait_for(21, 1.5)
        assert sorted(int(b) for b in rec.bodies()) == [i for i in range(30) if i % 3 != 2]
        assert {d.tags for d in rec.deliveries} == {"TagA", "TagB"}
    finally:
        consumer.shutdown()
    # The filtered-out messages still count as consumed: the group has no lag.
    with Admin(cluster.namesrv_addr) as admin:
        groups = admin.stats()["broker-a"]["consumerGroups"]
    assert groups["tags_t@g_tags"]["lag"] == 0


class SlowListener:
    """Records each call's size and thread; sleeps like a listener that writes to a database."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sizes: list[int] = []
        self.threads: set[int] = set()
        self.bodies: list[bytes] = []

    def __call__(self, msgs):  # type: ignore[no-untyped-def]
        time.sleep(0.005)
        with self.lock:
            self.sizes.append(len(msgs))
            self.threads.add(threading.get_ident())
            self.bodies.extend(m.body for m in msgs)
        return ConsumeStatus.SUCCESS


@pytest.mark.parametrize("on_loop", [False, True], ids=["consume-threads", "listener-on-loop"])
def test_concurrent_consumer_calls_the_listener_per_batch_size_on_its_threads(cluster, on_loop):
    """One pull's messages are spread over the consume threads (a task per thread, not per message), and each
    listener call still gets at most ``consume_batch_max_size`` messages. With ``listener_on_loop`` every call
    runs on the client's loop thread, and the consume threads are never started."""
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("conc_t", queue_nums=1)
    cluster.wait_route("conc_t")
    with Producer("p_conc", cluster.namesrv_addr) as producer:
        for i in range(0, 200, 50):
            producer.send_batch([Message("conc_t", f"c{j}".encode()) for j in range(i, i + 50)])
    for batch_max in (1, 3):
        listener = SlowListener()
        consumer = PushConsumer(f"g_conc_{batch_max}", cluster.namesrv_addr, consume_thread_nums=4,
                                consume_batch_max_size=batch_max, listener_on_loop=on_loop,
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe("conc_t")
        consumer.register_listener(listener)
        consumer.start()
        assert consumer._runtime is not None
        loop_thread = consumer._runtime._thread.ident
        try:
            deadline = time.monotonic() + 20
            while len(listener.bodies) < 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            pool = f"txmq-consume-g_conc_{batch_max}"
            consume_threads = [t for t in threading.enumerate() if t.name.startswith(pool)]
        finally:
            consumer.shutdown()
        assert sorted(listener.bodies) == sorted(f"c{j}".encode() for j in range(200))  # each once
        assert max(listener.sizes) <= batch_max and sum(listener.sizes) == 200
        if on_loop:
            assert listener.threads == {loop_thread}
            assert not consume_threads
        else:
            assert len(listener.threads) > 1  # one queue, yet consumed on several threads at once
            assert loop_thread not in listener.threads


def test_a_push_consumer_started_again_consumes(cluster, listener_on_loop):
    """A ``PushConsumer`` shut down and started again consumes what is sent after: its consume threads are its own at
    each start. Its pool was the one the first ``shutdown()`` ended, and every pulled batch raised on the loop
    ("cannot schedule new futures after shutdown"), consumed never."""
    cluster.start_broker()
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "g_again", "again_t", rec, listener_on_loop=listener_on_loop)
    consumer.shutdown()
    consumer.start()
    try:
        with Producer("p_again", cluster.namesrv_addr) as producer:
            producer.send(Message("again_t", b"after the restart"))
        assert rec.wait_for(1, 20)
    finally:
        consumer.shutdown()
    assert rec.bodies() == [b"after the restart"]


def test_consumer_keeps_its_queues_while_the_broker_restarts(cluster):
    """A clean stop unregisters the broker, so for a moment the name server has no route for its topics. The push
    consumer keeps its queues and offsets through that, as RocketMQ's rebalance leaves a topic without a route as
    it is: it used to release them and take them again from the broker's committed offsets once the broker was
    back, so everything consumed since the last commit came again (522 duplicates at the soak's restart)."""
    broker = cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("restart_t", queue_nums=4)
    cluster.wait_route("restart_t")
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "g_restart", "restart_t", rec, rebalance_interval_s=0.5,
                             persist_interval_s=3600)  # nothing committed: a re-taken queue starts at 0
    try:
        with Producer("p_restart", cluster.namesrv_addr) as producer:
            first = {producer.send(Message("restart_t", f"a{i}".encode())).msg_id for i in range(40)}
        assert rec.wait_for(40, 20)
        held = set(consumer.queues)
        assert len([q for q in held if q.topic == "restart_t"]) == 4

        broker.stop()
        with PullConsumer("g_restart_probe", cluster.namesrv_addr) as probe:
            def unrouted() -> bool:
                try:
                    return not probe.fetch_subscribe_message_queues("restart_t")
                except ClientError:
                    return True
            assert wait_until(unrouted, 10)
        time.sleep(2.0)  # four rebalance intervals without a route
        assert set(consumer.queues) == held

        broker.start()
        cluster.wait_route("restart_t")
        with Producer("p_restart", cluster.namesrv_addr) as producer:
            second = {producer.send(Message("restart_t", f"b{i}".encode())).msg_id for i in range(40)}
        assert rec.wait_for(80, 30)
        time.sleep(1.5)  # a replay would come now
        assert rec.ids() == {i: 1 for i in first | second}
    finally:
        consumer.shutdown()


def test_offsets_are_committed_again_after_a_persist_pass_fails(cluster, monkeypatch):
    """A pass of the periodic offset commit that raises (reading a queue's consumed offset while a consume thread
    takes messages off it could: "dictionary changed size during iteration") is logged and the next pass commits:
    the loop used to end with it, and no offset of the consumer was committed again until a rebalance dropped the
    queue."""
    cluster.start_broker()
    with Producer("p_persist_fail", cluster.namesrv_addr) as producer:
        sent = producer.send(Message("persist_fail_t", b"m0"))
    mq = sent.message_queue
    failed = threading.Event()
    real = PushConsumer._persist_offsets

    async def fails_once(self: PushConsumer) -> None:
        if not failed.is_set():
            failed.set()
            raise RuntimeError("dictionary changed size during iteration")
        await real(self)

    monkeypatch.setattr(PushConsumer, "_persist_offsets", fails_once)
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "g_persist_fail", "persist_fail_t", rec, persist_interval_s=0.2)
    try:
        assert rec.wait_for(1, 20)
        assert failed.wait(10)
        with PullConsumer("g_persist_fail", cluster.namesrv_addr) as probe:
            assert wait_until(lambda: probe.fetch_consume_offset(mq) == 1, 10)
    finally:
        consumer.shutdown()


def test_a_rebalance_waits_for_the_listener_calls_of_the_queues_it_gives_up_once_in_all(cluster):
    """A member joins while a listener call runs on every queue of the first: the first gives up half its queues
    after one wait for their calls (5 s in all, as a shutdown's), not one per queue (20 s for four), so the new
    member's share is pulled at once after it."""
    topic = "release_waits_once_t"
    queues = one_held_message_per_queue(cluster, topic, 8)
    release = threading.Event()
    first = member_holding_every_queue(cluster, "g_release_waits_once", topic, queues, release,
                                       consume_thread_nums=len(queues))
    second = None
    try:
        began = time.monotonic()
        second = push_consumer(cluster.namesrv_addr, "g_release_waits_once", topic, Recorder())
        # a copy (list() takes it at once): the client's loop thread changes the table meanwhile
        assert wait_until(lambda: sum(q.topic == topic for q in list(first.queues)) == len(queues) // 2, 30)
        took = time.monotonic() - began
        assert took < 12.0, f"the first member gave its queues up after {took:.1f} s: a wait per queue"
    finally:
        release.set()
        first.shutdown()
        if second is not None:
            second.shutdown()


def test_shutdown_commits_the_offset_of_a_queue_a_rebalance_was_releasing(cluster):
    """A rebalance releases a queue whose listener call is still running (it waits for it, to commit what it
    consumed), and ``shutdown`` cancels that rebalance: the queue's offset is committed at shutdown all the same.
    The rebalance had taken the queue off the consumer's list before its commit, so the cancelled release left it
    uncommitted and shutdown's commit did not see it: its messages were consumed again by the next owner."""
    topic = "release_at_stop_t"
    queues = one_held_message_per_queue(cluster, topic, 4)
    release = threading.Event()
    first = member_holding_every_queue(cluster, "g_release_at_stop", topic, queues, release, persist_interval_s=60.0)
    stopper = threading.Thread(target=first.shutdown, daemon=True)
    second = None
    try:
        rebalance = first._tasks[0]
        # a second member: the first's rebalance releases half its queues, waiting for their listener calls
        second = push_consumer(cluster.namesrv_addr, "g_release_at_stop", topic, Recorder(), persist_interval_s=60.0)
        # a copy (list() takes it at once): the client's loop thread changes the table meanwhile
        assert wait_until(lambda: sum(q.topic == topic for q in list(first._pull_tasks)) < len(queues), 20)
        stopper.start()
        assert wait_until(rebalance.done, 10)  # cancelled while it waits for a listener call
    finally:
        release.set()
        if stopper.ident is not None:  # started (an assertion before it ends the test here)
            stopper.join(30)
    assert not stopper.is_alive()
    try:
        with PullConsumer("g_release_at_stop", cluster.namesrv_addr) as probe:
            assert [probe.fetch_consume_offset(mq) for mq in queues] == [1] * len(queues)
    finally:
        second.shutdown()


def test_queues_given_up_together_stop_taking_calls_while_the_first_is_waited_for(cluster):
    """Queues given up together (a shutdown's, a rebalance's) share one 5 s wait for their listener calls, but each
    queue was stopped only at its turn: while the first's call was waited for, the next went on starting calls, and
    at its turn the wait was over, its call in progress then left uncommitted (consumed again by the next owner).
    Every queue stops taking calls at once, and a call that ends within the wait is committed, whichever queue."""
    topic = "drop_together_t"
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(topic, queue_nums=2)
    cluster.wait_route(topic)
    with Producer(f"p_{topic}", cluster.namesrv_addr) as producer:
        first, second = producer.publish_queues(topic)
        producer.send(Message(topic, b"hold"), queue=first)  # outlasts the wait
        producer.send(Message(topic, b"short"), queue=second)  # ends within it
        for _ in range(30):
            producer.send(Message(topic, b"quick"), queue=second)
    entered, release, go_on = threading.Semaphore(0), threading.Event(), threading.Event()
    ended: set[int] = set()  # the second queue's offsets consumed

    def listener(msgs: list) -> ConsumeStatus:
        body = msgs[0].body
        if body == b"quick":
            time.sleep(1.0)
        else:
            entered.release()
            (release if body == b"hold" else go_on).wait(30)
        if body != b"hold":
            ended.add(msgs[0].queue_offset)
        return ConsumeStatus.SUCCESS

    consumer = PushConsumer("g_drop_together", cluster.namesrv_addr, pull_batch_size=1,  # calls in offset order
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(topic)
    consumer.register_listener(listener)
    consumer.start()
    stopper = threading.Thread(target=consumer.shutdown, daemon=True)
    try:
        assert entered.acquire(timeout=20) and entered.acquire(timeout=20)  # a call on each queue
        stopper.start()
        time.sleep(1.0)
        go_on.set()  # the second queue's call ends 1 s into the wait
        stopper.join(20)
        assert not stopper.is_alive()
    finally:
        release.set()
        go_on.set()
        stopper.join(30)
    time.sleep(1.5)  # a call the shutdown left running ends
    with PullConsumer("g_drop_together", cluster.namesrv_addr) as probe:
        # committed up to the first message not consumed: none consumed above it uncommitted
        assert probe.fetch_consume_offset(second) == min(set(range(32)) - ended), sorted(ended)
