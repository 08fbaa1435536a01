"""Durability lost: the store fails closed after a failed fsync (PostgreSQL's answer to "fsyncgate").

On Linux a failed ``fsync``/``fdatasync`` (EIO: a writeback error) is reported once, and the kernel may mark the
pages that failed clean: a later fsync of the same file succeeds although those bytes never reached the disk. A
retried fsync therefore proves nothing. The first failed fsync of the commit log or of a file derived from it (a
consume queue, an index file, their directories) loses the store's durability until a restart: the commit log's
flushed offset no longer advances (sync-flush waiters are answered not durable), no checkpoint is written (its
recovery point stays where every fsync before it succeeded), puts are refused; reads go on. The state is not
persisted: a restart's recovery rebuilds from that last good checkpoint.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
from collections.abc import Callable, Iterator

log = logging.getLogger("txmq.store")

# Errors of the ``open`` that precedes a sync (a pooled file's descriptor, a directory's), never of the sync itself:
# fsync, fdatasync, syncfs and msync do not return them. No writeback ran, so none failed: the next try covers the
# same bytes, and a process at its open-file limit for a moment does not stop its store until a restart.
NO_DESCRIPTOR = frozenset({errno.EMFILE, errno.ENFILE})


class DurabilityLostError(OSError):
    """A flush, checkpoint or append asked for once durability is lost. An ``OSError`` (EIO), as the disk's other
    errors are, so that every path that answers a failed fsync answers this one the same way (a slave's HA client:
    "writing the master's bytes failed", not "not valid records")."""


class Durability:
    """The store's latch: set by the first failed fsync, never cleared (a restart's recovery decides what holds)."""

    def __init__(self) -> None:
        self.reason = ""  # the file whose fsync failed and the error; "" while every fsync succeeded
        self._lock = threading.Lock()  # the flush and checkpoint threads may fail at once: one ERROR line
        # Called once, on the thread whose fsync failed, when durability is lost: the broker stops taking writes
        # and tells its name servers, so that producers route elsewhere instead of being refused here.
        self.listeners: list[Callable[[], None]] = []

    @property
    def lost(self) -> bool:
        return bool(self.reason)

    def lose(self, path: str, exc: OSError) -> None:
        """The fsync of ``path`` failed with ``exc``: from now on nothing is flushed, checkpointed or put."""
        if isinstance(exc, DurabilityLostError):
            return
        with self._lock:
            if self.reason:
                return
            code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            self.reason = f"fsync of {path} failed: {code} {exc.strerror or exc}"
        log.error("durability lost: %s; the flushed offset and the checkpoint stay where they are and puts are "
                  "refused: restart the broker (recovery rebuilds from the last good checkpoint)", self.reason)
        for listener in self.listeners:
            listener()

    @contextlib.contextmanager
    def fsyncing(self, path: str) -> Iterator[None]:
        """Around an fsync of ``path``: its failure loses durability, and is raised (no descriptor to make it with is
        raised only)."""
        try:
            yield
        except OSError as exc:
            if exc.errno not in NO_DESCRIPTOR:
                self.lose(path, exc)
            raise

    def check(self) -> None:
        """Raise ``DurabilityLostError`` once durability is lost: nothing may trust a retried fsync."""
        if self.reason:
            raise DurabilityLostError(errno.EIO, f"{self.why}: the broker must be restarted")

    @property
    def why(self) -> str:
        return f"the store's disk failed an fsync ({self.reason})"

    @property
    def remark(self) -> str:
        """Why a put is refused (SERVICE_NOT_AVAILABLE's remark, as a full disk's)."""
        return f"{self.why}: the broker must be restarted; nothing was stored"
