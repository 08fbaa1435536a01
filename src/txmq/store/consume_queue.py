"""ConsumeQueue: per topic and queue, the logical offsets of its messages, as RocketMQ lays them out.

Directory ``consumequeue/<topic>/<queue id>/``, fixed-size segment files named by the byte position of
their first entry (logical offset * 20), holding 20-byte entries:

    offset  size  field
    0       8     commit-log offset of the record
    8       4     size of the stored record (trailer included)
    12      8     tag hash (java String.hashCode of TAGS, 0 when none)

An all-zero entry is an empty slot. Entries are derived from the commit log: recovery truncates the ones
written after the checkpoint and rebuilds them, and a queue whose files are missing or inconsistent is
rebuilt from the log (each record carries its QUEUEOFFSET, so an entry goes back to its exact place).

A queue remembers what was written since its last fsync (RocketMQ's FlushConsumeQueueService flushes a queue only
once ``flushConsumeQueueLeastPages`` are dirty): with sends spread over thousands of queues each gets a few entries
between checkpoints, and fsyncing every one of them cost more than the sends. The checkpoint leaves such a queue
unflushed and keeps its recovery point at or before the queue's oldest unflushed entry, so recovery rebuilds those
entries from the commit log.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import struct
from collections.abc import Callable

from txmq.errors import StoreError
from txmq.store.mapped_file import FdPool, MappedFile, MappedFileQueue


@functools.lru_cache(maxsize=4096)
def valid_topic_directory(topic: str) -> bool:
    """The topic names a directory of consume queues: one plain path component, never '.' or '..'."""
    return bool(topic) and topic not in (".", "..") and "/" not in topic and "\0" not in topic


def topic_directory(root_dir: str, topic: str) -> str:
    """``consumequeue/<topic>`` under ``root_dir``. Raises ``StoreError`` for a name that would leave it: the
    broker checks names where they enter, and the store never builds a path from one it did not check."""
    if not valid_topic_directory(topic):
        raise StoreError(f"topic {topic[:80]!r} cannot name a consume-queue directory")
    return os.path.join(root_dir, "consumequeue", topic)


CQ_ENTRY = struct.Struct(">qiq")
CQ_ENTRY_SIZE = CQ_ENTRY.size
assert CQ_ENTRY_SIZE == 20


class ConsumeQueue:
    """The logical queue (topic, queue_id). Only the loop thread writes; the checkpoint thread fsyncs."""

    def __init__(self, root_dir: str, topic: str, queue_id: int, file_size: int, fds: FdPool | None = None,
                 pending: set[ConsumeQueue] | None = None) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = os.path.join(topic_directory(root_dir, topic), str(queue_id))
        self.files = MappedFileQueue(self.directory, file_size, fds)
        self.file_size = file_size
        self.max_offset = 0  # next logical offset: count of entries, deleted head included
        self.min_offset = 0
        # Written since the last fsync: the first logical offset and the oldest commit-log offset among those
        # entries (None: nothing); ``flush_due``: a truncation or deletion the next checkpoint makes durable
        # whatever its size. ``pending``: the store's set of queues with either, so a checkpoint looks at those only.
        self.unflushed_from: int | None = None
        self.unflushed_phy = 0
        self.flush_due = False
        self._pending: set[ConsumeQueue] = pending if pending is not None else set()

    # --- load and recovery -------------------------------------------------------------------------

    def load(self) -> list[str]:
        """Open the files and find the last entry; return problems that make the queue untrustworthy."""
        problems = self.files.load(strict=False)
        starts = [mf.file_from_offset for mf in self.files.files]
        if any(b - a != self.file_size for a, b in itertools.pairwise(starts)):
            problems.append(f"{self.directory}: a segment is missing")
        last = self.files.last
        if last is not None:
            end = last.last_nonzero()
            entries = (end // CQ_ENTRY_SIZE + 1) if end >= 0 else 0
            self.max_offset = (last.file_from_offset // CQ_ENTRY_SIZE) + entries
        return problems

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        """(commit-log offset, size, tag hash) at logical ``offset``; None for an empty slot or no file."""
        raw = self.read_entries(offset, 1)
        if len(raw) < CQ_ENTRY_SIZE:
            return None
        phy, size, tag = CQ_ENTRY.unpack_from(raw)
        return None if size <= 0 else (phy, size, tag)

    def read_entries(self, offset: int, count: int) -> bytes:
        """Raw entries from logical ``offset``: at most ``count``, never past the end of one file."""
        count = min(count, self.max_offset - offset)
        pos = offset * CQ_ENTRY_SIZE
        mf = self.files.find(pos)
        if mf is None or count <= 0:
            return b""
        return mf.read(pos - mf.file_from_offset, count * CQ_ENTRY_SIZE)

    def first_offset_where(self, lo: int, hi: int, pred: Callable[[int, int], bool]) -> int:
        """Smallest offset in [lo, hi) whose entry satisfies ``pred(phy, size)`` (monotone), else hi."""
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and pred(e[0], e[1]):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _first_offset_from_phy(self, phy_offset: int) -> int:
        """Smallest logical offset on disk whose entry points at or past commit-log ``phy_offset``; max offset
        if none (entries point forward in the log as their offsets grow, so a binary search finds it)."""
        first = self.files.first
        if first is None:
            return self.max_offset
        lo = first.file_from_offset // CQ_ENTRY_SIZE
        return self.first_offset_where(lo, self.max_offset, lambda phy, _: phy >= phy_offset)

    def correct_min_offset(self, min_phy_offset: int) -> None:
        """The first entry whose record is still in the log (RocketMQ correctMinOffset)."""
        self.min_offset = self._first_offset_from_phy(min_phy_offset)

    def truncate_dirty(self, phy_offset: int) -> int:
        """Drop entries pointing at or past commit-log ``phy_offset``; return how many were dropped."""
        cut = self._first_offset_from_phy(phy_offset)
        dropped = self.max_offset - cut
        if dropped > 0:
            self.truncate_logical(cut)
        return dropped

    def truncate_logical(self, offset: int) -> None:
        self.mark_unflushed(None, 0, True)
        self.files.truncate_from(offset * CQ_ENTRY_SIZE)
        self.max_offset = offset
        self.min_offset = min(self.min_offset, offset)

    def last_entry_problem(self, log_end: int, max_size: int) -> str | None:
        """Check the newest entry against the log (cheap sanity check run at every open)."""
        if self.max_offset == 0 or self.max_offset <= self.min_offset:
            return None
        e = self.entry(self.max_offset - 1)
        if e is None:
            return f"{self.directory}: last entry {self.max_offset - 1} is empty"
        phy, size, _ = e
        if size > max_size or phy < 0 or phy + size > log_end:
            return f"{self.directory}: entry {self.max_offset - 1} points at [{phy}, +{size}) past the log end"
        return None

    # --- write -------------------------------------------------------------------------------------

    def put(self, offset: int, phy: int, size: int, tags_code: int) -> None:
        """Write the entry for logical ``offset`` (normally ``max_offset``; anywhere when rebuilding)."""
        self.put_run(offset, [(phy, size, tags_code)])

    def put_run(self, first: int, entries: list[tuple[int, int, int]]) -> None:
        """Write (commit-log offset, size, tag hash) entries for logical offsets ``first``, ``first + 1``, …
        with one system call per file they touch (a batch put writes its entries together)."""
        if self.unflushed_from is None or first < self.unflushed_from:  # (lower: rebuilt entries, back in place)
            self.mark_unflushed(first, entries[0][0], False)
        done = 0
        while done < len(entries):
            pos = (first + done) * CQ_ENTRY_SIZE
            mf = self.files.find(pos)
            if mf is None:
                mf = self.files.create(pos - pos % self.file_size)
            run = entries[done : done + (mf.end_offset - pos) // CQ_ENTRY_SIZE]
            mf.write([CQ_ENTRY.pack(*entry) for entry in run], pos - mf.file_from_offset)
            done += len(run)
        if first + len(entries) > self.max_offset:
            self.max_offset = first + len(entries)

    # --- lookups -----------------------------------------------------------------------------------

    def offset_by_time(self, timestamp_ms: int, store_time: Callable[[int], int]) -> int:
        """First logical offset whose record was stored at or after ``timestamp_ms`` (max offset if none)."""
        return self.first_offset_where(self.min_offset, self.max_offset, lambda phy, _: store_time(phy) >= timestamp_ms)

    # --- retention ---------------------------------------------------------------------------------

    def delete_expired_files(self, min_phy_offset: int) -> int:
        """Delete files (never the last) whose entries all point below ``min_phy_offset``."""
        doomed: list[MappedFile] = []
        for mf in self.files.files[:-1]:
            last = mf.last_nonzero()
            if last < 0:
                doomed.append(mf)
                continue
            pos = (last // CQ_ENTRY_SIZE) * CQ_ENTRY_SIZE
            phy, _, _ = CQ_ENTRY.unpack(mf.read(pos, CQ_ENTRY_SIZE))
            if phy >= min_phy_offset:
                break
            doomed.append(mf)
        if doomed:
            self.mark_unflushed(None, 0, True)
        self.files.delete_files(doomed)
        self.correct_min_offset(min_phy_offset)
        return len(doomed)

    # --- flush (RocketMQ FlushConsumeQueueService) ---------------------------------------------------

    def flush_wanted(self, least_bytes: int) -> bool:
        """At least ``least_bytes`` of entries were written since the last fsync, or a change must be made durable."""
        start = self.unflushed_from
        return self.flush_due or start is None or (self.max_offset - start) * CQ_ENTRY_SIZE >= least_bytes

    def take_flush(self) -> tuple[list[MappedFile], tuple[int | None, int, bool]]:
        """For a checkpoint (loop thread): the files to fsync, and this queue's unflushed state, which
        ``mark_unflushed`` puts back if the fsync fails. The queue counts as flushed from here on."""
        state = (self.unflushed_from, self.unflushed_phy, self.flush_due)
        files = [mf for mf in self.files.files if mf.dirty]
        for mf in files:
            mf.dirty = False
        self.unflushed_from, self.unflushed_phy, self.flush_due = None, 0, False
        self._pending.discard(self)
        return files, state

    def mark_unflushed(self, first: int | None, phy: int, due: bool) -> None:
        """Entries from logical ``first`` (oldest commit-log offset ``phy``) are not durable yet; ``due``: the next
        checkpoint fsyncs this queue whatever was written."""
        if first is not None:
            if self.unflushed_from is None:
                self.unflushed_from, self.unflushed_phy = first, phy
            else:
                self.unflushed_from = min(self.unflushed_from, first)
                self.unflushed_phy = min(self.unflushed_phy, phy)
        self.flush_due = self.flush_due or due
        self._pending.add(self)

    def destroy(self) -> None:
        self._pending.discard(self)
        self.files.delete_files(list(self.files.files))
        for path in (self.directory, os.path.dirname(self.directory)):
            with contextlib.suppress(OSError):
                os.rmdir(path)

    def close(self) -> None:
        self.files.close()
