"""The store's consume queues by topic and queue id (RocketMQ's ConsumeQueueStore; each queue's ``max_offset`` is
its next offset, RocketMQ's topicQueueTable)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
from collections.abc import Iterator

from txmq.store.consume_queue import ConsumeQueue
from txmq.store.mapped_file import FdPool

log = logging.getLogger("txmq.store")


TAILS_PER_TURN = 256  # tails written in one go (past the bound, or by a checkpoint) before the loop serves again


MAX_QUEUE_ID = (1 << 31) - 1  # a queue id is a Java int on the wire


def _directories(path: str) -> list[str]:
    """The names of the directories in ``path`` that UTF-8 can name, sorted (their types from the listing: no stat
    each). A stray one whose name is not UTF-8 (listed with surrogates) would go in every checkpoint document as a
    queue, which the document's encoder refuses: no checkpoint would be written again."""
    with os.scandir(path) as listing:
        return sorted(entry.name for entry in listing if entry.is_dir() and _utf8(entry.name))


def _utf8(name: str) -> bool:
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


def _queue_id(name: str) -> int | None:
    """The queue id a directory names: canonical ASCII digits (not '²', which isdigit but int refuses, nor '07',
    which would name the directory '7') of an int the wire can carry."""
    if name.isascii() and name.isdigit() and str(int(name)) == name and int(name) <= MAX_QUEUE_ID:
        return int(name)
    return None


