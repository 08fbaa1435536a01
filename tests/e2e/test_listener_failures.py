"""A push consumer's listener that misbehaves (raises what ``except Exception`` does not catch, calls the
consumer's ``shutdown``), on consume threads and on the client's loop: the failure is the listener's, the
consumer goes on."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.e2e.helpers import Recorder, one_held_message_per_queue, push_consumer, wait_until
from txmq import Admin, ConsumeStatus, Message, Producer, SendStatus
from txmq.admin.client import MQAdminExt
from txmq.client.consumer import MessageExt, PushConsumer
from txmq.client.pull_consumer import PullConsumer
from txmq.errors import ClientError

pytestmark = pytest.mark.dated  # run again at a fixed month end by make test (Makefile, DATED_AT)


class RaiseOnce:
    """Raises ``exc`` at the first delivery of ``b"boom"``, records every other delivery."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.raised = False
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()

    def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        with self._lock:
            if not self.raised and any(m.body == b"boom" for m in msgs):
                self.raised = True
                raise self.exc
            self.bodies.extend(m.body for m in msgs)
        return ConsumeStatus.SUCCESS


def _timed_shutdown(client: PushConsumer | Producer) -> tuple[BaseException | None, float]:
    """What ``client.shutdown()`` raised (None: nothing) and how long it took: whatever it is, the test reports it."""
    t0 = time.monotonic()
    try:
        client.shutdown()
    except BaseException as e:
        return e, time.monotonic() - t0
    return None, time.monotonic() - t0


def _shuts_down_while_calls_block(consumer: PushConsumer, release: threading.Event, join_s: float) -> None:
    """``consumer.shutdown()``, from another thread while its listener calls block, returns within ``join_s``
    without an error (within 15 s by its own account); the calls are released after, whatever happened."""
    outcome: list[tuple[BaseException | None, float]] = []
    stopper = threading.Thread(target=lambda: outcome.append(_timed_shutdown(consumer)), daemon=True)
    try:
        stopper.start()
        stopper.join(join_s)
        assert not stopper.is_alive()
    finally:
        release.set()
        stopper.join(60)
    error, took = outcome[0]
    assert error is None and took < 15, outcome


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3), asyncio.CancelledError()],
                         ids=["KeyboardInterrupt", "SystemExit", "CancelledError"])
def test_listener_raising_a_base_exception_is_consumed_again_and_the_queue_goes_on(cluster, listener_on_loop, exc):
    """Not an ``Exception``: on the loop it would end the queue's pull task (or the loop itself), on a consume
    thread leave the batch unconsumed below the committed offset for good."""
    cluster.start_broker(conf={"messageDelayLevel": "1s 1s 1s 1s 1s"})
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("raise_t", queue_nums=1)
    listener = RaiseOnce(exc)
    consumer = push_consumer(cluster.namesrv_addr, "g_raise", "raise_t", listener,  # type: ignore[arg-type]
                             listener_on_loop=listener_on_loop)
    try:
        with Producer("p_raise", cluster.namesrv_addr) as producer:
            producer.send(Message("raise_t", b"boom"))
            assert wait_until(lambda: listener.raised, 15)
            producer.send(Message("raise_t", b"after"))
        assert wait_until(lambda: {b"after", b"boom"} <= set(listener.bodies), 20), listener.bodies
    finally:
        t0 = time.monotonic()
        consumer.shutdown()
    assert time.monotonic() - t0 < 10


def test_shutdown_from_the_listener_fails_at_once_and_the_consumer_goes_on(cluster, listener_on_loop):
    """Forbidden from inside the listener (it would wait for the very call it runs in): a clear ``ClientError``
    at once, without stalling or half-closing the consumer."""
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("stop_t", queue_nums=1)
    outcome: list[tuple[BaseException | None, float]] = []
    bodies: list[bytes] = []
    consumer: PushConsumer | None = None

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        if not outcome:
            assert consumer is not None
            outcome.append(_timed_shutdown(consumer))
        bodies.extend(m.body for m in msgs)
        return ConsumeStatus.SUCCESS

    consumer = push_consumer(cluster.namesrv_addr, "g_stop", "stop_t", listener,  # type: ignore[arg-type]
                             listener_on_loop=listener_on_loop)
    try:
        with Producer("p_stop", cluster.namesrv_addr) as producer:
            producer.send(Message("stop_t", b"first"))
            assert wait_until(lambda: bool(bodies), 20)
            producer.send(Message("stop_t", b"second"))
        assert wait_until(lambda: b"second" in bodies, 20), bodies
    finally:
        consumer.shutdown()
    exc, took = outcome[0]
    assert isinstance(exc, ClientError) and "listener" in str(exc), exc
    assert took < 4.0  # refused before anything is closed (the stall it replaces took 5-10 s)
    assert bodies == [b"first", b"second"]


