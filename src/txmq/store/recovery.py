"""Recovery at open: trust the checkpoint, validate the tail, truncate what is torn, rebuild what is derived.

1. The abort file says whether the last stop was clean; the checkpoint gives the recovery point R. The tails
   journal it names (``tail_journal.py``) is written back into its queues' files: entries the checkpoint counted.
2. Consume-queue entries pointing at or past R are dropped: the tail is dispatched again below. (A periodic
   checkpoint may leave consume queues unflushed: R is then at or before their oldest unflushed entry.)
3. Derived files found missing or inconsistent (a consume queue with fewer entries than the checkpoint
   recorded, a gap, an entry pointing past R; an index file the checkpoint listed) are rebuilt by one scan
   of the log up to R. This is the only path whose time grows with the log, and it only runs when a derived
   file was lost.
4. Every record from R on is validated (magic, sizes, trailer CRC, PHYSICALOFFSET), decoded and dispatched
   again (consume queue, index, the dispatchers given at open). The first bad record (one that does not decode
   among them) ends the log: the rest of its
   segment is zeroed and later segments are deleted. The tail is read as the disk holds it: its cached pages
   are dropped first (``_read_from_disk``).

After a clean stop R is the end of the log, so step 4 only checks that nothing follows it.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from txmq import gctune
from txmq.store import tail_journal
from txmq.store.dispatcher import (
    DispatchRequest,
    builds_consume_queue,
    builds_index,
    keys_of,
    request_from_record,
)

if TYPE_CHECKING:
    from txmq.store.checkpoint import Checkpoint
    from txmq.store.commit_log import CommitLog
    from txmq.store.consume_queue import ConsumeQueue
    from txmq.store.message_store import DefaultMessageStore

log = logging.getLogger("txmq.store")


@dataclass
class RecoveryReport:
    """What open found and what it had to drop."""

    clean_shutdown: bool = False
    new_store: bool = False  # nothing was there to recover: no log, no checkpoint, no abort file
    checkpoint_offset: int | None = None  # None: no usable checkpoint, the whole log was scanned
    scan_start: int = 0
    end_offset: int = 0  # the log's end after recovery
    records_scanned: int = 0
    bytes_scanned: int = 0
    truncated_bytes: int = 0  # non-zero bytes discarded after the last valid record
    corrupt_offsets: list[int] = field(default_factory=list)
    segments_deleted: int = 0
    consume_queue_entries_truncated: int = 0
    consume_queues_rebuilt: list[str] = field(default_factory=list)
    index_files_rebuilt: list[int] = field(default_factory=list)
    tails_journal: int | None = None  # the tails journal written back into the queues' files
    tails_restored: int = 0  # queues it held
    rebuild_records_scanned: int = 0
    events: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def lost_data(self) -> bool:
        return self.truncated_bytes > 0 or bool(self.corrupt_offsets)

    def event(self, text: str) -> None:
        self.events.append(text)
        log.warning("recovery: %s", text)


def _read_from_disk(cl: CommitLog, start: int) -> None:
    """Drop the cached pages of the log from ``start`` on (POSIX_FADV_DONTNEED: clean pages only; dirty ones are
    written back and stay), so the scan reads what the disk holds. A fsync that failed before this open (durability
    lost, docs/storage.md) may have left pages clean in the cache that the disk never got: read from there, they
    would pass as records, this open would append after them, and a power loss would take them and everything
    after them."""
    for mf in cl.queue.files_from(start):
        pos = max(start - mf.file_from_offset, 0)
        with contextlib.suppress(OSError):  # a file system that takes no advice: the tail is read as cached
            os.posix_fadvise(mf.fd, pos - pos % mmap.PAGESIZE, 0, os.POSIX_FADV_DONTNEED)


def recover(store: DefaultMessageStore, abort_existed: bool) -> RecoveryReport:
    t0 = time.monotonic()
    report = RecoveryReport()
    cl = store.commit_log
    cp, cp_problem = store.checkpoint.load()
    report.clean_shutdown = not abort_existed and cp is not None
    if abort_existed:
        report.event("abort file present: the previous stop was not clean")
    for problem in cl.load():
        report.event(problem)
    report.new_store = not abort_existed and cp is None and not cl.queue.files
    if cp_problem is not None and cl.queue.files:
        report.event(f"{cp_problem}: scanning the whole log")
    for problem in store.index.load():
        report.event(f"{problem}; the file was deleted and will be rebuilt")

    # 1. Where the scan starts.
    first, last = cl.queue.first, cl.queue.last
    log_lo = first.file_from_offset if first else 0
    log_hi = last.end_offset if last else 0
    start = cp.recovery_offset if cp is not None else log_lo
    if cp is not None and not (log_lo <= start <= log_hi) and (first is not None or start != 0):
        report.event(f"checkpoint offset {start} outside the log [{log_lo}, {log_hi}): scanning all of it")
        start = log_lo
    if first is None:
        start = 0
    report.checkpoint_offset = start if cp is not None else None
    report.scan_start = start
    cl.max_offset = cl.flushed_offset = start

    # 2. Each queue in one visit while its file is open (at 10,000 topics a second pass found each descriptor let go
    # for others' and opened it again): its journaled tail written back; fewer entries than the checkpoint counted
    # means fsynced files were lost (rebuilt below; counted before the truncation, since a queue may hold entries
    # past the recovery point that it had fsynced); entries past the recovery point go (the tail is dispatched
    # again below).
    visit = _QueueVisit(store, report, cp, start)
    with gctune.paused():
        for cq, problems in store.queues.load():
            visit(cq, problems)
        for topic, queue_id in list(visit.journaled):  # journaled queues with no directory on disk
            visit(store.queues.find_or_create(topic, queue_id), [])
    for topic, qids in (visit.counted or {}).items():  # counted queues with neither
        for qid, max_offset in qids.items():
            if max_offset > 0 and store.queues.find(topic, qid) is None:
                report.event(f"consume queue {topic}/{qid} has 0 entries, the checkpoint says {max_offset}")
                visit.rebuild.add((topic, qid))
    rebuild_queues = visit.rebuild

    dropped_index = store.index.truncate_from(start)
    if dropped_index:
        report.event(f"dropped {len(dropped_index)} index files beginning after the recovery point {start}")

    # 3. Rebuild lost derived files from the log, up to the recovery point.
    index_ranges = _lost_index_ranges(store, cp.index_files if cp else [], start, log_lo)
    if rebuild_queues or index_ranges:
        _rebuild(store, report, rebuild_queues, index_ranges, start, log_lo, visit.settled)

    # 4. Validate and dispatch the tail.
    _read_from_disk(cl, start)

    def on_record(offset: int, rec: memoryview) -> None:
        store.dispatch(request_from_record(rec, offset), during_recovery=True)

    result = cl.scan(start, on_record)
    report.records_scanned = result.records
    report.bytes_scanned = result.bytes_scanned
    report.end_offset = result.end_offset
    if result.corrupt_offset is not None:
        report.corrupt_offsets.append(result.corrupt_offset)
        report.event(f"record at {result.corrupt_offset} is invalid ({result.reason}): the log ends there")
    report.truncated_bytes = cl.data_bytes_after(result.end_offset)
    later = [mf for mf in cl.queue.files if mf.file_from_offset > result.end_offset]
    if report.truncated_bytes or later:
        report.segments_deleted = len(later)
        report.event(
            f"truncated the log at {result.end_offset}: {report.truncated_bytes} bytes dropped, "
            f"{len(later)} later segments deleted"
        )
        cl.truncate(result.end_offset)
    cl.max_offset = result.end_offset
    cl.flushed_offset = min(start, result.end_offset)
    for cq in store.queues.all():  # rebuilt, made or first filled by the tail's dispatch (the others' at their visit)
        if cq not in visit.settled:
            cq.correct_min_offset(visit.min_phy)
    store.finish_recovery(cp, report.tails_journal)
    report.duration_s = time.monotonic() - t0
    log.info(
        "recovered store %s: %s, scanned %d records (%d bytes) from %d, log ends at %d, in %.3fs",
        store.config.store_path_root_dir,
        "new store" if report.new_store else "clean stop" if report.clean_shutdown else "unclean stop",
        report.records_scanned, report.bytes_scanned, start, report.end_offset, report.duration_s,
    )  # fmt: skip
    return report


class _QueueVisit:
    """Recovery's checks of one consume queue (step 2), the queues to rebuild gathered."""

    def __init__(self, store: DefaultMessageStore, report: RecoveryReport, cp: Checkpoint | None, start: int) -> None:
        self.report = report
        self.start = start
        self.max_size = store.config.max_message_size + 1024
        self.min_phy = store.commit_log.min_offset
        # Queues whose first entry still in the log was found at their visit: the tail's dispatch only adds later
        # ones. Not a queue holding none then, whose first one the dispatch may put there.
        self.settled: set[ConsumeQueue] = set()
        self.counted: dict[str, dict[int, int]] | None = cp.queues if cp is not None else None  # None: no checkpoint
        self.journaled: dict[tuple[str, int], tuple[int, bytes]] = {}
        self.rebuild: set[tuple[str, int]] = set()
        if cp is not None and cp.tails is not None:
            self._read_journal(store, cp.tails)

    def _read_journal(self, store: DefaultMessageStore, seq: int) -> None:
        """The checkpoint's tails journal. One that cannot be read is passed over: the queues it held have fewer
        entries than the checkpoint counted, and are rebuilt from the log."""
        records, problem = tail_journal.read(store.config.store_path_root_dir, seq)
        if records is None:
            self.report.event(f"{problem}: the queues it held are rebuilt from the commit log")
            return
        self.journaled = {(topic, queue_id): (first, entries) for topic, queue_id, first, entries in records}
        self.report.tails_journal, self.report.tails_restored = seq, len(records)

    def __call__(self, cq: ConsumeQueue, problems: list[str]) -> None:
        report, key = self.report, (cq.topic, cq.queue_id)
        for problem in problems:
            report.event(problem)
            self.rebuild.add(key)
        tail = self.journaled.pop(key, None)
        if tail is not None:
            cq.restore(*tail)
        # A queue a checkpoint does not count was made after it: all of its entries follow the recovery point. So
        # also after one that counts no queue at all (the deletion's of the store's only topic): every checkpoint
        # has counted every queue it made durable. Without a checkpoint the whole log is scanned: no count.
        count = None if self.counted is None else self.counted.get(cq.topic, {}).get(cq.queue_id, 0)
        counted = count or 0
        if cq.max_offset < counted:  # (a queue counted 0 had nothing durable: its entries follow the recovery point)
            report.event(f"consume queue {cq.topic}/{cq.queue_id} has {cq.max_offset} entries, the checkpoint says "
                         f"{counted}")
            self.rebuild.add(key)
        report.consume_queue_entries_truncated += cq.truncate_dirty(self.start, count)
        bad = cq.last_entry_problem(self.start, self.max_size)
        if bad is not None:
            report.event(bad)
            self.rebuild.add(key)
        cq.correct_min_offset(self.min_phy)
        if cq.min_offset < cq.max_offset:
            self.settled.add(cq)


