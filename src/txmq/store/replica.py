"""The store's side of replication: a slave's log, which takes only what its master streams (``ReplicaLog``), and
RocketMQ's confirm offset, which bounds what consumers see to what every SyncStateSet member has
(``ConfirmOffset``). The network side is ``txmq.store.ha``."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from txmq.errors import StoreError
from txmq.store.dispatcher import (
    DispatchRequest,
    build_index,
    builds_consume_queue,
    request_from_record,
    run_dispatchers,
)

if TYPE_CHECKING:
    from txmq.store.clock import StoreClock
    from txmq.store.commit_log import CommitLog
    from txmq.store.config import StoreConfig
    from txmq.store.consume_queue import ConsumeQueue
    from txmq.store.consume_queue_store import ConsumeQueueStore
    from txmq.store.index import IndexService

log = logging.getLogger("txmq.store")

MAX_HELD_ARRIVALS = 4096  # arrivals held for the confirm offset; more are merged into the newest (woken later)


class ConfirmOffset:
    """RocketMQ's confirmOffset (controller mode, set by txmq.store.ha) and the arrival listeners it gates: reads
    asked with ``confirmed=True`` get only records that end at or before it, and the listeners (long polling) hear
    of a record once it does. None: no bound (outside controller mode). Every put's group tells it its arrivals."""

    def __init__(self) -> None:
        self.offset: int | None = None
        self._held: deque[tuple[int, dict[tuple[str, int], int]]] = deque()  # (end, arrived) past the offset
        self.listeners: list[Callable[[str, int, int], None]] = []

    def set(self, offset: int | None, end: int, queue_offsets: Callable[[], dict[tuple[str, int], int]]) -> None:
        """Bound consumers' reads at ``offset`` (capped at the log's ``end``; None: no bound) and wake the long
        polls of the records it now covers. A bound lowered below the log's end (a start at 0 over a recovered
        log, a new master's lower one) uncovers records told of before, or never: every queue's arrival (its next
        offset in ``queue_offsets()``, asked only then: a slave sets the bound at every transfer) is held again
        until the bound covers the log's present end."""
        previous = self.offset
        if offset is not None:
            offset = min(offset, end)
        self.offset = offset
        if offset is not None and offset < end and (previous is None or offset < previous):
            self.notify(queue_offsets(), end)
        held = self._held
        while held and (offset is None or held[0][0] <= offset):
            self._tell(held.popleft()[1])

    def truncate(self, end: int) -> None:
        """The log was cut back to ``end``: the bound never passes the log's end (RocketMQ's truncateDirtyFiles),
        and arrivals held past it are told once the bound reaches it (a wake for a dropped record is only a pull
        answered with nothing new)."""
        if self.offset is not None and self.offset > end:
            self.offset = end
        self._held = deque((min(held_end, end), arrived) for held_end, arrived in self._held)

    def notify(self, arrived: dict[tuple[str, int], int], end: int) -> None:
        """Tell the listeners of records ending at ``end`` (each queue's next offset in ``arrived``) now, or once
        the confirm offset reaches it."""
        if self.offset is not None and end > self.offset:
            if len(self._held) >= MAX_HELD_ARRIVALS:
                arrived = {**self._held.pop()[1], **arrived}
            self._held.append((end, arrived))
            return
        self._tell(arrived)

    def _tell(self, arrived: dict[tuple[str, int], int]) -> None:
        for (topic, qid), next_offset in arrived.items():
            for listener in self.listeners:
                try:
                    listener(topic, qid, next_offset)
                except Exception:
                    log.exception("arrival listener %r failed", listener)

    def confirmed_max(self, cq: ConsumeQueue) -> int:
        """The queue's max offset for consumers: its entries whose records end at or before the confirm offset."""
        hi, bound = cq.max_offset, self.offset
        if bound is None or hi == cq.min_offset:
            return hi
        last = cq.entry(hi - 1)
        if last is None or last[0] + last[1] <= bound:
            return hi
        return cq.first_offset_where(cq.min_offset, hi - 1, lambda phy, size: phy + size > bound)


def _put_run(queues: ConsumeQueueStore, key: tuple[str, int], first: int, entries: list[tuple[int, int, int]],
             failed: list[OSError]) -> None:
    """A replicated run of entries put in its queue. A write that fails (the queue's tail reaching a page, or the
    oldest tails written past ``consumeQueueWriteBehindBytes``, another queue's among them) keeps the tail buffered:
    the entries are the queue's all the same, and the other queues' runs go on; the error is kept for the end. (A
    run that does not start at the queue's end, after a gap, is written at once and fails with its write.)"""
    try:
        queues.find_or_create(*key).put_run(first, entries)
    except OSError as exc:
        failed.append(exc)


