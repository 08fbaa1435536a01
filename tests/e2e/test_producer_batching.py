"""``Producer.send_async`` coalesces queued sends into batch requests: each message still gets its own
result, and that result names exactly where the message was stored."""

import asyncio
import os
import signal
import threading
import time
from typing import Any

import pytest

from tests.e2e.helpers import hold_unregister, wait_until
from txmq import Admin, LocalTransactionState, Message, Producer, PullConsumer, SendStatus, TransactionProducer
from txmq.client.producer import SendFuture
from txmq.errors import ClientError, InvalidMessageError


def test_async_sends_are_batched_and_each_result_is_exact(cluster):
    cluster.start_broker(conf={"flushDiskType": "SYNC_FLUSH"})
    n = 3000
    with Producer("p_batching", cluster.namesrv_addr, batch_max_messages=64) as producer:
        producer.send(Message("Coalesced", b"warm-up"))
        futures = [producer.send_async(Message("Coalesced", f"m{i}".encode(), keys=f"k{i}")) for i in range(n)]
        results = [f.result(30) for f in futures]
    assert all(r.status == SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == n
    assert len({r.offset_msg_id for r in results}) == n
    assert len({(r.queue_id, r.queue_offset) for r in results}) == n

    told = {r.msg_id: (r.queue_id, r.queue_offset, f"m{i}".encode()) for i, r in enumerate(results)}
    stored = {}
    with PullConsumer("c_batching", cluster.namesrv_addr) as consumer:
        for mq in consumer.fetch_subscribe_message_queues("Coalesced"):
            offset = 0
            while True:
                got = consumer.pull(mq, offset=offset, max_nums=256)
                if not got.msgs:
                    break
                for m in got.msgs:
                    if m.body != b"warm-up":
                        assert m.msg_id not in stored
                        stored[m.msg_id] = (m.queue_id, m.queue_offset, m.body)
                offset = got.next_begin_offset
    assert stored == told

    with Admin(cluster.namesrv_addr) as admin:
        store = next(iter(admin.stats().values()))["store"]
    assert store["put_calls"] < store["appends"] / 4, store  # the sends really went in batches


def test_coalesced_sends_over_the_brokers_max_message_size_are_split_not_refused(cluster):
    # The broker counts a batch whole against maxMessageSize; 64 sends of 4 KB coalesce into batches of up to
    # 256 KB (the producer's batch_max_bytes is 1 MB), which this broker refuses: the producer sends them in parts.
    cluster.start_broker(conf={"maxMessageSize": 16 * 1024})
    with Producer("p_split", cluster.namesrv_addr, max_message_size=8 * 1024) as producer:
        producer.send(Message("Split", b"warm-up"))
        futures = [producer.send_async(Message("Split", bytes([i]) * 4096)) for i in range(64)]
        results = [f.result(30) for f in futures]
    assert all(r.status == SendStatus.SEND_OK for r in results)
    assert len({(r.queue_id, r.queue_offset) for r in results}) == 64


def test_a_message_the_producer_cannot_read_fails_alone_and_the_sends_coalesced_with_it_go_out(cluster):
    """A coalesced send whose message cannot even be checked (a topic given as ``bytes``: ``TypeError``) ends with
    that error, alone; the sends taken together with it are sent, and the window is whole again. The error escaped
    the loop callback that took the batch: every send of the batch, before and after the bad one, was never
    answered, not even by ``shutdown()``, and held its place in the window for good."""
    cluster.start_broker()
    with Producer("p_unreadable", cluster.namesrv_addr, max_in_flight=8) as producer:
        producer.send(Message("Unreadable", b"warm-up"))
        assert producer._runtime is not None
        gate = threading.Event()
        producer._runtime.call_soon(lambda: gate.wait(10))  # the loop is busy: the next sends are taken together
        futures = [producer.send_async(Message("Unreadable", f"m{i}".encode())) for i in range(3)]
        bad = producer.send_async(Message(b"Unreadable", b"bad"))  # type: ignore[arg-type]
        futures += [producer.send_async(Message("Unreadable", f"m{i}".encode())) for i in range(3, 6)]
        gate.set()
        assert isinstance(bad.exception(10), TypeError)
        assert all(f.result(10).status == SendStatus.SEND_OK for f in futures)
        assert wait_until(lambda: producer._in_flight == 0, 5), producer._in_flight


def test_a_send_async_refused_for_its_delay_level_takes_no_place_in_the_window(cluster):
    """``send_async`` of a message whose ``DELAY`` property is not a level raises ``InvalidMessageError`` and keeps
    no place in the window of unanswered sends. The place was taken before the property was read, and never freed:
    ``max_in_flight`` such calls, and every later ``send_async`` waited for room for good."""
    cluster.start_broker()
    with Producer("p_bad_delay", cluster.namesrv_addr, max_in_flight=2) as producer:
        producer.send(Message("BadDelay", b"warm-up"))
        for _ in range(2):
            with pytest.raises(InvalidMessageError):
                producer.send_async(Message("BadDelay", b"x", properties={"DELAY": "soon"}))
        sent: list[SendFuture] = []
        sender = threading.Thread(target=lambda: sent.append(producer.send_async(Message("BadDelay", b"ok"))),
                                  daemon=True)
        sender.start()
        sender.join(5)
        assert sent, "send_async waits for room the refused sends still hold"
        assert sent[0].result(10).status == SendStatus.SEND_OK


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt, ValueError])
def test_a_send_callback_that_raises_anything_leaves_the_client_running(cluster, raised: type[BaseException]):
    """A send's callback runs on the client's loop; whatever it raises (``sys.exit()`` in it too) is logged and the
    client goes on: the sends after it are answered and ``shutdown()`` returns at once. ``SystemExit`` or
    ``KeyboardInterrupt`` got past the callback and ended the loop's thread: every later send was never answered,
    and ``shutdown()`` waited out its 30 s and raised."""
    cluster.start_broker()
    producer = Producer("p_callback_raises", cluster.namesrv_addr).start()
    try:
        producer.send(Message("CallbackRaises", b"warm-up"))
        assert producer._runtime is not None
        gate = threading.Event()
        producer._runtime.call_soon(lambda: gate.wait(10))  # the send is answered after its callback is added
        first = producer.send_async(Message("CallbackRaises", b"first"))

        def fail(_fut: SendFuture) -> None:
            raise raised("from a send's callback")

        first.add_done_callback(fail)
        gate.set()
        assert first.result(10).status == SendStatus.SEND_OK
        assert producer.send_async(Message("CallbackRaises", b"after")).result(10).status == SendStatus.SEND_OK
    finally:
        began = time.monotonic()
        producer.shutdown()
    assert time.monotonic() - began < 10


