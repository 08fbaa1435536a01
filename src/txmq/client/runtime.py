"""The client's engine room: an asyncio loop on a background thread, and a sync API in front of it.

Users call plain methods from any thread; each call submits a coroutine to the loop and waits for it with a
timeout. An application on asyncio may lend the client its own loop instead (``AsyncProducer``): then no thread
is started and the client's coroutines are awaited on that loop directly. Listener code (local transactions,
checks, message consumption) runs on thread pools unless a consumer asks for ``listener_on_loop``, so a slow
listener cannot stall network IO.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Generic, TypeVar

from txmq.errors import ClientError
from txmq.remoting.transport import new_event_loop

T = TypeVar("T")
Q = TypeVar("Q")

log = logging.getLogger("txmq.client")


class ClientRuntime:
    STOP_WAIT_S = 10.0  # how long close() waits for the loop's tasks to end, and then for its thread

    def __init__(self, name: str, *, borrow: bool = False) -> None:
        """A loop of its own on a thread named ``txmq-<name>``; with ``borrow``, the caller's running loop instead
        (an application on asyncio: nothing the client does crosses to another thread, and ``aclose`` ends it)."""
        self._closing = False  # close() or aclose() began: nothing scheduled from now on is sure to run
        self._hand_offs: list[HandOff[Any]] = []  # what close() and aclose() end the items of
        # post(): coroutines handed over from user threads, started by one loop callback per batch.
        self._posted: HandOff[tuple[Coroutine[Any, Any, Any], concurrent.futures.Future[Any]]] = \
            HandOff(self, self._start_posted, _fail_posted)
        self._tasks: set[asyncio.Task[Any]] = set()  # (borrowed) started by post() and spawn(): what aclose() cancels
        self.borrowed = borrow
        if borrow:
            self.loop = asyncio.get_running_loop()
            self._thread = threading.current_thread()
            return
        self.loop = new_event_loop()
        self._stop_lock = threading.Lock()
        self._loop_ended = False  # run_forever returned (the loop thread's last steps follow)
        self._left_to_thread = False  # close() gave up waiting: the loop thread closes the loop itself
        self._thread = threading.Thread(target=self._run, name=f"txmq-{name}", daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()
        with self._stop_lock:
            self._loop_ended = True
            left = self._left_to_thread
        if left:  # close() returned while a callback blocked the loop: the loop ends here, once it returned
            self._close_loop()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (from any thread but the loop's). Posted (``post``),
        so that a call racing ``close()`` ends with ``ClientError`` however it fell around the loop's last turns,
        not cancelled, nor left waiting for a loop that is gone."""
        if self.on_loop_thread():
            coro.close()
            raise ClientError("a blocking client call was made from the client's own event loop thread")
        fut = self.post(coro)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise ClientError(f"client call timed out after {timeout}s") from None
        except concurrent.futures.CancelledError:  # its task was cancelled by close()
            raise ClientError("client is shut down") from None

    def on_loop_thread(self) -> bool:
        """Whether the caller runs on the loop's own thread, where waiting for the loop would stall it for good."""
        return threading.current_thread() is self._thread

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the loop soon, from any thread: from the loop's own thread without waking it through
        its self-pipe (a write, and a read on the loop, per call), which only another thread needs. Raises
        ``ClientError`` once ``close()`` began, when the callback might never run (the loop's last turn left
        behind): the caller ends its work itself."""
        if self._closing:
            raise ClientError("client is shut down")
        try:
            if self.on_loop_thread():
                self.loop.call_soon(callback)
            else:
                self.loop.call_soon_threadsafe(callback)
        except RuntimeError:  # the loop is closed
            raise ClientError("client is shut down") from None

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """A task on the loop (called there) that shutting down cancels, also on a borrowed loop."""
        task = self.loop.create_task(coro)
        if self.borrowed:  # a loop of its own is closed with every task on it: no set to keep per send there
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return task

    def post(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the loop from any thread, its outcome in the returned future: the coroutines posted
        before the loop gets to them start in one loop callback (one wake-up of the loop per batch, not per call).
        Cancelling the returned future before its coroutine started means it never runs; after that, cancellation
        reaches the task."""
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._posted.put((coro, fut))
        return fut

    def _start_posted(self, batch: list[tuple[Coroutine[Any, Any, Any], concurrent.futures.Future[Any]]]) -> None:
        spawn = self.spawn
        for coro, fut in batch:
            if fut.cancelled():
                coro.close()
                continue
            task = spawn(coro)
            task.add_done_callback(functools.partial(_settle, fut))
            fut.add_done_callback(functools.partial(self._propagate_cancel, task))

    def _propagate_cancel(self, task: asyncio.Task[Any], fut: concurrent.futures.Future[Any]) -> None:
        if fut.cancelled() and not task.done():
            self.loop.call_soon_threadsafe(task.cancel)

    def _fail_hand_offs(self) -> None:
        """End every item handed over and not taken: no loop takes them now."""
        exc = ClientError("client is shut down")
        for hand_off in self._hand_offs:
            hand_off.fail(exc)

    def close(self) -> None:
        """Stop the loop and its thread, cancelling every task left on it (a borrowed loop: ``aclose``). A loop a
        callback blocks (a listener on the loop that does not return) is waited for ``STOP_WAIT_S`` for its tasks
        and as long again for its thread, not longer: the client is closed all the same (its calls end with
        ``ClientError``), and the loop's thread closes the loop once the callback returns."""
        if self.borrowed:
            raise ClientError("a client on a borrowed loop is closed by awaiting aclose() on that loop")
        if not self.loop.is_running():
            return
        self._closing = True

        async def _drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        # The loop blocked, or a task swallowing its cancellation: it is stopped below all the same.
        with contextlib.suppress(TimeoutError):
            asyncio.run_coroutine_threadsafe(_drain(), self.loop).result(self.STOP_WAIT_S)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(self.STOP_WAIT_S)
        with self._stop_lock:
            self._left_to_thread = not self._loop_ended
        if self._left_to_thread:
            log.warning("client loop thread %s did not stop within %.0f s (a callback on it does not return): the "
                        "client is closed, and its loop is closed once that callback returns", self._thread.name,
                        2 * self.STOP_WAIT_S)
        else:
            self._thread.join()  # its last steps after run_forever
            self._close_loop()
        self._fail_hand_offs()

    def _close_loop(self) -> None:
        """Cancel what is left on the stopped loop and close it (on the thread that stopped it, or close()'s)."""
        self._cancel_stragglers()
        self.loop.close()

    def _cancel_stragglers(self) -> None:
        """Cancel the tasks started after ``_drain`` took its list (by callbacks scheduled before ``_closing`` was
        seen, run in the loop's last turns), on this thread now that the loop's own has ended: a task the closed
        loop dropped would never end the future of the call it runs."""
        for _ in range(3):  # bounded: a task that swallows its cancellation must not hold the shutdown for ever
            tasks = asyncio.all_tasks(self.loop)
            if not tasks:
                return
            for task in tasks:
                task.cancel()
            self.loop.run_until_complete(asyncio.wait(tasks, timeout=1.0))

    async def aclose(self) -> None:
        """End a client on a borrowed loop: cancel the tasks it started and wait for them (the loop goes on: it is
        the application's). Closing from the start, as ``close``: a call from another thread meanwhile, or later,
        ends with ``ClientError`` rather than scheduling work on the loop after the client ended; what was handed
        over before ends too, before a drain already scheduled could start it."""
        self._closing = True
        self._fail_hand_offs()
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._fail_hand_offs()