class ReplicaLog:
    """A slave's log (RocketMQ's appendToCommitLog and truncateDirtyFiles): its master's records appended as they
    are, at the master's offsets, and dispatched as a put's are; cut back where its master's log ends."""

    def __init__(self, config: StoreConfig, commit_log: CommitLog, queues: ConsumeQueueStore, index: IndexService,
                 clock: StoreClock, confirm: ConfirmOffset, counters: dict[str, int],
                 dispatchers: list[Callable[[DispatchRequest], None]],
                 write_checkpoint: Callable[[int | None], None]) -> None:
        self.config = config
        self.commit_log = commit_log
        self.queues = queues
        self.index = index
        self.clock = clock
        self.confirm = confirm
        self._counters = counters
        self._dispatchers = dispatchers
        self._write_checkpoint = write_checkpoint
        self.truncate_listeners: list[Callable[[int], None]] = []

    def append(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """Append the whole records at the start of a master's bytes from ``offset`` as they are, dispatch them
        (consume queues, index, dispatchers, arrival listeners) and return how many bytes were taken. Raises
        ``CorruptRecordError`` (nothing written) for bytes that are not valid records at those offsets or hold a
        record that does not decode (each is decoded before any is written: one in the log but not dispatched
        would never reach its queues), and the ``OSError`` of a consume-queue or index file that could not be
        written (a full disk) once every record is dispatched: the records are in the log and the session goes on
        from its end, so no queue's entries may be left out."""
        commit_log, clock, queues = self.commit_log, self.clock, self.queues
        reqs = commit_log.append_raw(offset, data, request_from_record)
        arrived: dict[tuple[str, int], int] = {}  # next queue offset per queue
        runs: dict[tuple[str, int], tuple[int, list[tuple[int, int, int]]]] = {}  # consecutive entries per queue
        index_enabled = self.config.message_index_enable
        failed: list[OSError] = []
        if reqs:  # the frame's place on the time line before any of its records is dispatched
            clock.replicated([(req.commit_log_offset, req.store_timestamp) for req in reqs],
                             commit_log.last_store_timestamp)
            commit_log.last_store_timestamp = reqs[-1].store_timestamp
        for req in reqs:
            phy = req.commit_log_offset
            try:
                build_index(self.index, index_enabled, req.topic, req.sys_flag, req.keys, req.uniq_key, phy,
                            req.store_timestamp)
            except OSError as exc:  # a new index file or its next megabyte on a full disk: the frame's later keys
                failed.append(exc)  # are not indexed, and its records go on to their queues and dispatchers
                index_enabled = False
            run_dispatchers(self._dispatchers, req, self._counters)
            if builds_consume_queue(req.sys_flag):
                key = (req.topic, req.queue_id)
                first, entries = runs.get(key, (req.consume_queue_offset, []))
                if first + len(entries) != req.consume_queue_offset:
                    _put_run(queues, key, first, entries, failed)
                    first, entries = req.consume_queue_offset, []
                entries.append((phy, req.msg_size, req.tags_code))
                runs[key] = (first, entries)
                arrived[key] = req.consume_queue_offset + 1
        for key, (first, entries) in runs.items():  # one write per queue and file, as a put does
            _put_run(queues, key, first, entries, failed)
        self._counters["appends"] += len(reqs)
        self.confirm.notify(arrived, commit_log.max_offset)
        if failed:
            raise failed[0]
        return commit_log.max_offset - offset

    def truncate(self, offset: int) -> None:
        """Drop the log from ``offset`` on, with the consume-queue entries and index files that point there,
        and checkpoint at once: a slave whose master no longer has those bytes must not keep them.

        First a checkpoint whose recovery point is at or below ``offset`` is made durable: the one on disk may
        be past it, and the master's records written there next would otherwise lie where a crash's recovery
        trusts the log and the queues (it would start in the middle of a record, and keep entries pointing at
        records that are gone). If that checkpoint cannot be written, nothing is dropped and the error is raised
        (the HA client or the replicas manager tries again): no append follows a cut it does not cover."""
        self._write_checkpoint(offset)
        commit_log = self.commit_log
        log.warning("truncating the commit log at %d (the master's log ends there): %d bytes dropped",
                    offset, commit_log.max_offset - offset)
        try:
            commit_log.truncate(offset)
        finally:  # the log's end is lowered even when the cut's fsync failed: what was derived from it goes too
            if commit_log.max_offset <= offset:
                self._drop_derived(offset)
        self._write_checkpoint(None)  # the cut durable, the queues counted as they now are

    def _drop_derived(self, offset: int) -> None:
        """The state derived from the records dropped from ``offset`` on: clock anchors, queue entries, index
        entries, the confirm bound, and the listeners' (the transaction table), whatever follows."""
        self.clock.truncate(offset)
        self.commit_log.last_store_timestamp = 0  # unknown: the next record is not compared with the one before it
        for cq in self.queues.all():
            cq.truncate_dirty(offset)
        self.index.truncate_from(offset)
        self.confirm.truncate(offset)
        for fn in self.truncate_listeners:
            fn(offset)

    def start_at(self, offset: int) -> None:
        """An empty slave copies a master whose log no longer starts at 0: its log starts where the master's
        does (a segment boundary), so offsets mean the same on both."""
        commit_log = self.commit_log
        if commit_log.queue.files or offset % commit_log.segment_size:
            raise StoreError(f"cannot start a replica at {offset}: the log is not empty or not at a segment start")
        commit_log.max_offset = commit_log.flushed_offset = offset
