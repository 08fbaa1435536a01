"""FlushCommitLogService: the thread that makes the commit log durable.

ASYNC_FLUSH (RocketMQ FlushRealTimeService): fsync whatever was written every ``interval``; appends are
acknowledged at once. SYNC_FLUSH (RocketMQ GroupCommitService): an append waits for a future that resolves
once an fsync covers its last byte. The thread takes everything written so far, fsyncs once, and resolves
every waiter up to that offset, so appends that arrive during an fsync share the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque

from txmq.store.commit_log import CommitLog

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
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()  # touched on the loop thread only

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="txmq-flush-commitlog", daemon=True)
        self._thread.start()

    def wait_flushed(self, offset: int) -> asyncio.Future[None]:
        """A future that resolves once the commit log is durable up to ``offset`` (loop thread)."""
        assert self._loop is not None, "start() first"
        fut: asyncio.Future[None] = self._loop.create_future()
        if self.commit_log.flushed_offset >= offset:
            fut.set_result(None)
        else:
            self._waiters.append((offset, fut))
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
        except OSError:
            self.errors += 1
            log.exception("commit-log flush failed; waiters will time out")
            return
        if self.group_commit and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting any more
                self._loop.call_soon_threadsafe(self._resolve, flushed)

    def _resolve(self, flushed: int) -> None:
        while self._waiters and self._waiters[0][0] <= flushed:
            _, fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)

    def stop(self) -> None:
        """Stop the thread after one last flush (blocks until it is done)."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._resolve(self.commit_log.flushed_offset)
