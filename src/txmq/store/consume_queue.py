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

A queue keeps its newest entries in memory (its tail, a bytearray of packed entries) and writes them to its file in
one system call: when the tail reaches a page (``TAIL_WRITE_BYTES``), when a checkpoint flushes the queue, and when
the store's tails together pass ``consumeQueueWriteBehindBytes`` (the oldest tails first). With sends spread over
thousands of queues, writing each entry at once cost a system call per send, and with more queue files than open
descriptors allowed (``FdPool``), a close and an open as well. Every read looks at the tail first, so buffered
entries read exactly as written ones; a buffered entry is an unflushed entry (below), so a crash that loses it loses
nothing recovery does not rebuild, until a periodic thorough checkpoint puts it in its tails journal
(``tail_journal.py``), which recovery writes back.

A queue remembers what was written since its last fsync (RocketMQ's FlushConsumeQueueService flushes a queue only
once ``flushConsumeQueueLeastPages`` are dirty): with sends spread over thousands of queues each gets a few entries
between checkpoints, and fsyncing every one of them cost more than the sends. The checkpoint leaves such a queue
unflushed and keeps its recovery point at or before the queue's oldest unflushed entry, so recovery rebuilds those
entries from the commit log.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import os
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from txmq.errors import StoreError
from txmq.store.mapped_file import MappedFile, MappedFileQueue

if TYPE_CHECKING:
    from txmq.store.consume_queue_store import ConsumeQueueStore


def valid_topic_directory(topic: str) -> bool:
    """The topic names a directory of consume queues: one plain path component, never '.' or '..'. Every put asks;
    not cached: the four tests cost less than a cache lookup, and a bounded cache missed on every put once the
    topics outnumbered it (sends spread over 10,000 topics)."""
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
_pack_entry = CQ_ENTRY.pack  # bound once: a put packs every entry
TAIL_WRITE_BYTES = 4096  # a tail this long is written at once: one page per system call