class ConsumeQueueStore:
    """Finds, creates, loads and drops the queues under ``<root>/consumequeue``. A queue's next offset as the log has
    it (RocketMQ topicQueueTable) is its ``max_offset``: the group commit counts from it, recovery rebuilds it."""

    def __init__(self, root: str, file_size: int, files_lock: threading.Lock, max_open_files: int,
                 write_behind_bytes: int, flush_least_bytes: int = 0) -> None:
        self.root = root
        self.file_size = file_size
        self.fds = FdPool(max_open_files)  # the queues' files open at most (see FdPool)
        self.segments_lock = threading.Lock()  # every queue's MappedFileQueue.lock: one each would cost 88 bytes
        self._files_lock = files_lock  # held while derived files are fsynced or deleted
        self._queues: dict[str, dict[int, ConsumeQueue]] = {}  # by topic: a topic's queues listed or dropped
        # The same queues by (topic, queue id): a put looks its queue up once, here, for its next offset and its
        # entries (a table of next offsets beside it cost a second lookup in memory no recent put touched).
        self.by_key: dict[tuple[str, int], ConsumeQueue] = {}
        self.drops = 0  # queues dropped so far: the group commit keeps the queues its puts found while none was
        self.pending: set[ConsumeQueue] = set()  # queues written, truncated or trimmed since their last fsync
        # What a periodic checkpoint needs without walking every pending queue (80,000 of them at 10,000 topics):
        # ``due``: the queues it flushes (a truncation or deletion to make durable, or ``flush_least_bytes``
        # written to their files since their last fsync: counted when a tail is written, as RocketMQ counts dirty
        # pages written); ``unflushed``: the queues with unflushed entries in the order they got them, so that
        # while ``unflushed_phy`` only grows along it the first holds the oldest (``oldest_unflushed``), and
        # ``unordered``: those whose oldest entry may be older than their place says (entries put back by a
        # failed checkpoint or a rebuild); ``counts``: topic -> queue id -> the entries the checkpoint counts
        # durable (a queue's next offset at its last fsync, or its oldest unflushed offset if lower).
        self.flush_least_bytes = flush_least_bytes
        self.due: dict[ConsumeQueue, None] = {}
        self.unflushed: dict[ConsumeQueue, None] = {}
        self.unordered: set[ConsumeQueue] = set()
        self._newest_phy = 0  # unflushed_phy of the last queue appended to ``unflushed``
        self.counts: dict[str, dict[int, int]] = {}
        # Queues with entries buffered in their tails, oldest tail first, and those tails' bytes together: past
        # ``tail_limit`` (consumeQueueWriteBehindBytes) the oldest are written until half of it is left.
        self.tails: dict[ConsumeQueue, None] = {}
        self.tail_bytes = 0
        self.tail_limit = write_behind_bytes
        self._drain: asyncio.Handle | None = None  # the loop's next batch of oldest tails to write, if due

    def load(self) -> Iterator[tuple[ConsumeQueue, list[str]]]:
        """Open every queue found on disk, with the problems its files had (recovery)."""
        base = os.path.join(self.root, "consumequeue")
        if not os.path.isdir(base):
            return
        for topic in _directories(base):
            for qid_name in _directories(os.path.join(base, topic)):
                qid = _queue_id(qid_name)
                if qid is not None:
                    cq = self.find_or_create(topic, qid)
                    yield cq, cq.load()

    def all(self) -> Iterator[ConsumeQueue]:
        """Every queue, over a copy: callers may drop queues as they go."""
        for qs in list(self._queues.values()):
            yield from list(qs.values())

    def __len__(self) -> int:
        return sum(len(qs) for qs in self._queues.values())

    def write_oldest_tails(self) -> None:
        """Past ``tail_limit``: write the oldest tails until their bytes are under half of it, so that the buffered
        entries stay bounded whatever the rate and however many queues are written (a failed write raises). With
        sends spread over thousands of queues that is thousands of small tails: this put writes a batch of them
        and the loop the rest, a batch per turn, so that no put holds it for all of them (while the bound is
        passed again meanwhile, each put writes a batch too). Outside a running loop (recovery) all at once."""
        self._write_batch()
        if self.tail_bytes > self.tail_limit // 2 and self._drain is None:
            try:
                self._drain = asyncio.get_running_loop().call_soon(self._write_later)
            except RuntimeError:
                while self.tail_bytes > self.tail_limit // 2 and self.tails:
                    self._write_batch()

    def _write_batch(self) -> None:
        """The oldest ``TAILS_PER_TURN`` tails written, or fewer once half the bound is left. (Taken from the
        front of the dict at once: finding the oldest afresh for each tail would walk over the slots the ones
        written before it left there, quadratic in the tails written.)"""
        for cq in list(itertools.islice(self.tails, TAILS_PER_TURN)):
            if self.tail_bytes <= self.tail_limit // 2:
                return
            cq.write_tail()

    def _write_later(self) -> None:
        """A loop turn's batch, until half the bound is left. A write that fails (a full disk) stops here: the next
        put past the bound tries again, and its put fails with it."""
        self._drain = None
        try:
            self._write_batch()
        except OSError as exc:
            log.error("consume-queue tails past consumeQueueWriteBehindBytes could not be written: %s", exc)
            return
        if self.tail_bytes > self.tail_limit // 2 and self.tails:
            self._drain = asyncio.get_running_loop().call_soon(self._write_later)

    # --- what the checkpoint flushes and where its recovery point stays -------------------------------------

    def became_unflushed(self, cq: ConsumeQueue, first: int, phy: int) -> None:
        """``cq`` got unflushed entries from logical ``first``, the oldest at commit-log ``phy``: in order when no
        queue in ``unflushed`` has an older one (a put's entries follow every earlier put's in the log)."""
        if phy >= self._newest_phy or not self.unflushed:
            self.unflushed[cq] = None
            self._newest_phy = phy
        else:
            self.unordered.add(cq)
        self.count_at_most(cq, first)

    def count_at_most(self, cq: ConsumeQueue, offset: int) -> None:
        """The checkpoint counts at most ``offset`` entries of ``cq`` durable (from now until its next fsync)."""
        counts = self.counts.setdefault(cq.topic, {})
        if counts.get(cq.queue_id, offset) >= offset:
            counts[cq.queue_id] = offset

    def counts_below(self, phy: int) -> dict[str, dict[int, int]]:
        """``counts`` with each queue's at most its entries that point below commit-log ``phy`` (a checkpoint
        written before the log is cut back there: the entries past the cut are about to go)."""
        capped: dict[str, dict[int, int]] = {}
        for topic, counts in self.counts.items():
            capped[topic] = dict(counts)
            for qid, count in counts.items():
                cq = self.find(topic, qid)
                if count and cq is not None:
                    capped[topic][qid] = min(count, cq.first_offset_from_phy(phy))
        return capped

    def flushed(self, cq: ConsumeQueue, *, forget: bool = True) -> None:
        """``cq`` counts as flushed (a checkpoint took it): all its entries counted durable, none unflushed (not
        ``forget``: the caller empties the sets for all: ``forget_all``)."""
        self.counts.setdefault(cq.topic, {})[cq.queue_id] = cq.max_offset
        if forget:
            self._forget(cq)

    def forget_all(self) -> None:
        """Every queue counts as flushed: a checkpoint that puts the tails in its journal took every pending one and
        counted each (``flushed(cq, forget=False)``); the sets are emptied at once, not queue by queue."""
        self.pending.clear()
        self.due.clear()
        self.unflushed.clear()
        self.unordered.clear()

    def cut_unflushed(self, cq: ConsumeQueue) -> None:
        """``cq``'s unflushed entries were all cut: none holds the recovery point back any more (it stays pending
        and due, its files' cut for the next checkpoint to fsync)."""
        self.unflushed.pop(cq, None)
        self.unordered.discard(cq)

    def _forget(self, cq: ConsumeQueue) -> None:
        self.pending.discard(cq)
        self.due.pop(cq, None)
        self.unflushed.pop(cq, None)
        self.unordered.discard(cq)

    def oldest_unflushed(self) -> int | None:
        """The lowest commit-log offset of any unflushed entry (None: none): the first in order, or one out of
        order. (The first key of a dict that lost keys at its front is found past their empty slots: a walk in C,
        once a checkpoint.)"""
        phys = [cq.unflushed_phy for cq in self.unordered]
        first = next(iter(self.unflushed), None)
        if first is not None:
            phys.append(first.unflushed_phy)
        return min(phys, default=None)

    def reset_counts(self) -> None:
        """Every queue's count from what it holds (recovery): its entries, or its oldest unflushed offset."""
        self.counts = {}
        for cq in self.all():
            start = cq.unflushed_from
            self.counts.setdefault(cq.topic, {})[cq.queue_id] = cq.max_offset if start is None else min(
                start, cq.max_offset)

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """Every queue's next offset by (topic, queue id)."""
        return {key: cq.max_offset for key, cq in self.by_key.items()}

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.by_key.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self.by_key.get(key)
        if cq is None:
            cq = ConsumeQueue(self, topic, queue_id)
            self._queues.setdefault(topic, {})[queue_id] = cq
            self.by_key[key] = cq
        return cq

    def drop(self, topic: str, queue_id: int) -> None:
        """Forget the queue and delete its files."""
        self.drops += 1
        cq = self._queues.get(topic, {}).pop(queue_id, None)
        self.by_key.pop((topic, queue_id), None)
        if cq is not None:
            with self._files_lock:
                cq.destroy()
            self._forget(cq)
        if topic in self._queues and not self._queues[topic]:
            del self._queues[topic]
        counts = self.counts.get(topic)
        if counts is not None:
            counts.pop(queue_id, None)
            if not counts:
                del self.counts[topic]

    def topics(self) -> set[str]:
        return set(self._queues)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self._queues.get(topic, {}))