def test_send_async_on_the_clients_loop_with_a_full_window_raises_instead_of_stalling_the_loop(cluster):
    """A send's callbacks run on the client's loop; a ``send_async`` made there while ``max_in_flight`` sends are
    unanswered cannot wait for room (the answers that would make it come through the same loop): it raises, and
    the client goes on answering the sends in flight."""
    cluster.start_broker()
    outcome: dict[str, object] = {}
    done = threading.Event()
    with Producer("p_loop_window", cluster.namesrv_addr, max_in_flight=2) as producer:
        producer.send(Message("LoopWindow", b"warm-up"))

        def on_first(_fut: object) -> None:
            # the first send's place is free again (the second's may be too): at most two more fit the window
            later = []
            try:
                for i in range(3):
                    later.append(producer.send_async(Message("LoopWindow", f"later{i}".encode())))
            except ClientError as exc:
                outcome["refused"] = exc
            outcome["later"] = later
            outcome["thread"] = threading.current_thread()
            done.set()

        first = producer.send_async(Message("LoopWindow", b"first"))
        second = producer.send_async(Message("LoopWindow", b"second"))
        # registered on the loop thread: run there too when ``first`` is already answered (from this thread it
        # would then run here, where send_async may wait)
        assert producer._runtime is not None
        producer._runtime.loop.call_soon_threadsafe(first.add_done_callback, on_first)
        assert done.wait(10), "the loop stalled in send_async"
        assert outcome["thread"] is not threading.current_thread()  # on the client's loop
        assert isinstance(outcome.get("refused"), ClientError)
        later = outcome["later"]
        assert isinstance(later, list) and 1 <= len(later) <= 2
        results = [f.result(10) for f in [first, second, *later]]
        assert all(r.status == SendStatus.SEND_OK for r in results)
        # and the window is whole again: a send from this thread goes through
        assert producer.send_async(Message("LoopWindow", b"after")).result(10).status == SendStatus.SEND_OK