class ConsumeQueue:
    """The logical queue (topic, queue_id). Only the loop thread writes; the checkpoint thread fsyncs.

    Kept small (``__slots__``, no stored path, segments opened or created at first use): a broker holds one per
    queue, 80,000 at 10,000 topics."""

    __slots__ = ("_files", "flush_due", "max_offset", "min_offset", "queue_id", "store", "tail", "tail_from", "topic",
                 "unflushed_from", "unflushed_phy")

    def __init__(self, store: ConsumeQueueStore, topic: str, queue_id: int) -> None:
        topic_directory(store.root, topic)  # refuses a name that is no directory's
        self.store = store  # what the store's queues share: root, segment size, descriptors, tails
        self.topic = topic
        self.queue_id = queue_id
        self._files: MappedFileQueue | None = None
        self.max_offset = 0  # next logical offset: count of entries, deleted head included
        self.min_offset = 0
        # Written since the last fsync: the first logical offset and the oldest commit-log offset among those
        # entries (None: nothing); ``flush_due``: a truncation or deletion the next checkpoint makes durable
        # whatever its size. The store's ``pending``: the queues with either, so a checkpoint looks at those only.
        self.unflushed_from: int | None = None
        self.unflushed_phy = 0
        self.flush_due = False
        # Entries from logical ``tail_from`` to ``max_offset``, not written to the file yet (None: none).
        self.tail: bytearray | None = None
        self.tail_from = 0

    @property
    def directory(self) -> str:
        return os.path.join(topic_directory(self.store.root, self.topic), str(self.queue_id))

    @property
    def files(self) -> MappedFileQueue:
        """The queue's segments; the directory is made at first use (a new queue's first write)."""
        if self._files is None:
            self._files = self._segments(listed=False)
        return self._files

    def _segments(self, *, listed: bool) -> MappedFileQueue:
        store = self.store
        return MappedFileQueue(self.directory, store.file_size, store.fds, store.segments_lock, listed=listed)

    @property
    def opened_files(self) -> MappedFileQueue | None:
        """The segments if anything opened or made them yet, without making the directory."""
        return self._files

    # --- load and recovery -------------------------------------------------------------------------

    def load(self) -> list[str]:
        """Open the files (of a directory found by listing) and find the last entry; return problems that make the
        queue untrustworthy."""
        if self._files is None:
            self._files = self._segments(listed=True)
        files = self._files
        problems = files.load(strict=False)
        starts = [mf.file_from_offset for mf in files.files]
        if any(b - a != self.store.file_size for a, b in itertools.pairwise(starts)):
            problems.append(f"{self.directory}: a segment is missing")
        # The last entry is in the last file that holds any: a put creates the file its entries roll into, so a
        # crash can leave that one empty while the entries before it were buffered (and are rebuilt from the log).
        for mf in reversed(files.files):
            end = mf.last_nonzero()
            if end >= 0 or mf is files.files[0]:
                self.max_offset = mf.file_from_offset // CQ_ENTRY_SIZE + (end // CQ_ENTRY_SIZE + 1 if end >= 0 else 0)
                break
        return problems

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        """(commit-log offset, size, tag hash) at logical ``offset``; None for an empty slot or no file."""
        raw = self.read_entries(offset, 1)
        if len(raw) < CQ_ENTRY_SIZE:
            return None
        phy, size, tag = CQ_ENTRY.unpack_from(raw)
        return None if size <= 0 else (phy, size, tag)

    def read_entries(self, offset: int, count: int) -> bytes:
        """Raw entries from logical ``offset``: at most ``count``, never past the end of one file nor across the
        start of the tail (callers read on from where a read stopped)."""
        count = min(count, self.max_offset - offset)
        if count <= 0 or offset < 0:
            return b""
        tail = self.tail
        if tail is not None:
            if offset >= self.tail_from:
                at = (offset - self.tail_from) * CQ_ENTRY_SIZE
                return bytes(tail[at : at + count * CQ_ENTRY_SIZE])
            count = min(count, self.tail_from - offset)
        files = self._files
        pos = offset * CQ_ENTRY_SIZE
        mf = files.find(pos) if files is not None else None
        if mf is None:
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

    def first_offset_from_phy(self, phy_offset: int) -> int:
        """Smallest logical offset held (in a file or the tail) whose entry points at or past commit-log
        ``phy_offset``; max offset if none (entries point forward in the log as their offsets grow, so a binary
        search finds it)."""
        first = self._files.first if self._files is not None else None
        if first is not None:
            lo = first.file_from_offset // CQ_ENTRY_SIZE
        elif self.tail is not None:
            lo = self.tail_from
        else:
            return self.max_offset
        return self.first_offset_where(lo, self.max_offset, lambda phy, _: phy >= phy_offset)

    def correct_min_offset(self, min_phy_offset: int) -> None:
        """The first entry whose record is still in the log (RocketMQ correctMinOffset)."""
        self.min_offset = self.first_offset_from_phy(min_phy_offset)

    def truncate_dirty(self, phy_offset: int, counted: int | None = None) -> int:
        """Drop entries pointing at or past commit-log ``phy_offset``; return how many were dropped. ``counted``
        (recovery: the checkpoint's count of the queue, every entry past which points at or past the recovery
        point): no entry past it is kept either, whatever it reads as. A power loss can leave those torn across two
        pages or zeroed in between, and the binary search by commit-log offset, which assumes entries rise, then
        found its cut past an entry that is now garbage (an old message served at its place) or an empty slot."""
        cut = self.first_offset_from_phy(phy_offset)
        if counted is not None:
            cut = min(cut, max(counted, self.min_offset))
        dropped = self.max_offset - cut
        if dropped > 0:
            self.truncate_logical(cut)
        return dropped

    def truncate_logical(self, offset: int) -> None:
        """Drop the entries from logical ``offset`` on, buffered or written."""
        self.mark_unflushed(None, 0, True)
        if self.unflushed_from is not None and self.unflushed_from >= offset:
            # Every unflushed entry goes, and with it the commit-log offset of the oldest: where a put taken back
            # was, records of other sizes follow, and a recovery point held there would start recovery's scan inside
            # one (it found no record, and cut the log there). The cut itself is due: the next checkpoint fsyncs it.
            self.unflushed_from, self.unflushed_phy = None, 0
            self.store.cut_unflushed(self)
        self.store.count_at_most(self, offset)
        tail = self.tail
        if tail is not None and offset < self.tail_from + len(tail) // CQ_ENTRY_SIZE:
            if offset <= self.tail_from:
                self._drop_tail()
            else:
                keep = (offset - self.tail_from) * CQ_ENTRY_SIZE
                self.store.tail_bytes -= len(tail) - keep
                del tail[keep:]
        if self._files is not None:
            self._files.truncate_from(offset * CQ_ENTRY_SIZE)
        self.max_offset = offset
        self.min_offset = min(self.min_offset, offset)

    def last_entry_problem(self, log_end: int, max_size: int) -> str | None:
        """Check the newest entry against the log (cheap sanity check run at every open). None for one below the
        queue's first file: retention deleted its file (its record left the log), and the file after it, left
        empty (a put taken back had made it), is the queue's last."""
        if self.max_offset == 0 or self.max_offset <= self.min_offset:
            return None
        files = self._files
        first = files.files[0] if files is not None and files.files else None
        if first is not None and (self.max_offset - 1) * CQ_ENTRY_SIZE < first.file_from_offset:
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
        """Put the entry for logical ``offset`` (normally ``max_offset``; anywhere when rebuilding)."""
        self.put_run(offset, [(phy, size, tags_code)])

    def put_run(self, first: int, entries: list[tuple[int, int, int]]) -> None:
        """Put (commit-log offset, size, tag hash) entries for logical offsets ``first``, ``first + 1``, …: at the
        end of the queue into its tail (the files they fall in created now), written once it reaches a page;
        elsewhere (a rebuild putting entries back in place) written at once, after the tail."""
        # Older than the unflushed ones: rebuilt entries back in place, or entries put again where the queue was cut
        # back (a put taken back, a slave's truncation), which may lie lower in the log than those cut were.
        phy = entries[0][0]
        if self.unflushed_from is None or first < self.unflushed_from or phy < self.unflushed_phy:
            self.mark_unflushed(first, phy, False)
        store = self.store
        tail = self.tail
        if first != self.max_offset:
            self.write_tail()
            self._write(first, b"".join([_pack_entry(*entry) for entry in entries]))
            self.max_offset = max(self.max_offset, first + len(entries))
            return
        if tail is None:
            tail = self.tail = bytearray()
            self.tail_from = first
            store.tails[self] = None
        for entry in entries:
            tail += _pack_entry(*entry)
        self.max_offset = first + len(entries)
        store.tail_bytes += len(entries) * CQ_ENTRY_SIZE
        end = self.max_offset * CQ_ENTRY_SIZE
        # The files after the entries are the queue's: a failure to make them (a full disk) leaves the entries
        # buffered (a slave's must stay; a put's are taken back by its caller), and the tail's write makes them.
        # (Read without properties: this runs for every run a group puts.)
        files = self._files
        if files is None or not files.files or files.files[-1].file_from_offset + store.file_size < end:
            self._make_files(first * CQ_ENTRY_SIZE, end)
        if len(tail) >= TAIL_WRITE_BYTES:
            self.write_tail()
        elif store.tail_bytes > store.tail_limit:
            store.write_oldest_tails()

    def restore(self, first: int, entries: bytes) -> None:
        """Write packed entries from a tails journal back at logical ``first`` (recovery). They are in no fsynced
        file, and the next thorough checkpoint's journal will not hold them: the queue is due, so the next
        checkpoint fsyncs them. Not those below the queue's first file: retention deleted their file since (their
        records left the log), and a file made again below the first would not be found in its place. Nor a run
        that would leave a gap after what the files hold: the entries in between were not durable, so the
        checkpoint's recovery point is before them (or its count above them: the queue is rebuilt), and the scan
        from there puts them, and these, back in order."""
        files = self.files.files
        low = files[0].file_from_offset // CQ_ENTRY_SIZE if files else first
        if first < low:
            entries, first = entries[(low - first) * CQ_ENTRY_SIZE :], low
        if not entries or first > self.max_offset:
            return
        self._write(first, entries)
        self.max_offset = max(self.max_offset, first + len(entries) // CQ_ENTRY_SIZE)
        self.mark_unflushed(None, 0, True)

    def _make_files(self, pos: int, end: int) -> None:
        """Create the files that entries from byte ``pos`` to ``end`` fall in: a new queue's first put, or one
        that rolls into the next file, pays for them (as when entries were written at once), not a checkpoint that
        would create thousands in one go."""
        while pos < end:
            pos = self._file_at(pos).end_offset

    def _file_at(self, pos: int) -> MappedFile:
        """The file byte ``pos`` of the queue falls in, created when missing, with the files between the last one
        and it (a rebuild putting entries back past records it skipped): a queue's files have no gap, which the
        next open would take for a lost file, and a consumer reads an empty slot past, not a missing file."""
        files = self.files
        mf = files.find(pos)
        if mf is not None:
            return mf
        size = self.store.file_size
        start = pos - pos % size
        last = files.last
        if last is not None:
            for between in range(last.end_offset, start, size):
                files.create(between)
        return files.create(start)

    def write_tail(self) -> None:
        """Write the buffered entries to the file (one system call per file they fall in). A failed write (a full
        disk) keeps them buffered and raises. Entries of the tail counted flushed (before its unflushed ones, or
        all of them) are in the tails journal (``tail_journal``), which a later checkpoint replaces by one without
        them: the queue is due, so that the next checkpoint fsyncs them in its file (the one that first names a
        newer journal, or an earlier one)."""
        tail = self.tail
        if tail is not None:
            journaled = self.unflushed_from is None or self.tail_from < self.unflushed_from
            self._write(self.tail_from, tail)
            self._drop_tail()
            if journaled:
                self.mark_unflushed(None, 0, True)

    def _drop_tail(self) -> None:
        tail = self.tail
        if tail is not None:
            self.tail = None
            self.store.tail_bytes -= len(tail)
            del self.store.tails[self]

    def _write(self, first: int, data: bytes | bytearray) -> None:
        """Write packed entries for logical offsets from ``first``, creating the files they fall in."""
        pos = first * CQ_ENTRY_SIZE
        done = 0
        while done < len(data):
            mf = self._file_at(pos)
            n = min(len(data) - done, mf.end_offset - pos)
            mf.write([data if n == len(data) else data[done : done + n]], pos - mf.file_from_offset)
            done += n
            pos += n
        self._count_written(pos // CQ_ENTRY_SIZE)

    def _count_written(self, end: int) -> None:
        """Entries up to logical ``end`` are written to the files: past ``flushConsumeQueueLeastPages`` of them
        since the last fsync, the queue is due (the next periodic checkpoint flushes it). Counted as RocketMQ counts
        dirty pages, over what was written, and here, so that no checkpoint needs to look at every queue."""
        start = self.unflushed_from
        store = self.store
        if start is not None and (end - start) * CQ_ENTRY_SIZE >= store.flush_least_bytes:
            store.due[self] = None

    # --- lookups -----------------------------------------------------------------------------------

    def offset_by_time(self, timestamp_ms: int, store_time: Callable[[int], int], steps_back: list[int]) -> int:
        """First logical offset whose record was stored at or after ``timestamp_ms`` (max offset if none), none
        before it stored so late. Store times rise but where the wall clock stepped back (``steps_back``: the
        commit-log offsets where it did, ascending), so each stretch between steps is searched apart, in order, and
        the first holding such a record answers: one search over the whole queue could land past records stored
        before a step with later times (a reset by time, or a Spark filter on store time, would miss them)."""
        lo, top = self.min_offset, self.max_offset
        first, last = self.entry(lo), self.entry(top - 1)
        steps = []
        if first is not None and last is not None:  # only the steps inside the queue's records, searched in order
            steps = steps_back[bisect.bisect_right(steps_back, first[0]) : bisect.bisect_right(steps_back, last[0])]
        for hi in itertools.chain((self.first_offset_from_phy(phy) for phy in steps), (top,)):  # (lazily)
            if hi > lo:
                found = self.first_offset_where(lo, hi, lambda phy, _: store_time(phy) >= timestamp_ms)
                if found < hi:
                    return found
                lo = hi
        return top

    # --- retention ---------------------------------------------------------------------------------

    def delete_expired_files(self, min_phy_offset: int) -> int:
        """Delete files (never the last) whose entries all point below ``min_phy_offset``, judged by what they hold
        with the tail written (retention runs seldom)."""
        files = self._files
        if files is None:
            self.correct_min_offset(min_phy_offset)
            return 0
        self.write_tail()
        doomed: list[MappedFile] = []
        for mf in files.files[:-1]:
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
        files.delete_files(doomed)
        self.correct_min_offset(min_phy_offset)
        return len(doomed)

    # --- flush (RocketMQ FlushConsumeQueueService) ---------------------------------------------------

    def take_flush(self) -> tuple[list[MappedFile], tuple[int | None, int, bool]]:
        """For a checkpoint (loop thread): the tail written, the files to fsync, and this queue's unflushed state,
        which ``mark_unflushed`` puts back if the fsync fails. The queue counts as flushed from here on. A failed
        write of the tail raises and takes nothing: the queue stays unflushed."""
        self.write_tail()
        taken = self.take_unflushed()
        self.store.flushed(self)
        return taken

    def take_unflushed(self) -> tuple[list[MappedFile], tuple[int | None, int, bool]]:
        """``take_flush`` but the tail's write and the store's count (a checkpoint that puts the tails in its
        journal takes every pending queue, and the store forgets them all at once: ``forget_all``)."""
        state = (self.unflushed_from, self.unflushed_phy, self.flush_due)
        files = [mf for mf in self._files.files if mf.dirty] if self._files is not None else []
        for mf in files:
            mf.dirty = False
        self.unflushed_from, self.unflushed_phy, self.flush_due = None, 0, False
        return files, state

    def mark_unflushed(self, first: int | None, phy: int, due: bool) -> None:
        """Entries from logical ``first`` (oldest commit-log offset ``phy``) are not durable yet; ``due``: the next
        checkpoint fsyncs this queue whatever was written."""
        store = self.store
        if first is not None:
            if self.unflushed_from is None:
                self.unflushed_from, self.unflushed_phy = first, phy
                store.became_unflushed(self, first, phy)
            elif first < self.unflushed_from or phy < self.unflushed_phy:  # older entries back: out of order
                self.unflushed_from = min(self.unflushed_from, first)
                self.unflushed_phy = min(self.unflushed_phy, phy)
                store.unordered.add(self)
                store.count_at_most(self, self.unflushed_from)
            # (written entries put back by a failed checkpoint may be enough to flush)
            self._count_written(self.tail_from if self.tail is not None else self.max_offset)
        if due:
            self.flush_due = True
            store.due[self] = None
        store.pending.add(self)

    def destroy(self) -> None:
        self._drop_tail()
        directory = self.directory
        if self._files is not None:
            self._files.delete_files(list(self._files.files))
        for path in (directory, os.path.dirname(directory)):
            with contextlib.suppress(OSError):
                os.rmdir(path)

    def close(self, *, write: bool = True) -> None:
        """Write the tail and close the files; not ``write`` (a crash's close): the tail is lost, as a crash loses
        it. A write that fails (a full disk) loses it too: only after a final checkpoint that failed, so the next
        open recovers from an earlier recovery point, before it."""
        if write:
            with contextlib.suppress(OSError):
                self.write_tail()
        self._drop_tail()
        if self._files is not None:
            self._files.close()
