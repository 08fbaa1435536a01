"""An operator's offset reset (RESET_CONSUMER_CLIENT_OFFSET) reaching an online push consumer while its own
rebalance and offset commits run: it consumes the topic again from the reset offsets, whichever order the three
take. A real broker and clients; the order is forced by holding one step of the consumer open until another has
run, or, where the consumer keeps the two apart, until ``HOLD_S`` has passed."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading

import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.helpers import Recorder, one_held_message_per_queue, push_consumer, wait_until
from txmq import (
    Admin,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageModel,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from txmq.admin.client import MQAdminExt

N = 8
HOLD_S = 2.0  # how long a held step waits for one the consumer must not let in between


async def _at_most(event: asyncio.Event, timeout: float) -> None:
    """Wait for ``event``, at most ``timeout`` seconds."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)


def _consumed(cluster: Cluster, group: str, topic: str, orderly: bool) -> tuple[PushConsumer, Recorder,
                                                                                  list[MessageQueue]]:
    """A consumer of ``group`` that consumed and committed all of ``topic``'s N messages (four queues)."""
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(topic, queue_nums=4)
    cluster.wait_route(topic)
    with Producer(f"p_{group}", cluster.namesrv_addr) as producer:
        queues = producer.publish_queues(topic)
        for i in range(N):
            producer.send(Message(topic, f"m{i}".encode()), queue=queues[i % len(queues)])
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, group, topic, rec, orderly=orderly, persist_interval_s=0.2,
                             rebalance_interval_s=60.0)
    assert rec.wait_for(N, 20)
    assert wait_until(lambda: _committed(cluster, group, queues) == [N // len(queues)] * len(queues), 10)
    return consumer, rec, queues


def _committed(cluster: Cluster, group: str, queues: list[MessageQueue]) -> list[int]:
    with PullConsumer(group, cluster.namesrv_addr) as probe:
        return [probe.fetch_consume_offset(mq) for mq in queues]


def _marking_shutdown(consumer: PushConsumer, monkeypatch: pytest.MonkeyPatch) -> contextvars.ContextVar[bool]:
    """A flag true in the consumer's shutdown task only (its drops and commits), false in a reset's or a rebalance's."""
    in_shutdown: contextvars.ContextVar[bool] = contextvars.ContextVar("in_shutdown", default=False)
    real_on_shutdown = consumer._on_shutdown

    async def on_shutdown() -> None:
        in_shutdown.set(True)  # this task's context only
        await real_on_shutdown()

    monkeypatch.setattr(consumer, "_on_shutdown", on_shutdown)
    return in_shutdown


def _reset_to_start(cluster: Cluster, group: str, topic: str) -> None:
    with MQAdminExt(cluster.namesrv_addr) as admin:
        assert {s.values for s in admin.reset_offset(group, topic, 0)} == {0}


def _assert_consumed_again(cluster: Cluster, group: str, rec: Recorder, queues: list[MessageQueue]) -> None:
    """Every message twice (before and after the reset), and the group's offsets at the end again."""
    assert rec.wait_for(2 * N, 20), f"{len(rec) - N} of {N} consumed again after the reset"
    assert sorted(rec.ids().values()) == [2] * N
    assert wait_until(lambda: _committed(cluster, group, queues) == [N // len(queues)] * len(queues), 10)


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
def test_a_rebalance_during_a_reset_takes_the_queues_from_the_reset_offsets(cluster, monkeypatch, orderly):
    """A persist pass between the broker's reset and the consumer's drop commits the old offsets over the reset
    (the reset commits its own again after the drop), and a rebalance woken between the drop and those commits
    must not take the queues back from the old ones: it took them from there, pulled on from the end, and the next
    persist pass committed the end again: nothing was consumed again."""
    consumer, rec, queues = _consumed(cluster, "g_reset_rb", "reset_rb_t", orderly)
    in_reset: contextvars.ContextVar[bool] = contextvars.ContextVar("in_reset", default=False)
    rebalanced, held = asyncio.Event(), threading.Event()
    real_reset, real_commit, real_rebalance = consumer._reset_topic, consumer._commit_offset, consumer.rebalance

    async def reset(topic: str, body: bytes) -> None:
        await consumer._persist_offsets()  # the offsets consumed so far, over the broker's reset
        in_reset.set(True)  # this task's context only
        await real_reset(topic, body)

    async def commit(mq: MessageQueue, offset: int) -> None:
        if in_reset.get() and not held.is_set():  # the reset dropped the queues and commits the first offset
            held.set()
            assert consumer._rebalance_now is not None
            consumer._rebalance_now.set()
            await _at_most(rebalanced, HOLD_S)
        await real_commit(mq, offset)

    async def rebalance() -> bool:
        complete = await real_rebalance()
        if held.is_set():
            rebalanced.set()
        return complete

    monkeypatch.setattr(consumer, "_reset_topic", reset)
    monkeypatch.setattr(consumer, "_commit_offset", commit)
    monkeypatch.setattr(consumer, "rebalance", rebalance)
    try:
        _reset_to_start(cluster, "g_reset_rb", "reset_rb_t")
        _assert_consumed_again(cluster, "g_reset_rb", rec, queues)
        assert held.is_set()
    finally:
        consumer.shutdown()


def test_a_persist_pass_under_way_does_not_commit_over_a_reset(cluster, monkeypatch):
    """A persist pass that read a queue's offset before the reset dropped the queue commits it only before the
    reset's own commits, and never the offsets of queues the reset dropped: it committed the old offsets after
    them, and the rebalance that followed took the queues from there."""
    consumer, rec, queues = _consumed(cluster, "g_reset_persist", "reset_persist_t", False)
    in_persist: contextvars.ContextVar[bool] = contextvars.ContextVar("in_persist", default=False)
    armed, holding = threading.Event(), threading.Event()
    reset_done, persist_done = asyncio.Event(), asyncio.Event()
    real_persist, real_commit = consumer._persist_offsets, consumer._commit_offset
    real_reset, real_add = consumer._reset_topic, consumer._add_queue

    async def persist() -> None:
        token = in_persist.set(True)  # in the persist loop's own task
        try:
            await real_persist()
        finally:
            in_persist.reset(token)
            if holding.is_set():
                persist_done.set()

    async def commit(mq: MessageQueue, offset: int) -> None:
        # the pass read the offset it commits, of a queue the reset drops
        if in_persist.get() and armed.is_set() and mq in queues and not holding.is_set():
            holding.set()
            await _at_most(reset_done, HOLD_S)
        await real_commit(mq, offset)

    async def reset(topic: str, body: bytes) -> None:
        await real_reset(topic, body)
        reset_done.set()

    async def add_queue(mq: MessageQueue) -> None:
        if armed.is_set():  # the rebalance after the reset reads the offsets once that persist pass is over
            await _at_most(persist_done, HOLD_S)
        await real_add(mq)

    monkeypatch.setattr(consumer, "_persist_offsets", persist)
    monkeypatch.setattr(consumer, "_commit_offset", commit)
    monkeypatch.setattr(consumer, "_reset_topic", reset)
    monkeypatch.setattr(consumer, "_add_queue", add_queue)
    try:
        armed.set()
        assert holding.wait(10)  # the next pass holds its first commit
        _reset_to_start(cluster, "g_reset_persist", "reset_persist_t")
        _assert_consumed_again(cluster, "g_reset_persist", rec, queues)
    finally:
        consumer.shutdown()


def test_an_orderly_queue_given_up_during_a_listener_call_keeps_the_reset_offset(cluster):
    """An orderly queue a rebalance gave up while a listener call on it still ran is released (committed, then
    unlocked) once the call returns; a reset that came meanwhile decides its offset: the release committed the
    offset consumed before the reset over it, and the queue's next owner read on from there. A queue released
    so is taken again at once, not at the next periodic rebalance (a minute here)."""
    topic, group = "reset_releasing_t", "g_reset_releasing"
    queues = one_held_message_per_queue(cluster, topic, 2)
    rec, release = Recorder(), threading.Event()

    def held(msgs: list) -> ConsumeStatus:
        rec(msgs)
        release.wait(30)
        return ConsumeStatus.SUCCESS

    first = PushConsumer(group, cluster.namesrv_addr, orderly=True, rebalance_interval_s=60.0,
                         consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    first.subscribe(topic)
    first.register_listener(held)
    first.start()
    second = None
    try:
        assert rec.wait_for(len(queues), 20)  # a listener call in progress on every queue
        second = push_consumer(cluster.namesrv_addr, group, topic, rec, orderly=True, rebalance_interval_s=60.0)
        assert wait_until(lambda: len(first._releasing) == 1, 20)  # one queue given up, its call still running
        _reset_to_start(cluster, group, topic)
        assert wait_until(lambda: len(first._releasing) == 2, 20)  # the other dropped by the reset
        release.set()
        assert rec.wait_for(2 * len(queues), 20), f"{len(rec) - len(queues)} of {len(queues)} consumed again"
        assert sorted(rec.ids().values()) == [2] * len(queues)
    finally:
        release.set()
        first.shutdown()
        if second is not None:
            second.shutdown()


def test_a_broadcasting_consumer_follows_a_reset(cluster):
    """A broadcasting consumer keeps its offsets itself (RocketMQ's LocalFileOffsetStore), and a reset sets them
    there as RocketMQ's client does: it consumed again from the reset offsets, not from ``consume_from_where``
    (where a reset's drop had sent it: the last offset, so nothing came again)."""
    cluster.start_broker()
    topic, group = "reset_bc_t", "g_reset_bc"
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(topic, queue_nums=4)
    cluster.wait_route(topic)
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, group, topic, rec, message_model=MessageModel.BROADCASTING,
                             consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, rebalance_interval_s=60.0)
    try:
        assert wait_until(lambda: len(consumer.queues) == 4, 20)
        with Producer(f"p_{group}", cluster.namesrv_addr) as producer:
            for i in range(N):
                producer.send(Message(topic, f"m{i}".encode()))
        assert rec.wait_for(N, 20)
        _reset_to_start(cluster, group, topic)
        assert rec.wait_for(2 * N, 20), f"{len(rec) - N} of {N} consumed again after the reset"
        assert sorted(rec.ids().values()) == [2] * N
    finally:
        consumer.shutdown()


def test_a_shutdown_during_a_reset_does_not_commit_over_it(cluster, monkeypatch):
    """A shutdown that comes while a reset drops the queues drops them once the reset is over: it dropped them beside
    the reset, committing the offsets consumed before the reset over the reset's own, and the group's next consumer
    read on from there."""
    group, topic = "g_reset_shutdown", "reset_shutdown_t"
    consumer, _, queues = _consumed(cluster, group, topic, False)
    in_reset: contextvars.ContextVar[bool] = contextvars.ContextVar("in_reset", default=False)
    in_shutdown = _marking_shutdown(consumer, monkeypatch)
    dropping = threading.Event()
    shutdown_drops, reset_done = asyncio.Event(), asyncio.Event()
    real_reset, real_drop, real_commit = consumer._reset_topic, consumer._drop_queue, consumer._commit_offset

    async def reset(topic: str, body: bytes) -> None:
        in_reset.set(True)  # this task's context only
        await real_reset(topic, body)
        reset_done.set()

    async def drop_queue(mq: MessageQueue, commit: bool = True, final: bool = False,
                         deadline: float | None = None) -> None:
        if in_shutdown.get() and mq.topic == topic:
            shutdown_drops.set()
        elif in_reset.get() and not dropping.is_set():  # the reset's first drop waits for the shutdown's
            dropping.set()
            await _at_most(shutdown_drops, HOLD_S)
        await real_drop(mq, commit, final, deadline)

    async def commit_offset(mq: MessageQueue, offset: int) -> None:
        if in_shutdown.get() and mq.topic == topic:  # the shutdown's commits come after the reset's
            await _at_most(reset_done, HOLD_S)
        await real_commit(mq, offset)

    monkeypatch.setattr(consumer, "_reset_topic", reset)
    monkeypatch.setattr(consumer, "_drop_queue", drop_queue)
    monkeypatch.setattr(consumer, "_commit_offset", commit_offset)
    try:
        _reset_to_start(cluster, group, topic)
        assert dropping.wait(10)
    finally:
        consumer.shutdown()
    assert _committed(cluster, group, queues) == [0] * len(queues)


def test_a_reset_that_comes_during_a_shutdown_commits_before_the_connections_close(cluster, monkeypatch):
    """A reset told to the consumer while its shutdown drops the queues (committing what they consumed, over the
    broker's reset) commits its offsets before the shutdown closes the connections: it ran beside the unregister and
    the close, its commits failed, and the offsets consumed before the reset stood."""
    group, topic = "g_reset_late", "reset_late_t"
    consumer, _, queues = _consumed(cluster, group, topic, False)
    in_shutdown = _marking_shutdown(consumer, monkeypatch)
    committing = threading.Event()
    resetting = asyncio.Event()
    real_reset, real_commit = consumer._reset_topic, consumer._commit_offset

    async def reset(topic: str, body: bytes) -> None:
        resetting.set()
        await real_reset(topic, body)

    async def commit_offset(mq: MessageQueue, offset: int) -> None:
        if in_shutdown.get() and mq.topic == topic and not committing.is_set():  # held until the reset came
            committing.set()
            await _at_most(resetting, HOLD_S)
        await real_commit(mq, offset)

    monkeypatch.setattr(consumer, "_reset_topic", reset)
    monkeypatch.setattr(consumer, "_commit_offset", commit_offset)
    stopping = threading.Thread(target=consumer.shutdown)
    stopping.start()
    try:
        assert committing.wait(10)
        _reset_to_start(cluster, group, topic)
    finally:
        stopping.join(30)
    assert not stopping.is_alive()
    assert _committed(cluster, group, queues) == [0] * len(queues)