def test_shutdown_settles_every_async_send_still_unanswered(cluster):
    """Async sends still in flight when the producer shuts down end, each with its result or a ``ClientError``:
    a future left pending would hang a caller waiting without a timeout, and never run its callbacks."""
    cluster.start_broker()
    with Producer("p_stop_async", cluster.namesrv_addr) as producer:  # no route yet: the sends take a while
        futures = [producer.send_async(Message("StopAsync", f"s{i}".encode())) for i in range(50)]
    outcomes = []
    for f in futures:
        try:
            outcomes.append(f.result(5).status)
        except ClientError as exc:  # a TimeoutError (the future still pending) is not
            outcomes.append(exc)
    assert len(outcomes) == 50


@pytest.mark.parametrize("to_queue", [False, True], ids=["coalesced", "to-a-queue"])
def test_a_callback_sending_again_on_failure_is_refused_at_shutdown_instead_of_recursing(cluster, to_queue: bool):
    """A send's callback that sends again whenever a send fails (a retry loop): the sends ``shutdown()`` ends fail,
    and their callbacks' new sends are refused at once with ``ClientError`` (RocketMQ's "The producer service state
    not OK"), with no callback of their own. Such a send was taken: it failed on the closed connections and its
    callback sent again, thousands of times, and once the runtime closed it failed inside ``send_async``, so the
    callback added to its future ran at once and sent again, and so on until ``RecursionError``."""
    broker = cluster.start_broker()
    producer = Producer("p_resend", cluster.namesrv_addr, send_timeout_s=30).start()
    queue = producer.send(Message("Resend", b"warm-up")).message_queue if to_queue else None
    calls = 0
    refused: list[BaseException] = []

    def send_again_on_failure(fut: SendFuture) -> None:
        nonlocal calls
        calls += 1
        if fut.exception() is None:
            return
        try:
            producer.send_async(Message("Resend", b"again"), queue).add_done_callback(send_again_on_failure)
        except ClientError as exc:
            refused.append(exc)

    os.kill(broker.pid, signal.SIGSTOP)  # the broker answers nothing: the sends are unanswered at shutdown
    try:
        for i in range(5):
            producer.send_async(Message("Resend", f"r{i}".encode()), queue).add_done_callback(send_again_on_failure)
        producer.shutdown()
    finally:
        os.kill(broker.pid, signal.SIGCONT)
    assert (calls, len(refused)) == (5, 5)


@pytest.mark.parametrize("to_queue", [False, True], ids=["coalesced", "to-a-queue"])
def test_async_sends_from_another_thread_racing_shutdown_all_end(cluster, to_queue: bool):
    """A thread that keeps calling ``send_async`` while another shuts the producer down: each of its sends ends
    (with its result or a ``ClientError``) and the thread is refused once the producer stopped, however the sends
    fell around the loop's last turns. A send scheduled in the loop's last turn was never taken: every later one
    queued behind it until the window was full, and the sending thread waited for room forever."""
    cluster.start_broker()
    producer = Producer("p_stop_race", cluster.namesrv_addr).start()
    queue = producer.send(Message("StopRace", b"warm-up")).message_queue if to_queue else None
    futures: list[SendFuture] = []
    refused: list[BaseException] = []
    answered = threading.Event()

    def keep_sending() -> None:
        while True:
            try:
                fut = producer.send_async(Message("StopRace", b"x"), queue)
            except BaseException as exc:  # whatever ended the thread is looked at below
                refused.append(exc)
                return
            fut.add_done_callback(lambda _f: answered.set())
            futures.append(fut)

    sender = threading.Thread(target=keep_sending, daemon=True)
    sender.start()
    assert answered.wait(10)  # sends are going through: shut down in their midst
    producer.shutdown()
    sender.join(10)
    assert not sender.is_alive(), "the sending thread waits in send_async for good"
    assert len(refused) == 1 and isinstance(refused[0], ClientError), refused
    assert wait_until(lambda: all(f.done() for f in futures), 5), sum(not f.done() for f in futures)
    assert all(isinstance(f.exception(), ClientError) for f in futures if f.exception() is not None)


