"""The client's engine room: an asyncio loop on a background thread, and a sync API in front of it.

Users call plain methods from any thread; each call submits a coroutine to the loop and waits for it with a
timeout. Listener code (local transactions, checks, message consumption) never runs on the loop: it runs on
thread pools, so a slow listener cannot stall network IO.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from txmq.errors import ClientError
from txmq.remoting.transport import new_event_loop

T = TypeVar("T")


class ClientRuntime:
    def __init__(self, name: str) -> None:
        self.loop = new_event_loop()
        self._thread = threading.Thread(target=self._run, name=f"txmq-{name}", daemon=True)
        self._started = threading.Event()
        # post(): coroutines handed over from user threads, started by one loop callback per batch.
        self._posted: collections.deque[tuple[Coroutine[Any, Any, Any], concurrent.futures.Future[Any]]] = \
            collections.deque()
        self._drain_scheduled = False
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (from any thread but the loop's)."""
        if self.on_loop_thread():
            coro.close()
            raise ClientError("a blocking client call was made from the client's own event loop thread")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise ClientError(f"client call timed out after {timeout}s") from None

    def on_loop_thread(self) -> bool:
        """Whether the caller runs on the loop's own thread, where waiting for the loop would stall it for good."""
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def post(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Like ``submit`` for many small calls in a row: the coroutines posted before the loop gets to them
        start in one loop callback (one wake-up of the loop per batch, not per call). Cancelling the returned
        future before its coroutine started means it never runs; after that, cancellation reaches the task.
        """
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._posted.append((coro, fut))
        if not self._drain_scheduled:
            # No lock needed: _drain clears the flag before it takes items, so an item appended while the
            # flag still reads True is taken by the drain that is about to run.
            self._drain_scheduled = True
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is closed
                self._drain_scheduled = False
                self._fail_posted(ClientError("client is shut down"))
        return fut

    def _drain(self) -> None:
        self._drain_scheduled = False
        posted = self._posted
        create_task = self.loop.create_task
        while posted:
            coro, fut = posted.popleft()
            if fut.cancelled():
                coro.close()
                continue
            task = create_task(coro)
            task.add_done_callback(functools.partial(_settle, fut))
            fut.add_done_callback(functools.partial(self._propagate_cancel, task))

    def _propagate_cancel(self, task: asyncio.Task[Any], fut: concurrent.futures.Future[Any]) -> None:
        if fut.cancelled() and not task.done():
            self.loop.call_soon_threadsafe(task.cancel)

    def _fail_posted(self, exc: BaseException) -> None:
        while self._posted:
            coro, fut = self._posted.popleft()
            coro.close()
            if fut.set_running_or_notify_cancel():
                fut.set_exception(exc)

    def close(self) -> None:
        if not self.loop.is_running():
            return

        async def _drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(_drain(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
        self._fail_posted(ClientError("client is shut down"))


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