def test_shutdown_from_a_send_callback_fails_at_once_and_the_producer_goes_on(cluster):
    """A send's callbacks run on the client's loop, where shutting the client down would stall the loop."""
    cluster.start_broker()
    outcome: list[tuple[BaseException | None, float]] = []
    done = threading.Event()
    with Producer("p_cb_stop", cluster.namesrv_addr) as producer:
        producer.send(Message("cb_stop_t", b"warm-up"))

        def on_done(_fut: object) -> None:
            outcome.append(_timed_shutdown(producer))
            done.set()

        fut = producer.send_async(Message("cb_stop_t", b"one"))
        # registered on the loop thread: run there too when ``fut`` is already answered
        assert producer._runtime is not None
        producer._runtime.loop.call_soon_threadsafe(fut.add_done_callback, on_done)
        assert done.wait(20)
        exc, took = outcome[0]
        assert isinstance(exc, ClientError) and "loop thread" in str(exc), exc
        assert took < 4.0  # refused before anything is closed (the stall it replaces took 5-10 s)
        assert producer.send(Message("cb_stop_t", b"two")).status == SendStatus.SEND_OK


def test_orderly_shutdown_during_a_failing_batch_commits_exactly_what_was_consumed(cluster, listener_on_loop):
    """Shut down while an orderly queue waits ``suspend_s`` to consume a failed message again: the offset
    committed is that message's, so the next consumer of the group starts with it, and nothing before it comes
    again."""
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("ord_stop_t", queue_nums=1, order=True)
    with Producer("p_ord_stop", cluster.namesrv_addr) as producer:
        for i in range(5):
            producer.send(Message("ord_stop_t", f"m{i}".encode()))
    seen: list[bytes] = []

    def failing_at_m2(msgs: list[MessageExt]) -> ConsumeStatus:
        seen.extend(m.body for m in msgs)
        return ConsumeStatus.RECONSUME_LATER if any(m.body == b"m2" for m in msgs) else ConsumeStatus.SUCCESS

    consumer = push_consumer(cluster.namesrv_addr, "g_ord_stop", "ord_stop_t", failing_at_m2,  # type: ignore[arg-type]
                             orderly=True, suspend_s=0.3, listener_on_loop=listener_on_loop)
    try:
        assert wait_until(lambda: seen.count(b"m2") >= 2, 20), seen
    finally:
        consumer.shutdown()
    assert seen[:2] == [b"m0", b"m1"] and set(seen[2:]) == {b"m2"}

    again: list[bytes] = []

    def record(msgs: list[MessageExt]) -> ConsumeStatus:
        again.extend(m.body for m in msgs)
        return ConsumeStatus.SUCCESS

    consumer = push_consumer(cluster.namesrv_addr, "g_ord_stop", "ord_stop_t", record,  # type: ignore[arg-type]
                             orderly=True, listener_on_loop=listener_on_loop)
    try:
        assert wait_until(lambda: len(again) >= 3, 20), again
    finally:
        consumer.shutdown()
    assert again == [b"m2", b"m3", b"m4"]


def test_listener_on_the_loop_forwards_with_send_async_through_a_full_window(cluster):
    """A producer has its own client and loop: a listener on the consumer's loop may wait in ``send_async``
    for room in that producer's window (the producer's loop frees it), and each forwarded send succeeds."""
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("fwd_in", queue_nums=1)
    futures = []
    with Producer("p_fwd", cluster.namesrv_addr, max_in_flight=1) as forwarder:
        forwarder.send(Message("fwd_out", b"warm-up"))

        def forward(msgs: list[MessageExt]) -> ConsumeStatus:
            futures.extend(forwarder.send_async(Message("fwd_out", m.body)) for m in msgs)
            return ConsumeStatus.SUCCESS

        consumer = push_consumer(cluster.namesrv_addr, "g_fwd", "fwd_in", forward,  # type: ignore[arg-type]
                                 listener_on_loop=True)
        try:
            with Producer("p_fwd_in", cluster.namesrv_addr) as producer:
                sent = [producer.send_async(Message("fwd_in", f"f{i}".encode())) for i in range(20)]
                assert all(f.result(10).status == SendStatus.SEND_OK for f in sent)
            assert wait_until(lambda: len(futures) == 20, 20), len(futures)
        finally:
            consumer.shutdown()
        assert all(f.result(10).status == SendStatus.SEND_OK for f in futures)