def test_sync_sends_from_several_threads_racing_shutdown_all_end_with_a_client_error(cluster):
    """Threads that keep calling ``send`` while another shuts the producer down: each call returns its result or
    raises ``ClientError``, promptly, however it fell around the loop's last turns. A call scheduled after the
    loop's last turn waited out its whole timeout (60 s); one whose task the close cancelled raised
    ``CancelledError``. Several rounds: one lands in those gaps now and then."""
    cluster.start_broker()
    for round_no in range(8):
        producer = Producer("p_sync_stop_race", cluster.namesrv_addr).start()
        producer.send(Message("SyncStopRace", b"warm-up"))
        ended: list[BaseException] = []
        sent = threading.Event()

        def keep_sending(producer: Producer = producer, ended: list[BaseException] = ended,
                         sent: threading.Event = sent) -> None:
            while True:
                try:
                    producer.send(Message("SyncStopRace", b"x"))
                except BaseException as exc:  # whatever ended the thread is looked at below
                    ended.append(exc)
                    return
                sent.set()

        senders = [threading.Thread(target=keep_sending, daemon=True) for _ in range(4)]
        for t in senders:
            t.start()
        assert sent.wait(10)
        producer.shutdown()
        for t in senders:
            t.join(15)
        assert not any(t.is_alive() for t in senders), f"round {round_no}: a sending thread still waits in send"
        assert len(ended) == 4 and all(isinstance(e, ClientError) for e in ended), (round_no, ended)


def test_a_sync_send_once_shutdown_began_is_refused_up_front(cluster, monkeypatch):
    """A ``send`` called while ``shutdown()`` is under way (its unregistration held here) is refused at once, as
    ``send_async`` is and as RocketMQ's producer refuses a send once its state is not RUNNING; it neither waits
    for the shutdown nor reaches the broker."""
    cluster.start_broker()
    with Admin(cluster.namesrv_addr) as admin:  # routed before the check below reads it back
        admin.create_topic("SyncRefused", queue_nums=4)
    cluster.wait_route("SyncRefused")
    producer = Producer("p_sync_refused", cluster.namesrv_addr).start()
    producer.send(Message("SyncRefused", b"warm-up"))
    unregistering, release = hold_unregister(producer, monkeypatch)
    stopping = threading.Thread(target=producer.shutdown)
    stopping.start()
    try:
        assert unregistering.wait(10)
        with pytest.raises(ClientError, match="shutdown\\(\\) began"):
            producer.send(Message("SyncRefused", b"during the shutdown"))
    finally:
        release.set()
        stopping.join(15)
    with PullConsumer("c_sync_refused", cluster.namesrv_addr) as consumer:
        stored = [m.body for mq in consumer.fetch_subscribe_message_queues("SyncRefused")
                  for m in consumer.pull(mq, offset=0).msgs]
    assert stored == [b"warm-up"]


def test_shutdown_from_two_threads_at_once_ends_both_quietly(cluster):
    """Two threads shut one producer down together: both return, neither raises."""
    cluster.start_broker()
    producer = Producer("p_double_stop", cluster.namesrv_addr).start()
    producer.send(Message("DoubleStop", b"warm-up"))
    barrier = threading.Barrier(2)
    failures: list[BaseException] = []

    def stop() -> None:
        barrier.wait()
        try:
            producer.shutdown()
        except BaseException as exc:
            failures.append(exc)

    stoppers = [threading.Thread(target=stop, daemon=True) for _ in range(2)]
    for t in stoppers:
        t.start()
    for t in stoppers:
        t.join(30)
    assert not any(t.is_alive() for t in stoppers), "a shutdown never returned"
    assert failures == []
    assert not producer.started