def _lost_index_ranges(store: DefaultMessageStore, listed: list[int], start: int, log_lo: int) -> list[tuple[int, int]]:
    """Commit-log ranges [begin, end) of index files the checkpoint lists that are gone or were invalid."""
    if not store.config.message_index_enable:
        return []
    present = set(store.index.names())
    bounds = sorted(set(listed) | present)
    ranges = []
    for begin in sorted(listed):
        if begin in present:
            continue
        later = [b for b in bounds if b > begin]
        end = min(later[0] if later else start, start)
        if end > max(begin, log_lo):
            ranges.append((begin, end))
    return ranges


def _rebuild(
    store: DefaultMessageStore,
    report: RecoveryReport,
    queues: set[tuple[str, int]],
    index_ranges: list[tuple[int, int]],
    start: int,
    log_lo: int,
    settled: set[ConsumeQueue],
) -> None:
    """Drop the lost queues and rebuild them, and the lost index ranges, from the log up to ``start``; the rebuilt
    queues, their first entry found, join ``settled``."""
    for topic, qid in sorted(queues):
        store.queues.drop(topic, qid)
        report.consume_queues_rebuilt.append(f"{topic}/{qid}")
        report.event(f"rebuilding consume queue {topic}/{qid} from the commit log")
    index_puts: list[tuple[int, int, Callable[[str, list[str], int, int], None]]] = []
    for begin, end in index_ranges:
        index_puts.append((begin, end, store.index.rebuilder(begin)))
        report.index_files_rebuilt.append(begin)
        report.event(f"rebuilding index file {begin} from commit-log range [{begin}, {end})")
    scan_from = log_lo if queues else max(log_lo, min(b for b, _, _ in index_puts))

    rebuilt: dict[tuple[str, int], tuple[ConsumeQueue, int]] = {}  # each queue and the first offset put back

    def on_record(offset: int, rec: memoryview) -> None:
        req: DispatchRequest = request_from_record(rec, offset)
        report.rebuild_records_scanned += 1
        key = (req.topic, req.queue_id)
        if key in queues and builds_consume_queue(req.sys_flag):
            cq = store.queues.find_or_create(req.topic, req.queue_id)
            cq.put(req.consume_queue_offset, offset, req.msg_size, req.tags_code)
            rebuilt.setdefault(key, (cq, req.consume_queue_offset))
        if not builds_index(req.sys_flag):
            return
        for begin, end, put in index_puts:
            if begin <= offset < end:
                put(req.topic, keys_of(req.keys, req.uniq_key), offset, req.store_timestamp)

    def on_corrupt(offset: int, reason: str) -> None:
        report.event(f"rebuild skipped an invalid record at {offset} ({reason})")

    store.commit_log.scan(scan_from, on_record, end=start, on_corrupt=on_corrupt)
    # Its first entry is the first put back (the scan starts at the log's first record): records the scan skipped
    # leave empty slots, over which a search for the first entry still in the log would not find it
    for cq, first in rebuilt.values():
        cq.min_offset = first
        settled.add(cq)