def test_orderly_queue_dropped_by_a_rebalance_while_its_batch_fails_is_unlocked_for_the_new_owner(
        cluster, listener_on_loop):
    """A second consumer joins while the first retries a failing batch on each of two orderly queues: the queue
    the first gives up is unlocked on release, and the second, refused the lock while the first still held it,
    asks again within a second (not a whole ``rebalance_interval_s`` later) and takes it once locked, from the
    offset the first committed on release: from the failed message on."""
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("ord_rb_t", queue_nums=2, order=True)
    with Producer("p_ord_rb", cluster.namesrv_addr) as producer:
        queues = sorted(producer.publish_queues("ord_rb_t"), key=lambda q: q.queue_id)
        for q in queues:
            for i in range(3):
                producer.send(Message("ord_rb_t", f"q{q.queue_id}-m{i}".encode()), queue=q)
    first: list[bytes] = []

    def failing_at_m1(msgs: list[MessageExt]) -> ConsumeStatus:
        first.extend(m.body for m in msgs)
        return ConsumeStatus.RECONSUME_LATER if any(m.body.endswith(b"-m1") for m in msgs) else ConsumeStatus.SUCCESS

    second: list[bytes] = []

    def record(msgs: list[MessageExt]) -> ConsumeStatus:
        second.extend(m.body for m in msgs)
        return ConsumeStatus.SUCCESS

    c1 = push_consumer(cluster.namesrv_addr, "g_ord_rb", "ord_rb_t", failing_at_m1,  # type: ignore[arg-type]
                       orderly=True, suspend_s=0.2, max_reconsume_times=1000, listener_on_loop=listener_on_loop)
    c2 = None
    try:
        assert wait_until(lambda: first.count(b"q0-m1") >= 2 and first.count(b"q1-m1") >= 2, 20), first
        c2 = push_consumer(cluster.namesrv_addr, "g_ord_rb", "ord_rb_t", record,  # type: ignore[arg-type]
                           orderly=True, listener_on_loop=listener_on_loop)
        assert wait_until(lambda: len(second) >= 2, 15), second
    finally:
        if c2 is not None:
            c2.shutdown()
        c1.shutdown()
    q = second[0].split(b"-")[0]
    assert second[:2] == [q + b"-m1", q + b"-m2"]  # from the failed message on: nothing consumed comes again


def test_a_rebalance_that_fails_unexpectedly_is_tried_again(cluster, caplog):
    """A broker's answer of another shape (here: the consumer ids' lookup raising ValueError once, as a bad JSON
    body does) must not end the consumer's rebalancing for good: it is logged and tried again, and the consumer
    takes its queues and consumes."""
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("rebal_t", queue_nums=2)
    bodies: list[bytes] = []
    consumer = PushConsumer("g_rebal", cluster.namesrv_addr, rebalance_interval_s=60)
    consumer.subscribe("rebal_t")

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        bodies.extend(m.body for m in msgs)
        return ConsumeStatus.SUCCESS

    consumer.register_listener(listener)
    real = consumer._consumer_ids
    failed: list[str] = []

    async def fails_once(broker_name: str) -> list[str]:
        if not failed:
            failed.append(broker_name)
            raise ValueError("a body of another shape")
        return await real(broker_name)

    consumer._consumer_ids = fails_once  # type: ignore[method-assign]
    consumer.start()
    try:
        with Producer("p_rebal", cluster.namesrv_addr) as producer:
            assert producer.send(Message("rebal_t", b"after")).status == SendStatus.SEND_OK
        assert wait_until(lambda: b"after" in bodies, 20), (failed, bodies)
        assert failed
        assert any("rebalance of g_rebal failed" in r.getMessage() for r in caplog.records)
    finally:
        consumer.shutdown()