class HandOff(Generic[Q]):
    """Items handed to the loop from any thread and taken there in batches: the items put before the loop gets to
    them go to ``handle`` in one loop callback (one wake-up of the loop per batch, not per item). ``handle`` ends
    each item itself, and must not raise: the items of its batch are no longer here for ``fail``. The runtime ends
    the items left at its close with ``fail_item``; so does a ``put`` the closing runtime refuses."""

    __slots__ = ("_fail_item", "_handle", "_items", "_runtime", "_scheduled")

    def __init__(self, runtime: ClientRuntime, handle: Callable[[list[Q]], None],
                 fail_item: Callable[[Q, BaseException], None]) -> None:
        self._items: collections.deque[Q] = collections.deque()
        self._scheduled = False  # a drain is scheduled and has not begun taking items
        self._runtime = runtime
        self._handle = handle
        self._fail_item = fail_item
        runtime._hand_offs.append(self)

    def put(self, item: Q) -> None:
        """Hand ``item`` over (from any thread): one append, and a flag check while a drain is scheduled."""
        self._items.append(item)
        if not self._scheduled:
            # No lock needed: _drain clears the flag before it takes items, so an item appended while the
            # flag still reads True is taken by the drain that is about to run.
            self._scheduled = True
            try:
                self._runtime.call_soon(self._drain)
            except ClientError as exc:
                self.fail(exc)

    def _drain(self) -> None:
        self._scheduled = False
        batch = list(taken(self._items))
        if batch:
            self._handle(batch)

    def fail(self, exc: BaseException) -> None:
        """End every item not taken. The flag is cleared first: an item put meanwhile either is taken here or,
        finding it clear, schedules a drain, which the closing runtime refuses, and ends its own."""
        self._scheduled = False
        for item in taken(self._items):
            self._fail_item(item, exc)


def _fail_posted(posted: tuple[Coroutine[Any, Any, Any], concurrent.futures.Future[Any]],
                 exc: BaseException) -> None:
    coro, fut = posted
    coro.close()
    if fut.set_running_or_notify_cancel():
        fut.set_exception(exc)


def _settle(fut: concurrent.futures.Future[Any], task: asyncio.Task[Any]) -> None:
    """Copy the outcome of ``task`` (on the loop) into ``fut`` (for the user thread)."""
    if task.cancelled():
        fut.cancel()
        return
    if not fut.set_running_or_notify_cancel():
        return
    exc = task.exception()
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(task.result())


def taken(queue: collections.deque[Q]) -> Iterator[Q]:
    """Every item of ``queue``, popped in turn, while another thread may be emptying it too (a shutdown's thread
    and the loop's): each item is taken once, and the end is wherever the queue runs out."""
    while True:
        try:
            yield queue.popleft()
        except IndexError:
            return
