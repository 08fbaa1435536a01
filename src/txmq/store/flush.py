"""FlushCommitLogService: the thread that makes the commit log durable.

ASYNC_FLUSH (RocketMQ FlushRealTimeService): fsync whatever was written every ``interval``; appends are
acknowledged at once. SYNC_FLUSH (RocketMQ GroupCommitService): an append waits for a future that resolves
once an fsync covers its last byte. The thread takes everything written so far, fsyncs once, and resolves
every waiter up to that offset, so appends that arrive during an fsync share the next one.

A failed fsync loses the store's durability (``durability.py``): the flushed offset stays where it is, and every
waiter, now or later, is answered False at once (not durable) instead of at its timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque

from txmq.store.commit_log import CommitLog
from txmq.store.durability import DurabilityLostError

log = logging.getLogger("txmq.store")


class FlushCommitLogService:
    def __init__(self, commit_log: CommitLog, *, group_commit: bool, interval_ms: int) -> None:
        self.commit_log = commit_log
        self.group_commit = group_commit
        self.interval_s = interval_ms / 1000
        self.errors = 0
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # (offset, deadline, future) in offset and deadline order; touched on the loop thread only.
        self._waiters: deque[tuple[int, float, asyncio.Future[bool]]] = deque()
        self._timer: asyncio.TimerHandle | None = None  # one timer for the oldest waiter, not one per append

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="txmq-flush-commitlog", daemon=True)
        self._thread.start()

    def wait_flushed(self, offset: int, timeout_s: float) -> asyncio.Future[bool]:
        """A future that becomes True once the commit log is durable up to ``offset``, or False after
        ``timeout_s`` or once durability is lost (loop thread)."""
        loop = self._loop
        assert loop is not None, "start() first"
        fut: asyncio.Future[bool] = loop.create_future()
        flushed = self.commit_log.flushed_offset >= offset
        if flushed or self.commit_log.durability.lost:
            fut.set_result(flushed)
            return fut
        deadline = loop.time() + timeout_s
        self._waiters.append((offset, deadline, fut))
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._expire)
        self._wake.set()
        return fut

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            self._flush_once()
        self._flush_once()

    def _flush_once(self) -> None:
        try:
            flushed = self.commit_log.flush()
        except OSError as exc:
            if not isinstance(exc, DurabilityLostError):
                self.errors += 1
            if not self.commit_log.durability.lost:
                log.exception("commit-log flush failed; waiters will time out")
            elif self._loop is not None:  # nothing is flushed again: nobody waits for it
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._fail_all)
            return
        if self.group_commit and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting any more
                self._loop.call_soon_threadsafe(self._resolve, flushed)

    def _resolve(self, flushed: int) -> None:
        while self._waiters and self._waiters[0][0] <= flushed:
            fut = self._waiters.popleft()[2]
            if not fut.done():
                fut.set_result(True)

    def _fail_all(self) -> None:
        """Durability is lost: every waiter is answered not durable now."""
        while self._waiters:
            fut = self._waiters.popleft()[2]
            if not fut.done():
                fut.set_result(False)

    def _expire(self) -> None:
        assert self._loop is not None
        self._timer = None
        now = self._loop.time()
        while self._waiters and self._waiters[0][1] <= now:
            fut = self._waiters.popleft()[2]
            if not fut.done():
                fut.set_result(False)
        if self._waiters:
            self._timer = self._loop.call_at(self._waiters[0][1], self._expire)

    def stop_thread(self) -> None:
        """Stop the thread after one last flush; blocks until it is done (call it from a worker thread)."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def close(self) -> None:
        """After ``stop_thread``, on the loop thread: answer the waiters the last flush covered."""
        self._resolve(self.commit_log.flushed_offset)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