def test_orderly_queue_given_up_while_its_listener_still_runs_stays_locked_until_it_returns(cluster):
    """A rebalance gives up an orderly queue whose listener call has not returned after the consumer's wait (5 s):
    the queue stays locked by this client until the call returns (RocketMQ keeps such a queue until its consume
    lock is free), so the new owner never consumes it beside the running call; then it is committed and unlocked,
    and the new owner goes on after the message that call consumed."""
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("ord_busy_t", queue_nums=2, order=True)
    with Producer("p_ord_busy", cluster.namesrv_addr) as producer:
        for q in sorted(producer.publish_queues("ord_busy_t"), key=lambda q: q.queue_id):
            for i in range(3):
                producer.send(Message("ord_busy_t", f"q{q.queue_id}-m{i}".encode()), queue=q)
    release = threading.Event()
    held: list[bytes] = []

    def blocking(msgs: list[MessageExt]) -> ConsumeStatus:
        held.extend(m.body for m in msgs)
        release.wait(30)  # both queues' first calls block: whichever queue the rebalance gives up is busy
        return ConsumeStatus.SUCCESS

    second: list[bytes] = []

    def record(msgs: list[MessageExt]) -> ConsumeStatus:
        second.extend(m.body for m in msgs)
        return ConsumeStatus.SUCCESS

    c1 = push_consumer(cluster.namesrv_addr, "g_ord_busy", "ord_busy_t", blocking,  # type: ignore[arg-type]
                       orderly=True, consume_thread_nums=2)
    c2 = None
    try:
        assert wait_until(lambda: len(held) == 2, 20), held
        c2 = push_consumer(cluster.namesrv_addr, "g_ord_busy", "ord_busy_t", record,  # type: ignore[arg-type]
                           orderly=True)
        time.sleep(9)  # the rebalance's 5 s wait, a refused lock asked again within a second, and more
        assert second == []  # nothing consumed beside the call still running on the first consumer
        release.set()
        assert wait_until(lambda: len(second) >= 2, 20), second
    finally:
        release.set()
        if c2 is not None:
            c2.shutdown()
        c1.shutdown()
    q = second[0].split(b"-")[0]
    assert second[:2] == [q + b"-m1", q + b"-m2"]  # after the message the running call consumed


@pytest.mark.parametrize("during_reset", [False, True], ids=["alone", "during-a-reset"])
def test_shutdown_ends_while_listener_calls_never_return_and_leaves_their_messages_to_the_group(cluster,
                                                                                               during_reset):
    """Listener calls on consume threads that never return: ``shutdown()`` waits 5 s in all for them (RocketMQ
    waits ``awaitTerminationMillisWhenShutdown``, 0 by default) and returns, commits nothing past their messages,
    and the group's next consumer gets them. It waited 5 s per busy queue, past its own 30 s bound (a
    ``ClientError``), and then for the consume threads without end. An operator's reset under way, whose drops
    the shutdown waits for, waits 5 s in all too: it waited 5 s per busy queue."""
    topic = "never_returns_t"
    queues = one_held_message_per_queue(cluster, topic, 8)
    entered, release = threading.Semaphore(0), threading.Event()

    def blocked(msgs: list[MessageExt]) -> ConsumeStatus:
        entered.release()
        release.wait()  # until the test ends: "forever" for the consumer
        return ConsumeStatus.SUCCESS

    consumer = push_consumer(cluster.namesrv_addr, "g_never_returns", topic, blocked,  # type: ignore[arg-type]
                             consume_thread_nums=len(queues), persist_interval_s=60.0)
    try:
        for _ in queues:
            assert entered.acquire(timeout=20)  # a call that never returns on every queue
        if during_reset:
            with MQAdminExt(cluster.namesrv_addr) as admin:
                admin.reset_offset("g_never_returns", topic, 0)
            wait_until(lambda: consumer._resets, 10)
        _shuts_down_while_calls_block(consumer, release, 40)
    finally:
        release.set()
    next_one = Recorder()
    with PullConsumer("g_never_returns", cluster.namesrv_addr) as probe:
        assert [probe.fetch_consume_offset(mq) for mq in queues] == [0] * len(queues)
    consumer = push_consumer(cluster.namesrv_addr, "g_never_returns", topic, next_one)
    try:
        assert next_one.wait_for(len(queues), 20)
    finally:
        consumer.shutdown()


def test_shutdown_ends_while_a_call_on_a_queue_given_up_before_it_never_returns(cluster):
    """A queue given up while its listener call still runs (here by an operator's reset; a rebalance gives one up
    alike), the call never returning: the queue is taken again and consumed, and ``shutdown()`` later returns. It
    judged only the queues it dropped itself, found them idle, and waited for the consume threads without end."""
    topic = "given_up_never_returns_t"
    group = "g_given_up_never_returns"
    one_held_message_per_queue(cluster, topic, 1)
    entered, again, release = threading.Event(), threading.Event(), threading.Event()

    def blocked_once(msgs: list[MessageExt]) -> ConsumeStatus:
        if entered.is_set():  # the reset's redelivery
            again.set()
            return ConsumeStatus.SUCCESS
        entered.set()
        release.wait()  # until the test ends: "forever" for the consumer
        return ConsumeStatus.SUCCESS

    consumer = push_consumer(cluster.namesrv_addr, group, topic, blocked_once,  # type: ignore[arg-type]
                             consume_thread_nums=2, persist_interval_s=60.0)
    try:
        assert entered.wait(20)
        with MQAdminExt(cluster.namesrv_addr) as admin:
            admin.reset_offset(group, topic, 0)
        assert again.wait(30)  # given up after its drop's wait, taken again from the reset offset, consumed
        _shuts_down_while_calls_block(consumer, release, 20)
    finally:
        release.set()
