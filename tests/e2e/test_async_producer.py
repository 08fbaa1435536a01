"""``AsyncProducer``: a producer started on the application's own asyncio loop. Its sends run there, with no
thread of its own; its window waits on that loop; its shutdown ends what it started and leaves the loop running.
A real broker and name server, on both event loops an application may run (asyncio's and uvloop's)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from tests.e2e.cluster import Cluster
from txmq import AsyncProducer, ClientError, Message, MessageQueue, Producer, PullConsumer, SendStatus


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """Run a coroutine to its end on a fresh loop of the kind an application would own."""
    factory = asyncio.new_event_loop if request.param == "asyncio" else uvloop.new_event_loop

    def run_on_new_loop(coro: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)
    return run_on_new_loop


def _stored(namesrv: str, topic: str) -> dict[str, tuple[int, int, bytes]]:
    """Every message of ``topic``, by id: (queue id, queue offset, body)."""
    stored = {}
    with PullConsumer("c_async_producer", namesrv) as consumer:
        for mq in consumer.fetch_subscribe_message_queues(topic):
            offset = 0
            while got := consumer.pull(mq, offset=offset, max_nums=256).msgs:
                stored.update({m.msg_id: (m.queue_id, m.queue_offset, m.body) for m in got})
                offset = got[-1].queue_offset + 1
    return stored


def test_sends_run_on_the_applications_loop_and_each_answer_names_where_it_was_stored(cluster: Cluster, run):
    cluster.start_broker()

    async def main() -> tuple[list[Any], set[str]]:
        before = set(threading.enumerate())  # other clients' threads of this process (a session's Admin): not its own
        async with AsyncProducer("p_async", cluster.namesrv_addr) as producer:
            first = await producer.send(Message("OnAppLoop", b"m-first"))
            futures = [await producer.send_async(Message("OnAppLoop", f"m{i}".encode())) for i in range(500)]
            results = [first, *await asyncio.gather(*futures)]
            started = {t.name for t in set(threading.enumerate()) - before}
        return results, started

    results, started = run(main())
    assert not [name for name in started if name.startswith("txmq-")], started  # no loop thread of its own
    assert all(r.status == SendStatus.SEND_OK for r in results)
    told = {r.msg_id: (r.queue_id, r.queue_offset, b"m-first" if i == 0 else f"m{i - 1}".encode())
            for i, r in enumerate(results)}
    assert len(told) == 501
    assert _stored(cluster.namesrv_addr, "OnAppLoop") == told


def test_sends_on_the_applications_loop_do_not_wake_it_through_its_self_pipe(cluster: Cluster):
    """Only another thread needs ``call_soon_threadsafe`` (a write to the loop's self-pipe, and a read and a turn of
    the loop): sends made on the loop schedule their work with ``call_soon``. asyncio's loop, whose method an
    instance attribute can wrap (uvloop's cannot)."""
    cluster.start_broker()

    async def main() -> tuple[int, list[SendStatus]]:
        async with AsyncProducer("p_async_pipe", cluster.namesrv_addr) as producer:
            await producer.send(Message("NoSelfPipe", b"warm"))  # route looked up, connection open
            loop = asyncio.get_running_loop()
            threadsafe = loop.call_soon_threadsafe
            calls = 0

            def counting(*args: Any, **kwargs: Any) -> Any:
                nonlocal calls
                calls += 1
                return threadsafe(*args, **kwargs)
            loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
            try:
                futures = [await producer.send_async(Message("NoSelfPipe", f"m{i}".encode())) for i in range(50)]
                results = await asyncio.gather(*futures)
                results.append(await producer.send(Message("NoSelfPipe", b"last")))
            finally:
                del loop.call_soon_threadsafe
        return calls, [r.status for r in results]

    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        calls, statuses = runner.run(main())
    assert statuses == [SendStatus.SEND_OK] * 51
    assert calls == 0


def test_a_full_window_waits_on_the_loop_instead_of_failing(cluster: Cluster, run):
    """At most ``max_in_flight`` sends unanswered: the next ``send_async`` waits for an answer, which comes
    through the same loop, rather than raising as ``Producer.send_async`` must on its own loop thread."""
    cluster.start_broker()
    most = 0

    async def main() -> list[Any]:
        nonlocal most
        async with AsyncProducer("p_async_window", cluster.namesrv_addr, max_in_flight=4) as producer:
            await producer.send(Message("Window", b"warm-up"))
            futures: list[asyncio.Future[Any]] = []
            for i in range(300):
                futures.append(await producer.send_async(Message("Window", f"w{i}".encode())))
                most = max(most, sum(not f.done() for f in futures))
            return await asyncio.gather(*futures)

    results = run(main())
    assert len(results) == 300 and all(r.status == SendStatus.SEND_OK for r in results)
    assert 1 < most <= 4, most  # the window filled, and no further


def test_shutdown_ends_unanswered_sends_with_a_client_error_and_leaves_the_loop_running(cluster: Cluster, run):
    broker = cluster.start_broker()

    async def main() -> list[BaseException | None]:
        producer = await AsyncProducer("p_async_stop", cluster.namesrv_addr, send_timeout_s=30).start()
        await producer.send(Message("Stopped", b"warm-up"))  # route and connection made
        os.kill(broker.pid, signal.SIGSTOP)  # the broker answers nothing from here
        try:
            futures = [await producer.send_async(Message("Stopped", f"s{i}".encode())) for i in range(20)]
            await asyncio.sleep(0.2)
            assert not any(f.done() for f in futures)
            await producer.shutdown()
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        await asyncio.sleep(0)  # the loop is the application's: it goes on
        return [f.exception() for f in futures]

    outcomes = run(main())
    assert all(isinstance(exc, ClientError) for exc in outcomes), outcomes


def test_blocking_calls_on_the_applications_loop_are_refused_not_deadlocked(cluster: Cluster, run):
    cluster.start_broker()

    async def main() -> str:
        async with AsyncProducer("p_async_block", cluster.namesrv_addr) as producer:
            with pytest.raises(ClientError) as refused:
                producer.producer.send(Message("Blocking", b"x"))
            with pytest.raises(ClientError):
                producer.producer.shutdown()
            with pytest.raises(ClientError, match="awaiting its shutdown"):  # nor from another thread
                await asyncio.to_thread(producer.producer.shutdown)
            sent = await producer.send(Message("Blocking", b"after"))  # still works after the refusals
            assert sent.status == SendStatus.SEND_OK
            return str(refused.value)

    assert "loop" in run(main())


def test_an_async_producer_not_started_refuses_sends(run):
    async def main() -> None:
        producer = AsyncProducer("p_async_idle", "127.0.0.1:1")
        with pytest.raises(ClientError, match="not started"):
            await producer.send(Message("Idle", b"x"))
        with pytest.raises(ClientError, match="not started"):
            await producer.send_async(Message("Idle", b"x"))
        await producer.shutdown()  # nothing to stop: no error

    run(main())


def test_sends_made_just_before_shutdown_end_with_a_client_error_and_free_their_window(cluster: Cluster, run):
    """``shutdown()`` right after ``send_async``, before the loop ran the batch: the send's task is cancelled before
    its first step, so no handler inside it can end the send. Each still ends with ``ClientError``, and a producer
    started again has its whole window."""
    cluster.start_broker()

    async def main() -> tuple[list[BaseException | None], list[Any]]:
        producer = AsyncProducer("p_async_abrupt", cluster.namesrv_addr, max_in_flight=3)
        await producer.start()
        cut_short = [await producer.send_async(Message("Abrupt", b"a")) for _ in range(3)]
        await producer.shutdown()
        outcomes = [exc for exc in await asyncio.wait_for(asyncio.gather(*cut_short, return_exceptions=True), 5)]
        async with await producer.start():
            again = [await producer.send_async(Message("Abrupt", b"b")) for _ in range(3)]
            return outcomes, await asyncio.wait_for(asyncio.gather(*again), 10)

    outcomes, results = run(main())
    assert all(isinstance(exc, ClientError) for exc in outcomes), outcomes
    assert all(r.status == SendStatus.SEND_OK for r in results)


@pytest.mark.parametrize("misconfigure", [
    pytest.param(lambda p: setattr(p, "namesrv", ";"), id="no-name-server-address"),
    pytest.param(lambda p: p.use_tls("/nonexistent/ca.pem"), id="missing-ca-file"),
])
def test_a_start_that_fails_leaves_the_producer_stopped(run, misconfigure: Callable[[Any], Any]):
    """A client that cannot be made (no name server address, a CA file that is not there) fails its start, and
    every later start, rather than leaving a runtime behind that reads as started: a thread for the threaded
    ``Producer``, and for both a second ``start()`` that returned a producer whose sends failed with an
    ``AssertionError``."""
    async def main() -> None:
        producer = AsyncProducer("p_async_unmade", "127.0.0.1:1")
        misconfigure(producer.producer)
        for _ in range(2):
            with pytest.raises(Exception) as failed:
                await producer.start()
            assert not isinstance(failed.value, AssertionError)
            assert not producer.producer.started
        with pytest.raises(ClientError, match="not started"):
            await producer.send(Message("Unmade", b"x"))

    run(main())
    producer = Producer("p_unmade", "127.0.0.1:1")
    misconfigure(producer)
    for _ in range(2):
        with pytest.raises(Exception) as failed:
            producer.start()
        assert not isinstance(failed.value, AssertionError)
        assert not producer.started
    assert not [t.name for t in threading.enumerate() if t.name.startswith(f"txmq-{producer.instance_name}")]


def test_a_shutdown_cut_short_still_closes_the_connections(cluster: Cluster, run):
    """A shutdown the application gives up on (its own timeout, here while the broker answers nothing to the
    unregister) is cancelled inside ``_on_shutdown``: the client's connections are closed all the same, not left
    open for the garbage collector to warn about."""
    broker = cluster.start_broker()

    async def main() -> list[Any]:
        producer = await AsyncProducer("p_async_cut", cluster.namesrv_addr).start()
        await producer.send(Message("Cut", b"warm-up"))  # connections to the name server and the broker
        assert producer.producer.instance is not None
        remoting = producer.producer.instance.remoting
        connections = list(remoting._connections.values())
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(producer.shutdown(), 0.5)
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        assert not producer.producer.started
        return [conn for conn in connections if not conn.closed]

    assert run(main()) == []


def test_sends_waiting_for_room_at_shutdown_are_refused(cluster: Cluster, run):
    """``shutdown()`` while ``send_async`` waits for room: the sends shutdown ends free the window, and a waiter let
    in then started a send of its own. When the room came from a send to a given queue (its answer one loop step
    later, through ``ClientRuntime.post``), shutdown had returned by the time the loop took the new send: it was
    dropped (an ``AssertionError`` in a loop callback) and its future never ended. The waiters are refused with
    ``ClientError`` instead."""
    broker = cluster.start_broker()

    async def main() -> list[Any]:
        producer = await AsyncProducer("p_async_wait", cluster.namesrv_addr, max_in_flight=1, send_timeout_s=30).start()
        await producer.send(Message("Waiting", b"warm-up"))
        queue = MessageQueue("Waiting", "broker-a", 0)
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            await producer.send_async(Message("Waiting", b"in flight"), queue)
            waiters = [asyncio.create_task(producer.send_async(Message("Waiting", b"waits"))) for _ in range(3)]
            await asyncio.sleep(0.2)
            await producer.shutdown()
            return await asyncio.gather(*waiters, return_exceptions=True)
        finally:
            os.kill(broker.pid, signal.SIGCONT)

    assert [type(exc) for exc in run(main())] == [ClientError] * 3


def test_calls_from_another_thread_while_shutdown_ends_the_client_are_refused_and_run_nothing(cluster: Cluster, run):
    """``shutdown()`` ends what the client started on the application's loop, which goes on. A call made from
    another thread while it does so, or after it, through the inner producer or the client's runtime (a send, a
    posted coroutine, a callback) ends with ``ClientError`` and runs nothing on the loop: such calls were scheduled
    there, and ran after the client had ended."""
    cluster.start_broker()

    async def main() -> tuple[list[Any], list[Any], list[str]]:
        producer = await AsyncProducer("p_async_late", cluster.namesrv_addr).start()
        sent = await producer.send(Message("Late", b"warm-up"))
        inner, runtime = producer.producer, producer.producer._runtime
        assert runtime is not None
        ran: list[str] = []
        cancelled, release = asyncio.Event(), asyncio.Event()

        async def slow_to_end() -> None:  # holds the shutdown in its wait for the tasks it cancelled
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                await release.wait()
                raise

        async def late_coroutine() -> None:
            ran.append("coroutine")

        def late_calls() -> list[Any]:
            """The outcome of each call: its ClientError (raised, or its future's at once), else what it returned."""
            calls: list[Callable[[], Any]] = [
                lambda: inner.send_async(Message("Late", b"coalesced")),
                lambda: inner.send_async(Message("Late", b"to a queue"), sent.message_queue),
                lambda: runtime.post(late_coroutine()),
                lambda: runtime.call_soon(lambda: ran.append("callback")),
            ]
            outcomes = []
            for call in calls:
                try:
                    fut = call()
                except ClientError as exc:
                    outcomes.append(exc)
                    continue
                outcomes.append(fut.exception(0) if fut is not None and fut.done() else fut)
            return outcomes

        runtime.spawn(slow_to_end())
        stopping = asyncio.create_task(producer.shutdown())
        await cancelled.wait()
        during = await asyncio.to_thread(late_calls)
        release.set()
        await stopping
        after = await asyncio.to_thread(late_calls)
        await asyncio.sleep(0.2)  # the loop goes on: whatever was scheduled on it has run by now
        return during, after, ran

    during, after, ran = run(main())
    assert all(isinstance(outcome, ClientError) for outcome in during + after), (during, after)
    assert ran == []