def test_start_from_two_threads_at_once_makes_one_client(cluster):
    """Two threads start one producer together: one loop thread is made, sends go through, and the shutdown ends
    it. Each start made a runtime and an instance of its own, the last ones kept: a loop thread was left running
    for good, and the shutdown raised (the instance closed on the other loop: "attached to a different loop")."""
    cluster.start_broker()
    producer = Producer("p_double_start", cluster.namesrv_addr)
    barrier = threading.Barrier(2)

    def start() -> None:
        barrier.wait()
        producer.start()

    starters = [threading.Thread(target=start, daemon=True) for _ in range(2)]
    for t in starters:
        t.start()
    for t in starters:
        t.join(30)
    loop_threads = [t for t in threading.enumerate() if t.name == f"txmq-{producer.instance_name}"]
    try:
        assert len(loop_threads) == 1, loop_threads
        assert producer.send_async(Message("DoubleStart", b"x")).result(10).status == SendStatus.SEND_OK
    finally:
        producer.shutdown()
    for t in loop_threads:
        t.join(10)
    assert not any(t.is_alive() for t in loop_threads)


class _Unknown:
    """A transaction listener that decides nothing (the test sends no transaction)."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN


@pytest.mark.parametrize("make", [lambda addr: Producer("p_start_waits", addr),
                                  lambda addr: TransactionProducer("p_tx_start_waits", _Unknown(), addr)],
                         ids=["producer", "transaction-producer"])
def test_a_start_while_another_thread_starts_returns_once_the_client_runs(cluster, monkeypatch, make):
    """A ``start()`` called while another thread's start is still under way waits for it: the client runs once it
    returns, and a send right after goes through. It returned at once (the first start had made the runtime), and
    the send was refused as not running. The first start is held in its ``_on_start``; the second is let go on
    once it waits for the lifecycle lock (or once it returned without)."""
    cluster.start_broker()
    producer = make(cluster.namesrv_addr)
    in_start, release = threading.Event(), threading.Event()
    real_on_start = producer._on_start

    async def held_on_start() -> None:
        in_start.set()
        await asyncio.to_thread(release.wait, 10)
        await real_on_start()

    monkeypatch.setattr(producer, "_on_start", held_on_start)
    waiting_for_lock = threading.Event()
    lock = producer._lifecycle_lock

    class Watched:
        def __enter__(self) -> None:
            if in_start.is_set():
                waiting_for_lock.set()
            lock.__enter__()

        def __exit__(self, *exc: object) -> None:
            lock.__exit__(*exc)

    monkeypatch.setattr(producer, "_lifecycle_lock", Watched())
    outcome: list[Any] = []

    def start_and_send() -> None:
        try:
            producer.start()
            outcome.append(producer.send(Message("StartWaits", b"x")).status)
        except BaseException as exc:  # looked at below
            outcome.append(exc)

    first = threading.Thread(target=producer.start, daemon=True)
    first.start()
    second = threading.Thread(target=start_and_send, daemon=True)
    try:
        assert in_start.wait(10)
        second.start()
        assert wait_until(lambda: waiting_for_lock.is_set() or not second.is_alive(), 10)
    finally:
        release.set()
        first.join(30)
        second.join(30)
        producer.shutdown()
    assert outcome == [SendStatus.SEND_OK]


def test_shutdown_called_again_by_a_callback_of_a_send_it_ends_returns(cluster):
    """A send the loop's last turn left behind is ended by ``shutdown()`` itself, on the thread shutting down; its
    callback calling ``shutdown()`` again there returns (the shutdown under way ends the client), where it waited
    for the lock its own thread held, for good. The left-behind drain is made sure by dropping the runtime's
    ``call_soon`` of the producer's outbox drain: the loop never takes the send."""
    cluster.start_broker()
    producer = Producer("p_reenter", cluster.namesrv_addr).start()
    producer.send(Message("Reenter", b"warm-up"))
    ended: list[BaseException | None] = []

    def shut_down_again(fut: SendFuture) -> None:
        producer.shutdown()
        ended.append(fut.exception())

    runtime, outbox = producer._runtime, producer._outbox
    call_soon = runtime.call_soon
    runtime.call_soon = lambda callback: None if callback == outbox._drain else call_soon(callback)
    producer.send_async(Message("Reenter", b"left behind")).add_done_callback(shut_down_again)
    stopper = threading.Thread(target=producer.shutdown, daemon=True)
    stopper.start()
    stopper.join(60)
    assert not stopper.is_alive(), "shutdown() waited for itself"
    assert len(ended) == 1 and isinstance(ended[0], ClientError), ended
