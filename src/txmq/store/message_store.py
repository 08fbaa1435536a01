"""DefaultMessageStore: the facade the broker calls (RocketMQ ``DefaultMessageStore``): it opens, recovers, starts
and stops the store's parts, checkpoints them, and reads, looks up and ages out what they hold.

Every public method runs on the asyncio loop thread. Puts go to the group commit (``group_commit.py``), which
writes the commit log and dispatches to the consume queue, the index and the extra dispatchers; a slave's log
and the confirm offset are ``replica.py``'s. Two threads make things durable: the commit-log flush thread
(``flush.py``) and, every ``checkpoint_interval_ms``, a worker that fsyncs consume queues and index files and then
writes the checkpoint. A periodic checkpoint fsyncs only the consume queues with ``flushConsumeQueueLeastPages``
written, and all of them every ``flushConsumeQueueThoroughInterval`` (their tails in one journal, ``tail_journal.py``);
its recovery point stays at the oldest entry it left unflushed. Every other checkpoint (stop, ``flush_and_checkpoint``,
a truncation) writes and flushes all.

The first failed fsync of any of these files loses the store's durability (``durability.py``): from then on no
flush and no checkpoint is made and puts are refused, until a restart's recovery rebuilds from the last checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import cython

from txmq.cancel import cancel_and_wait, run_to_end
from txmq.errors import CorruptRecordError, StoreError
from txmq.message import MessageConst, MessageExt, decode_message
from txmq.store import tail_journal
from txmq.store.checkpoint import Checkpoint, StoreCheckpoint
from txmq.store.clock import StoreClock
from txmq.store.commit_log import CommitLog
from txmq.store.config import FlushDiskType, StoreConfig, delete_hours
from txmq.store.consume_queue import CQ_ENTRY, CQ_ENTRY_SIZE, ConsumeQueue, topic_directory
from txmq.store.consume_queue_store import TAILS_PER_TURN, ConsumeQueueStore
from txmq.store.disk import DiskGuard
from txmq.store.dispatcher import (
    DispatchRequest,
    build_index,
    builds_consume_queue,
    request_from_record,
    run_dispatchers,
)
from txmq.store.durability import NO_DESCRIPTOR, Durability
from txmq.store.flush import FlushCommitLogService
from txmq.store.group_commit import GroupCommit, Waiter
from txmq.store.index import IndexFile, IndexService
from txmq.store.mapped_file import MappedFile, MappedFileQueue, fsync_dir, syncfs
from txmq.store.record import TRAILER_SIZE, to_wire
from txmq.store.recovery import RecoveryReport, recover
from txmq.store.replica import ConfirmOffset, ReplicaLog
from txmq.store.results import GetMessageResult, GetMessageStatus, PutMessageResult, PutMessageStatus
from txmq.topic import is_system_topic

log = logging.getLogger("txmq.store")

PAGE_SIZE = 4096  # flushConsumeQueueLeastPages counts pages of this size, as RocketMQ's
CHECKPOINT_DUTY = 0.1  # checkpoints take at most this share of the time (see _checkpoint_loop)
SYNCFS_ABOVE = 256  # consume-queue files and directories a checkpoint makes durable with one syncfs, not one each

_MEMORY = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # RocketMQ TOTAL_PHYSICAL_MEMORY_SIZE
MAX_FILTER_ENTRIES = 800  # entries one get_message looks at when filtering (RocketMQ maxFilterMessageCount/20)
MAX_FILTER_SECONDS = 0.05  # a SQL92 filter's time in one get_message: a costly one holds the loop no longer


@dataclass(eq=False)  # compared by identity (``_in_flight``)
class _Snapshot:
    """What a checkpoint makes durable, taken on the loop thread so it is consistent."""

    checkpoint: Checkpoint
    cq_files: list[MappedFile] = field(default_factory=list)
    cq_dirs: list[MappedFileQueue] = field(default_factory=list)  # queues that created or deleted files
    index_files: list[IndexFile] = field(default_factory=list)
    cq_flushed: list[tuple[ConsumeQueue, tuple[int | None, int, bool]]] = field(default_factory=list)
    document: bytes = b""  # the checkpoint encoded (its counts are the store's, which the loop thread changes)
    # The tails journal the document names (whoever writes the document writes the journal first)
    tails: tail_journal.TailJournal | None = None
    journals_upto: int = 0  # the highest tails journal number used when it was taken
    # Snapshots taken before this one whose queues' unflushed state was not put back yet (still running, or failed
    # and waiting for the loop's ``_unflushed_again``): if one failed, this one's checkpoint would claim its files.
    earlier: list[_Snapshot] = field(default_factory=list)
    failed: bool = False
    # The order snapshots were taken in, and whether this one's files were made durable (by its worker or a later
    # checkpoint's): one written on the loop thread (``_checkpoint_now``) may take the lock before an earlier
    # snapshot's worker thread has run.
    seq: int = 0
    done: bool = False
    # Its queues counted as unflushed again (``_unflushed_again``), since its files were last made dirty again
    put_back: bool = False

    def release(self) -> None:
        """Made durable: nothing reads its queues' state, files or document again (a put-back is for a failed one).
        Dropped at once, not when the last reference goes: a thorough checkpoint takes every queue (80,000 at
        10,000 topics, about 10 MB of state) and the checkpoint loop held it until the next checkpoint."""
        self.cq_files, self.cq_dirs, self.index_files, self.cq_flushed, self.earlier = [], [], [], [], []
        self.document = b""


@cython.cclass
class DefaultMessageStore:
    """Commit log, consume queues, index, checkpoint, flush and retention in one directory.

    Opening recovers synchronously; ``recovery_report`` tells what was found and lost. Dispatchers passed
    here see the records recovery dispatches again; those added later with ``add_dispatcher`` get the same
    records replayed by ``start()``.
    """

    def __init__(self, config: StoreConfig, dispatchers: list[Callable[[DispatchRequest], None]] | None = None):
        self.config = config
        root = config.store_path_root_dir
        os.makedirs(root, exist_ok=True)
        self.durability = Durability()  # lost at the first failed fsync (shared by the log, flush, puts, checkpoint)
        self.commit_log = CommitLog(root, config.mapped_file_size_commit_log, self.durability)
        self.index = IndexService(root, config.max_hash_slot_num, config.max_index_num)
        self.checkpoint = StoreCheckpoint(root)
        self._files_lock = threading.Lock()  # held while derived files are fsynced or deleted
        self._checkpoint_lock = threading.Lock()  # one checkpoint at a time; close waits for a running one
        self.queues = ConsumeQueueStore(root, config.mapped_file_size_consume_queue, self._files_lock,
                                        config.open_consume_queue_files_limit(),
                                        config.consume_queue_write_behind_bytes,
                                        config.flush_consume_queue_least_pages * PAGE_SIZE)
        self._dispatchers: list[Callable[[DispatchRequest], None]] = list(dispatchers or [])
        self._late_dispatchers: list[Callable[[DispatchRequest], None]] = []
        # Wall-clock stamps, and the elapsed-time account every age counts on (first checks, delays, retention)
        self.clock = StoreClock(root)
        self._delete_hours = delete_hours(config.delete_when)
        self._checkpoint_offset = 0
        self._thorough_at = time.monotonic()  # the last checkpoint that flushed every consume queue
        self._in_flight: list[_Snapshot] = []  # snapshots not written yet, or failed and not put back yet
        self._snapshots_taken = 0
        self._written_seq = 0  # the ``seq`` of the snapshot whose document is on disk
        # The tails journal the latest snapshot's document names (periodic ones name the last thorough one's), and
        # the highest journal number used (set by recovery: a new journal never takes a number found on disk)
        self._tails: tail_journal.TailJournal | None = None
        self._tails_seq = 0
        self._flush_service: FlushCommitLogService | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._open = True
        self._closing: asyncio.Task[None] | None = None  # the shutdown under way or done
        self._counters = dict.fromkeys(
            ("put_calls", "put_groups", "appends", "dispatch_errors", "corrupt_reads", "checkpoints",
             "thorough_checkpoints", "flush_timeouts"), 0
        )
        self.confirm = ConfirmOffset()
        self.group_commit = GroupCommit(
            config, self.commit_log, self.queues, self.index, self.clock, self.confirm,
            DiskGuard(root, config.disk_space_warning_level_ratio, config.disk_space_clean_forcibly_ratio),
            self._files_lock, self._counters, self._dispatchers, self.clean_expired_files, self.durability)
        self.replica_log = ReplicaLog(config, self.commit_log, self.queues, self.index, self.clock, self.confirm,
                                      self._counters, self._dispatchers, self._checkpoint_now)
        self._lock_fd = os.open(os.path.join(root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._lock_fd)
            raise StoreError(f"{root} is open in another process") from exc
        self._abort_path = os.path.join(root, "abort")
        abort_existed = os.path.exists(self._abort_path)
        with open(self._abort_path, "wb"):  # before recovery: a crash while recovering is a crash too
            pass
        fsync_dir(root)
        try:
            self.recovery_report: RecoveryReport = recover(self, abort_existed)
        except BaseException:
            self._close_files()
            raise
        self._replay_range = (self.recovery_report.scan_start, self.commit_log.max_offset)

    # --- recovery hooks ----------------------------------------------------------------------------

    def finish_recovery(self, cp: Checkpoint | None, tails: int | None) -> None:
        """Rebuild the in-memory tables from the recovered files (each queue's first entry still in the log found
        by recovery). ``tails``: the tails journal recovery wrote back
        (the checkpoint on disk names it, until the next one); the others on disk are stale. A new journal never
        takes a number the checkpoint on disk or a file names."""
        root = self.config.store_path_root_dir
        self._tails_seq = max(tail_journal.numbers(root), default=0)
        if cp is not None and cp.tails is not None:
            self._tails_seq = max(self._tails_seq, cp.tails)
        self._tails = tail_journal.TailJournal(tails, written=True) if tails is not None else None
        tail_journal.remove_below(root, self._tails_seq + 1, keep=tails)
        self.queues.reset_counts()
        self._checkpoint_offset = min(cp.recovery_offset if cp else 0, self.commit_log.max_offset)
        if not self.commit_log.last_store_timestamp and cp is not None:  # no record after the checkpoint's
            self.commit_log.last_store_timestamp = cp.last_store_timestamp
        self.clock.open(self.commit_log.max_offset)

    def dispatch(self, req: DispatchRequest, *, during_recovery: bool = False) -> None:
        """Run the dispatchers for one record recovery found (CommitLogDispatcher chain)."""
        if builds_consume_queue(req.sys_flag):
            cq = self.queues.find_or_create(req.topic, req.queue_id)
            cq.put(req.consume_queue_offset, req.commit_log_offset, req.msg_size, req.tags_code)
        build_index(self.index, self.config.message_index_enable, req.topic, req.sys_flag, req.keys, req.uniq_key,
                    req.commit_log_offset, req.store_timestamp)
        run_dispatchers(self._dispatchers, req, self._counters)
        if during_recovery:  # a mark a crash kept from the clock file (a slave's, made after its records) made again
            self.clock.mark(req.commit_log_offset, req.store_timestamp, self.commit_log.last_store_timestamp)
            self.commit_log.last_store_timestamp = req.store_timestamp

    # --- lifecycle ---------------------------------------------------------------------------------

    def add_dispatcher(self, fn: Callable[[DispatchRequest], None]) -> None:
        """Register a CommitLogDispatcher; before ``start()`` it also gets the records recovery dispatched."""
        self._dispatchers.append(fn)
        if not self._tasks:
            self._late_dispatchers.append(fn)

    def add_arrival_listener(self, fn: Callable[[str, int, int], None]) -> None:
        """``fn(topic, queue_id, new max offset)`` after each dispatch, on the loop thread (long polling)."""
        self.confirm.listeners.append(fn)

    async def start(self) -> None:
        """Replay the recovered tail to late dispatchers, then start flush, checkpoint and retention."""
        self._check_open()
        if self._late_dispatchers:
            late, self._late_dispatchers = self._late_dispatchers, []
            begin, end = self._replay_range

            def replay(offset: int, rec: memoryview) -> None:
                req = request_from_record(rec, offset)
                for fn in late:
                    fn(req)

            self.commit_log.scan(begin, replay, end=end)
        loop = asyncio.get_running_loop()
        self._flush_service = FlushCommitLogService(
            self.commit_log,
            group_commit=self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH,
            interval_ms=self.config.flush_interval_commit_log_ms,
        )
        self._flush_service.start(loop)
        self.group_commit.flush_service = self._flush_service
        self._tasks = [
            asyncio.create_task(self._checkpoint_loop()),
            asyncio.create_task(self._every(self.config.clean_resource_interval_ms, self._clean_async)),
        ]

    async def _every(self, interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("store background job %s failed", getattr(job, "__name__", job))

    async def _checkpoint_loop(self) -> None:
        """A checkpoint every ``checkpoint_interval_ms``, or less often so that checkpoints take at most
        ``CHECKPOINT_DUTY`` of the time: with sends spread over thousands of queues a checkpoint fsyncs a file per
        few messages, and waiting longer lets each fsync cover more of them (the tail that recovery reads after a
        crash grows with the wait: a few seconds of writes)."""
        interval = self.config.checkpoint_interval_ms / 1000
        wait = interval
        while True:
            await asyncio.sleep(wait)
            if self.durability.lost:  # the recovery point stays where every fsync succeeded (logged when lost)
                continue
            began = time.monotonic()
            try:
                least = self._least_bytes(thorough=False, now=time.monotonic())
                if least:  # (a thorough one puts the tails in its journal)
                    await self._write_tails(least)
                snap = self._snapshot(thorough=False)
                try:
                    await asyncio.to_thread(self._write_checkpoint, snap)
                except BaseException:
                    self._unflushed_again(snap)
                    raise
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("store background job checkpoint failed")
            took = time.monotonic() - began
            wait = max(interval, took / CHECKPOINT_DUTY - took)

    async def _clean_async(self) -> None:
        """Retention's tick: at a ``deleteWhen`` hour (the wall clock's local hour, as RocketMQ's), or at once when
        the disk is over ``diskMaxUsedSpaceRatio`` (``_writable`` also runs it then, between ticks)."""
        if time.localtime().tm_hour in self._delete_hours or self.group_commit.over_max_used:
            self.clean_expired_files()

    async def shutdown(self) -> None:
        """Stop background work, flush everything, write the checkpoint, remove the abort file, close. Once begun it
        runs to its end: cancelled meanwhile, however often (a timeout around a broker's stop, then the loop ending),
        the caller waits for the store to close and the cancel is raised after; a second call waits for the first's
        close too. Stopping half way left the flush thread running and the files open, and a second call returned
        before the store was closed."""
        if self._closing is None:
            if not self._open:
                return
            self._open = self.group_commit.open = False
            self._closing = asyncio.ensure_future(self._close())
        await run_to_end(self._closing)

    async def _close(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks = []
        if self._flush_service is not None:
            await asyncio.to_thread(self._flush_service.stop_thread)
            self._flush_service.close()
            self._flush_service = self.group_commit.flush_service = None
        try:
            self._checkpoint_now()
            os.unlink(self._abort_path)
            fsync_dir(self.config.store_path_root_dir)
        except (OSError, StoreError) as exc:  # a full disk: the abort file stays, the next open recovers after a crash
            log.error("the final checkpoint failed: %s; the next open recovers from the last one", exc)
        finally:
            self._close_files()

    async def aclose(self) -> None:
        await self.shutdown()

    async def __aenter__(self) -> DefaultMessageStore:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def close_without_shutdown(self) -> None:
        """Close files as a crash would: no flush, no checkpoint, the abort file stays (tests, tools)."""
        if self._flush_service is not None:
            self._flush_service.stop_thread()
            self._flush_service.close()
            self._flush_service = self.group_commit.flush_service = None
        for task in self._tasks:
            task.cancel()
        self._open = self.group_commit.open = False
        with self._checkpoint_lock:  # a checkpoint running in a worker thread still uses the files
            self._close_files(crash=True)

    def _close_files(self, *, crash: bool = False) -> None:
        """Close every file; ``crash``: the consume queues' buffered entries are lost, as a crash loses them."""
        self.commit_log.close()
        for cq in self.queues.all():
            cq.close(write=not crash)
        self.index.close()
        os.close(self._lock_fd)  # releases the flock

    def _check_open(self) -> None:
        if not self._open:
            raise StoreError("the store is shut down")

    # --- checkpoint --------------------------------------------------------------------------------

    def _least_bytes(self, *, thorough: bool, now: float) -> int:
        """What a queue must have put since its last fsync for this checkpoint to flush it: 0 (all) when
        ``thorough`` or when ``flushConsumeQueueThoroughInterval`` has passed."""
        if thorough or (now - self._thorough_at) * 1000 >= self.config.flush_consume_queue_thorough_interval_ms:
            return 0
        return self.config.flush_consume_queue_least_pages * PAGE_SIZE

    def _to_flush(self, least: int) -> list[ConsumeQueue]:
        """The queues a checkpoint that writes their tails flushes: those due when ``least`` is not 0 (kept as they
        become due: ``ConsumeQueueStore.due``), so that a periodic checkpoint's walk follows what was written
        enough, not how many queues have entries unflushed; else every pending one and every queue with a tail
        (those only in the tails journal, which the new document will not name)."""
        queues = self.queues
        if least:
            return list(queues.due)
        return list(queues.pending) + [cq for cq in queues.tails if cq not in queues.pending]

    async def _write_tails(self, least: int) -> None:
        """Before a periodic checkpoint, write the tails of the queues it will flush a batch at a time, letting the
        loop serve between batches: at 80,000 queues a thorough checkpoint has as many tails to write, seconds of
        the loop thread's time in one go. (Its snapshot writes what was put meanwhile.)"""
        for n, cq in enumerate([cq for cq in self._to_flush(least) if cq.tail is not None]):
            if n % TAILS_PER_TURN == TAILS_PER_TURN - 1:
                await asyncio.sleep(0)
            if cq.tail is not None:  # (not written meanwhile, nor dropped with its topic)
                with contextlib.suppress(OSError):  # a full disk: the snapshot leaves the queue unflushed
                    cq.write_tail()

    def _snapshot(self, *, thorough: bool = True, below: int | None = None) -> _Snapshot:
        """What to make durable, and the checkpoint that says so (loop thread). Not ``thorough``: consume queues
        with less than ``flushConsumeQueueLeastPages`` written are left, unless ``flushConsumeQueueThoroughInterval``
        has passed; the recovery point stays at or before the oldest entry left, and the checkpoint counts each
        left queue's entries up to it (recovery compares these counts with the files to notice lost ones). The
        queues to flush, the oldest entry left and the counts are kept as queues change (``ConsumeQueueStore``), so
        a periodic checkpoint costs what was written enough to flush, not a walk over every queue with entries.
        ``below``: the recovery point at or below that commit-log offset, each queue counted up to its first entry
        pointing there (a truncation's checkpoint, written before the log is cut back there)."""
        now = time.monotonic()
        least = self._least_bytes(thorough=thorough, now=now)
        journaled = least == 0 and not thorough and below is None  # the periodic thorough one: a tails journal
        if least == 0:
            self._thorough_at = now
            self._counters["thorough_checkpoints"] += 1  # taken: every queue's entries made durable
        self._snapshots_taken += 1
        snap = _Snapshot(Checkpoint(), index_files=self.index.dirty_files(), earlier=list(self._in_flight),
                         seq=self._snapshots_taken)
        self._in_flight.append(snap)
        unwritten: OSError | None = None
        queues = self.queues
        # One pass over the queues taken (at 80,000 queues each visit of a queue costs a µs or two in memory reads)
        for cq in queues.pending if journaled else self._to_flush(least):
            if journaled:
                if cq.flush_due and cq.tail is not None:  # cut back since its last fsync (a truncation, recovery's):
                    with contextlib.suppress(OSError):  # its file is fsynced holding the tail, never below a count
                        cq.write_tail()  # the document on disk has while this one is not written yet
                files, state = cq.take_unflushed()
                queues.flushed(cq, forget=False)
            else:
                try:
                    files, state = cq.take_flush()
                except OSError as exc:  # its tail could not be written (a full disk)
                    unwritten = exc
                    if least or below is not None:  # left unflushed, the recovery point before it (a truncation's
                        continue  # checkpoint is refused below)
                    files, state = cq.take_unflushed()  # taken as a journal takes it: its tail goes in one (below)
                    queues.flushed(cq)
            if files:
                snap.cq_files += files
            snap.cq_flushed.append((cq, state))
            segments = cq.opened_files
            if segments is not None and segments.directory_dirty:
                snap.cq_dirs.append(segments)
        if journaled:
            queues.forget_all()
        if below is not None and unwritten is not None:  # a truncation writes every tail, or cuts nothing
            snap.failed = True
            self._dirty_again(snap)
            self._unflushed_again(snap)
            raise unwritten
        if journaled or (least == 0 and unwritten is not None):
            # A new journal: every tail (a checkpoint that writes them all but could not write some: those then, as
            # they are now; never an older journal, which may hold entries cut or dropped since)
            self._tails_seq += 1
            self._tails = tail_journal.TailJournal(self._tails_seq, tail_journal.encode(self.queues.tails))
        elif least == 0:  # every tail written and flushed: no journal needed
            self._tails = None
        snap.tails, snap.journals_upto = self._tails, self._tails_seq
        oldest = self.queues.oldest_unflushed()
        recovery = self.commit_log.max_offset if oldest is None else min(oldest, self.commit_log.max_offset)
        snap.checkpoint = Checkpoint(
            recovery_offset=recovery if below is None else min(recovery, below),
            written_at_ms=self.clock.wall_ms(),
            # Below a cut, the last record's stamp is a dropped one's: the one before the recovery point is not known
            # (0), and the first record a slave copies there after a crash is marked, not compared with it
            last_store_timestamp=self.commit_log.last_store_timestamp if below is None else 0,
            # encoded below, while the loop thread holds still
            queues=self.queues.counts if below is None else self.queues.counts_below(below),
            index_files=self.index.names(),
            tails=snap.tails.seq if snap.tails is not None else None,
        )
        snap.document = self.checkpoint.encode(snap.checkpoint)
        if unwritten is not None:
            log.error("checkpoint: consume-queue entries could not be written (%s); their queues stay unflushed and "
                      "the recovery point before them", unwritten)
        return snap

    def _write_checkpoint(self, snap: _Snapshot) -> None:
        """Make the snapshot durable: commit log, then derived files, then the checkpoint (any thread). A failed
        fsync loses durability: this checkpoint and every later one raise, the one on disk stays."""
        with self._checkpoint_lock:
            if snap.seq < self._written_seq:  # a later checkpoint's document is on disk, and made these durable
                snap.done = True
                self._in_flight.remove(snap)
                snap.release()
                return
            # Earlier snapshots whose workers have not run yet: this document claims their queues flushed too.
            claimed = [snap, *(s for s in snap.earlier if not s.done and not s.failed)]
            try:
                self.commit_log.flush()  # raises once durability is lost
                # The journal before the queues' fsyncs: one that cannot be written (a full disk) leaves their files
                # as the document on disk counts them, not fsynced cut back (a truncation recovery made) below it
                if snap.tails is not None:
                    snap.tails.write(self.config.store_path_root_dir)
                with self._files_lock:
                    self._fsync_queues([mf for s in claimed for mf in s.cq_files],
                                       [files for s in claimed for files in s.cq_dirs])
                    for s in claimed:
                        for f in s.index_files:
                            with self.durability.fsyncing(f.path):
                                f.flush()
                if any(s.failed for s in snap.earlier):
                    log.warning("checkpoint not written: an earlier one failed, and the queues it took are not "
                                "counted here as unflushed; the one on disk stays")
                    self._in_flight.remove(snap)
                    return
                # The clock file first: its marks of the records before the recovery point are read again by no
                # recovery (a mark whose save failed, a full disk, is kept in memory and saved here)
                self.clock.save()
                self.checkpoint.write_document(snap.document)
            except BaseException:
                snap.failed = True
                self._dirty_again(snap)
                # A job cancelled while this ran put its queues back already, before their files were dirty again:
                # a checkpoint taken since took those queues without them; they are put back again
                snap.put_back = False
                raise
            for s in claimed:
                s.done = True
            self._written_seq = snap.seq
            self._in_flight.remove(snap)
            self._checkpoint_offset = snap.checkpoint.recovery_offset
            self._counters["checkpoints"] += 1
            # The journals before the one this document names (all it knew of, when it names none) are stale; not
            # the one a later snapshot names, which may be on disk already
            current = self._tails
            tail_journal.remove_below(self.config.store_path_root_dir,
                                      snap.journals_upto + 1 if snap.tails is None else snap.tails.seq,
                                      keep=current.seq if current is not None else None)
            for s in claimed:
                s.release()

    def _fsync_queues(self, cq_files: list[MappedFile], cq_dirs: list[MappedFileQueue]) -> None:
        """Make consume-queue files and directories durable: one ``syncfs`` past ``SYNCFS_ABOVE`` of them, else an
        fsync each (the caller holds ``_files_lock``)."""
        synced = len(cq_files) + len(cq_dirs) > SYNCFS_ABOVE
        durability = self.durability
        if synced:
            with durability.fsyncing(f"the file system of {self.config.store_path_root_dir}"):
                syncfs(self.config.store_path_root_dir)
        else:
            for mf in cq_files:
                with durability.fsyncing(mf.path):
                    mf.flush()
        for files in cq_dirs:
            if os.path.isdir(files.directory):  # not a queue deleted since the snapshot
                with durability.fsyncing(files.directory):
                    files.sync_directory(synced=synced)

    @staticmethod
    def _dirty_again(snap: _Snapshot) -> None:
        """A snapshot not made durable: the files it took are fsynced by the next checkpoint."""
        for mf in snap.cq_files:
            mf.dirty = True
        for files in snap.cq_dirs:
            files.directory_dirty = True
        for f in snap.index_files:
            f.dirty = True

    def _checkpoint_now(self, below: int | None = None) -> None:
        """A checkpoint that flushes every consume queue, on the calling (loop) thread, on disk when this returns
        (its callers rely on it: a deletion, a truncation, shutdown). ``below``: its recovery point at or below that
        commit-log offset (``_snapshot``). An earlier checkpoint that failed and is not put back yet (its worker
        failed while this waited for it, or before the loop resumed the job that took it) would keep this one's
        document from being written: its queues are put back and this one is taken again; ``StoreError`` if it
        still is not written."""
        for _attempt in range(2):
            for earlier in [s for s in self._in_flight if s.failed]:
                self._unflushed_again(earlier)
            snap = self._snapshot(below=below)
            try:
                self._write_checkpoint(snap)
            except BaseException:
                self._unflushed_again(snap)
                raise
            if self._written_seq == snap.seq:
                return
        raise StoreError("no checkpoint could be written: an earlier checkpoint failed")

    def _unflushed_again(self, snap: _Snapshot) -> None:
        """A checkpoint failed: the queues it took count as unflushed again (loop thread: put_run marks them too),
        by whoever notices first (the job that took it, or a later ``_checkpoint_now``): marked again later, after a
        checkpoint that flushed them, their state would be a stale one. Again only when the worker failed after a
        cancelled job had put them back (``_write_checkpoint`` clears ``put_back``). Not a queue dropped meanwhile (a
        deleted topic): the next checkpoints would list it and hold their recovery point at its entries, and
        recovery would rebuild it from the log. Until this has run, checkpoints taken after ``snap`` are not written
        (``_Snapshot.earlier``); one cancelled while its worker still runs stays in flight until that worker is
        done."""
        if not snap.put_back:
            snap.put_back = True
            for cq, (first, phy, due) in snap.cq_flushed:
                if self.queues.find(cq.topic, cq.queue_id) is cq:
                    # Its entries from ``first`` as they are now: cut since (a put taken back, a truncation), the
                    # offset taken may be inside a record of other sizes written there
                    if first is not None and first >= cq.max_offset:
                        first, due = None, True  # all of them cut: the cut is due
                    elif first is not None:
                        phy = (cq.entry(first) or (phy,))[0]
                    cq.mark_unflushed(first, phy, due)
        if snap.failed and snap in self._in_flight:  # not a checkpoint cancelled while its worker still runs
            self._in_flight.remove(snap)

    def flush_and_checkpoint(self) -> int:
        """Flush everything and write a checkpoint now, on the calling thread; return the recovery point."""
        self._check_open()
        self._checkpoint_now()
        return self._checkpoint_offset

    # --- put ---------------------------------------------------------------------------------------

    def put_message(self, msg: MessageExt, answer: Callable[[PutMessageResult], Any] | None = None,
                    waiter: Waiter | None = None) -> Any:
        return self.put_messages([msg], answer, waiter)

    def put_messages(self, msgs: list[MessageExt], answer: Callable[[PutMessageResult], Any] | None = None,
                     waiter: Waiter | None = None) -> Any:
        """Append ``msgs`` as one all-or-nothing put, in this loop iteration's group (``GroupCommit.put_messages``
        says what it answers and when)."""
        return self.group_commit.put_messages(msgs, answer, waiter)

    @property
    def replica(self) -> bool:
        """A replica's store takes only what its master streams (``append_replicated``); set by whoever knows the
        role."""
        return self.group_commit.replica

    @replica.setter
    def replica(self, value: bool) -> None:
        self.group_commit.replica = value

    @property
    def replicate(self) -> Callable[[int], asyncio.Future[PutMessageStatus]] | None:
        """SYNC_MASTER's wait: a future of a put's status once enough slaves have the log up to an offset; set by
        whoever composes the store with its HA service."""
        return self.group_commit.replicate

    @replicate.setter
    def replicate(self, value: Callable[[int], asyncio.Future[PutMessageStatus]] | None) -> None:
        self.group_commit.replicate = value

    @property
    def answer_batch(self) -> Callable[[], AbstractContextManager[Any]]:
        """What a written group's answers, and its arrival notices (the held pulls they wake answer then), are given
        inside (``contextlib.nullcontext`` by default); set by whoever writes the answers out (the broker: its
        transport's write batch, so those to one connection leave together at once)."""
        return self.group_commit.answer_batch

    @answer_batch.setter
    def answer_batch(self, value: Callable[[], AbstractContextManager[Any]]) -> None:
        self.group_commit.answer_batch = value

    # --- replication (a slave's side, replica.py; the network's is txmq.store.ha) -------------------------

    def append_replicated(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """A master's records from ``offset`` appended and dispatched (``ReplicaLog.append``), inside one answer
        batch: the held pulls their arrival wakes (a slave serving reads) are answered one write per connection."""
        self._check_open()
        with self.group_commit.answer_batch():
            return self.replica_log.append(offset, data)

    def truncate_replicated(self, offset: int) -> None:
        """The log cut back to ``offset``, where its master's ends (``ReplicaLog.truncate``)."""
        self._check_open()
        self.replica_log.truncate(offset)

    def start_replica_at(self, offset: int) -> None:
        """An empty slave's log starts where its master's does (``ReplicaLog.start_at``)."""
        self.replica_log.start_at(offset)

    def add_truncate_listener(self, fn: Callable[[int], None]) -> None:
        """``fn(offset)`` after ``truncate_replicated`` dropped the log from ``offset`` on: state derived from the
        dropped records must be rebuilt (a slave's transaction table)."""
        self.replica_log.truncate_listeners.append(fn)

    def add_append_listener(self, fn: Callable[[int], None]) -> None:
        """``fn(new end of the log)`` after each put, on the loop thread (a master's HA connections)."""
        self.group_commit.append_listeners.append(fn)

    def remove_append_listener(self, fn: Callable[[int], None]) -> None:
        """Stop calling ``fn`` (an HA service shut down when its master stepped down)."""
        with contextlib.suppress(ValueError):
            self.group_commit.append_listeners.remove(fn)

    @property
    def confirm_offset(self) -> int | None:
        """RocketMQ's confirmOffset: consumers read records up to it (None: up to the log's end)."""
        return self.confirm.offset

    def set_confirm_offset(self, offset: int | None) -> None:
        """Bound consumers' reads at ``offset`` (``ConfirmOffset.set``); the held pulls a rise wakes are answered
        inside one answer batch."""
        with self.group_commit.answer_batch():
            self.confirm.set(offset, self.commit_log.max_offset, self.queues.next_offsets)

    # --- get ---------------------------------------------------------------------------------------

    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int = 32,
        max_total_bytes: int = 256 * 1024,
        tags_filter: Callable[[int], bool] | None = None,
        *,
        confirmed: bool = False,
        record_filter: Callable[[bytes], bool] | None = None,
    ) -> GetMessageResult:
        """Up to ``max_msg_nums`` messages from queue offset ``offset`` in wire form (RocketMQ getMessage).

        ``tags_filter`` gets each entry's tag hash (RocketMQ's ``isMatchedByConsumeQueue``), ``record_filter``
        each read record in wire form (``isMatchedByCommitLog``, a SQL92 filter on its properties): what either
        refuses is passed over, never returned; ``record_filter`` runs for at most about ``MAX_FILTER_SECONDS``,
        then the answer has what it found and the offset it reached. A record that fails validation is skipped,
        logged and counted; it is never returned. ``confirmed`` (a consumer's read): only records up to the confirm
        offset; an offset among the entries past it is answered OFFSET_OVERFLOW_ONE (not there yet), never moved.
        """
        self._check_open()
        cq = self.queues.find(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE)
        lo, hi = cq.min_offset, cq.max_offset
        top = self.confirm.confirmed_max(cq) if confirmed else hi
        result = GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, min_offset=lo, max_offset=top)
        if hi == 0:
            result.next_begin_offset = 0
        elif offset < lo:
            result.status, result.next_begin_offset = GetMessageStatus.OFFSET_TOO_SMALL, lo
        elif top <= offset <= hi:
            result.status, result.next_begin_offset = GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
        elif offset > hi:
            result.status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
            result.next_begin_offset = lo if lo == 0 else top
        else:
            self._read_queue(cq, offset, top, max_msg_nums, max_total_bytes, tags_filter, record_filter, result)
        return result

    def _read_queue(
        self,
        cq: ConsumeQueue,
        offset: int,
        top: int,
        max_msg_nums: int,
        max_total_bytes: int,
        tags_filter: Callable[[int], bool] | None,
        record_filter: Callable[[bytes], bool] | None,
        result: GetMessageResult,
    ) -> None:
        min_phy = self.commit_log.min_offset
        budget = max(max_msg_nums, MAX_FILTER_ENTRIES)
        status = GetMessageStatus.OFFSET_FOUND_NULL
        total = 0
        last_phy = 0
        pos = offset
        # the clock is read only for a SQL92 filter's bound: an unfiltered pull pays nothing for it
        deadline = time.monotonic() + MAX_FILTER_SECONDS if record_filter is not None else 0.0
        while budget > 0 and len(result.messages) < max_msg_nums:
            raw = cq.read_entries(pos, min(budget, top - pos))
            if not raw:
                break
            stop = False
            picked: list[tuple[int, int, int]] = []  # (queue offset, commit-log offset, size) of records to send
            for i in range(0, len(raw), CQ_ENTRY_SIZE):
                phy, size, tag = CQ_ENTRY.unpack_from(raw, i)
                if size <= 0 or phy < min_phy:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                elif tags_filter is not None and not tags_filter(tag):
                    if status is not GetMessageStatus.MESSAGE_WAS_REMOVING:
                        status = GetMessageStatus.NO_MATCHED_MESSAGE
                elif (result.messages or picked) and total + size - TRAILER_SIZE > max_total_bytes:
                    stop = True
                    break
                else:
                    picked.append((pos, phy, size))
                    total += size - TRAILER_SIZE
                pos += 1
                budget -= 1
                if len(result.messages) + len(picked) >= max_msg_nums:
                    break
            if picked:
                before = len(result.messages)
                if not self._read_picked(cq, picked, result):  # skipped unreadable records: look further
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    total = sum(map(len, result.messages))
                if record_filter is not None and self._filter_records(result, before, record_filter):
                    total = sum(map(len, result.messages))
                    if status is not GetMessageStatus.MESSAGE_WAS_REMOVING:
                        status = GetMessageStatus.NO_MATCHED_MESSAGE
                last_phy = picked[-1][1]
            if stop or (record_filter is not None and time.monotonic() > deadline):
                break
        result.status = GetMessageStatus.FOUND if result.messages else status
        result.next_begin_offset = pos
        if result.messages:
            behind = self.commit_log.max_offset - last_phy
            result.suggest_pulling_from_slave = behind > _MEMORY * self.config.access_message_in_memory_max_ratio // 100

    @staticmethod
    def _filter_records(result: GetMessageResult, start: int, record_filter: Callable[[bytes], bool]) -> int:
        """Drop the records read from ``start`` on that ``record_filter`` refuses; how many it dropped."""
        read = result.messages[start:]
        keep = [record_filter(m) for m in read]
        if all(keep):
            return 0
        offsets = result.queue_offsets[start:]
        result.messages[start:] = [m for m, k in zip(read, keep, strict=True) if k]
        result.queue_offsets[start:] = [o for o, k in zip(offsets, keep, strict=True) if k]
        return len(read) - len(result.messages) + start

    def _read_picked(self, cq: ConsumeQueue, picked: list[tuple[int, int, int]], result: GetMessageResult) -> bool:
        """Read the picked records into ``result`` in wire form: each run of records that follow one another in
        the commit log (a batch, or a queue written alone) with one read. A run that fails (or spans two
        segments) is read record by record, and an unreadable record is skipped, logged and counted; returns False
        when one was."""
        whole = True
        start = 0
        for i in range(1, len(picked) + 1):
            if i < len(picked) and picked[i][1] == picked[i - 1][1] + picked[i - 1][2]:
                continue
            run = picked[start:i]
            start = i
            try:
                records = self.commit_log.read_run(run[0][1], [size for _, _, size in run])
            except StoreError:
                pass
            else:
                result.messages += map(to_wire, records)
                result.queue_offsets += (pos for pos, _, _ in run)
                continue
            for pos, phy, size in run:
                try:
                    wire = to_wire(self.commit_log.read(phy, size))
                except StoreError as exc:
                    self._counters["corrupt_reads"] += 1
                    log.error("%s/%d offset %d: skipping unreadable record: %s", cq.topic, cq.queue_id, pos, exc)
                    whole = False
                else:
                    result.messages.append(wire)
                    result.queue_offsets.append(pos)
        return whole

    def read_record(self, commit_log_offset: int) -> bytes:
        """The record at ``commit_log_offset`` in wire form.

        Raises ``StoreError`` for an offset outside the log, ``CorruptRecordError`` for a record that fails
        validation (magic, size, trailer CRC).
        """
        self._check_open()
        try:
            return to_wire(self.commit_log.read(commit_log_offset))
        except CorruptRecordError:
            self._counters["corrupt_reads"] += 1
            raise

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt:
        """The decoded message at ``commit_log_offset``; raises like ``read_record``."""
        return decode_message(self.read_record(commit_log_offset))[0]

    # --- queue metadata ----------------------------------------------------------------------------

    def get_max_offset_in_queue(self, topic: str, queue_id: int, *, confirmed: bool = False) -> int:
        """The queue's next offset; ``confirmed`` (what consumers are told): counting only records up to the
        confirm offset."""
        cq = self.queues.find(topic, queue_id)
        if cq is None:
            return 0
        return self.confirm.confirmed_max(cq) if confirmed else cq.max_offset

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.find(topic, queue_id)
        return cq.min_offset if cq else 0

    def get_queue_entries(self, topic: str, queue_id: int, offset: int, count: int) -> list[tuple[int, int, int]]:
        """The (commit-log offset, size, tag hash) entries of the queue from ``offset``, at most ``count``, as the
        queue holds them (buffered ones included; mqadmin ``queryCq``): none below its min offset."""
        cq = self.queues.find(topic, queue_id)
        if cq is None or offset < cq.min_offset:
            return []
        end = min(cq.max_offset, offset + count)
        parts: list[bytes] = []
        while offset < end:  # a read stops at a segment's end and at the start of the buffered tail
            chunk = cq.read_entries(offset, end - offset)
            whole = len(chunk) // CQ_ENTRY_SIZE
            if whole == 0:
                break
            parts.append(chunk[: whole * CQ_ENTRY_SIZE])
            offset += whole
        return list(CQ_ENTRY.iter_unpack(b"".join(parts)))

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.queues.find(topic, queue_id)
        entry = cq.entry(cq_offset) if cq and cq.min_offset <= cq_offset < cq.max_offset else None
        return entry[0] if entry else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int, *,
                                    confirmed: bool = False) -> int:
        """First queue offset whose message was stored at or after ``timestamp_ms``; max offset if none.
        ``confirmed`` (a consumer's start): no further than the records up to the confirm offset."""
        cq = self.queues.find(topic, queue_id)
        if cq is None:
            return 0
        if confirmed:
            return min(self.get_offset_in_queue_by_time(topic, queue_id, timestamp_ms), self.confirm.confirmed_max(cq))

        def store_time(phy: int) -> int:
            try:
                return self.commit_log.read_store_timestamp(phy)
            except StoreError:
                return -1

        return cq.offset_by_time(timestamp_ms, store_time, self.clock.steps_back())

    def topics(self) -> set[str]:
        return self.queues.topics()

    def queue_ids(self, topic: str) -> list[int]:
        return self.queues.queue_ids(topic)

    def delete_topic(self, topic: str) -> None:
        """Drop the topic's consume queues; its records age out of the commit log by retention. Raises
        ``StoreError`` for a name that is not a topic directory's."""
        self._drop_topics([topic])

    def clean_unused_topic(self, retain: Collection[str]) -> list[str]:
        """Drop the consume queues of every topic neither in ``retain`` (the broker's topic table) nor a system
        topic (RocketMQ's ``cleanUnusedTopic``): queues a deleted topic left, which would otherwise serve its old
        messages once a topic of that name is created again. The topics dropped, sorted."""
        unused = sorted(t for t in self.queues.topics() if t not in retain and not is_system_topic(t))
        if unused:
            self._drop_topics(unused)
        return unused

    def _drop_topics(self, topics: list[str]) -> None:
        """Drop the topics' queues and directories, durably: recovery must not find them listed."""
        directories = [topic_directory(self.config.store_path_root_dir, topic) for topic in topics]
        for topic, directory in zip(topics, directories, strict=True):
            for qid in self.queues.queue_ids(topic):
                self.queues.drop(topic, qid)
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        # The removals made durable (a directory entry's removal is durable once its directory is fsynced): else a
        # power loss could bring a queue's directory back with its files, for recovery to load as a queue the
        # checkpoint does not list: the deleted topic back with its messages
        try:
            for directory in [*directories, os.path.dirname(directories[0])]:
                if os.path.isdir(directory):  # (a topic's left when something else in it stayed)
                    with self.durability.fsyncing(directory):
                        fsync_dir(directory)
        except OSError as exc:
            if exc.errno not in NO_DESCRIPTOR:
                raise  # durability is lost (``fsyncing``): no checkpoint is written again until a restart
            log.warning("the directories of deleted topics %s not fsynced (%s): their removal is durable once the "
                        "file system commits it", topics, exc)
        # The checkpoint lists queues so recovery can rebuild lost ones: it must forget these now.
        self._checkpoint_now()

    # --- query by key ------------------------------------------------------------------------------

    def query_message(
        self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0, end_ts: int = 2**63 - 1
    ) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS contain ``key`` or whose UNIQ_KEY is ``key``, newest first."""
        self._check_open()
        out: list[MessageExt] = []
        for phy in self.index.lookup(topic, key, max_num):
            try:
                msg = self.look_message_by_offset(phy)
            except StoreError:
                continue  # a stale entry (truncated tail, deleted segment) or a hash collision's debris
            keys = (msg.keys or "").split(MessageConst.KEY_SEPARATOR)
            uniq = msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            if msg.topic != topic or (key not in keys and uniq != key):
                continue
            if begin_ts <= msg.store_timestamp <= end_ts:
                out.append(msg)
                if len(out) >= max_num:
                    break
        return out

    # --- retention ---------------------------------------------------------------------------------

    def clean_expired_files(self, elapsed_ms: int | None = None) -> int:
        """Delete the commit-log segments whose newest record is older than ``file_reserved_time_hours`` by the
        elapsed-time account (``clock``; ``elapsed_ms``: the account's reading to judge by), then the derived
        files that only point at them; return how many segments went. Never the active segment, never a segment
        that reaches the checkpoint's recovery point. A segment's newest record is no younger than the next
        segment's first, so that one's age stands for it: one record read per segment, and a segment never goes
        while anything in it may be younger than the reserved time, whatever the wall clock did."""
        now = self.clock.elapsed_ms() if elapsed_ms is None else elapsed_ms
        reserved_ms = self.config.file_reserved_time_hours * 3600 * 1000
        limit = min(self._checkpoint_offset, self.commit_log.flushed_offset)
        files = self.commit_log.queue.files
        doomed: list[MappedFile] = []
        for mf, following in itertools.pairwise(files):
            if mf.end_offset > limit:
                break
            start = following.file_from_offset
            try:
                self.commit_log.read(start)  # a whole record, validated, before its stamp is believed
                stamped = self.commit_log.read_store_timestamp(start)
            except StoreError:
                break  # unreadable: it says nothing of its age, so nothing before it goes
            if now - self.clock.elapsed_of(start, stamped) <= reserved_ms:
                break
            doomed.append(mf)
        if not doomed:
            return 0
        self.commit_log.queue.delete_files(doomed)
        min_phy = self.commit_log.min_offset
        self.clock.trim(min_phy)
        log.info("retention deleted %d commit-log segments; the log now starts at %d", len(doomed), min_phy)
        with self._files_lock:
            trimmed = [cq for cq in self.queues.all() if cq.delete_expired_files(min_phy)]
            self.index.delete_expired_files(min_phy)
            # A trimmed queue's files left made durable now: were its newest one (made since the last checkpoint)
            # lost with the power, the queue would hold fewer entries than the checkpoint counts and be rebuilt
            segments = [cq.opened_files for cq in trimmed if cq.opened_files is not None]
            self._fsync_queues([mf for files in segments for mf in files.files], segments)
        return len(doomed)

    # --- metrics -----------------------------------------------------------------------------------

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.commit_log.flushed_offset

    @property
    def last_store_timestamp(self) -> int:
        return self.commit_log.last_store_timestamp

    @property
    def checkpoint_offset(self) -> int:
        return self._checkpoint_offset

    def runtime_info(self) -> dict[str, int | float]:
        fsyncs = self.commit_log.fsyncs
        info: dict[str, int | float] = dict(self._counters)
        info.update(
            fsyncs=fsyncs,
            records_per_fsync=self._counters["appends"] / fsyncs if fsyncs else 0.0,
            flush_errors=self._flush_service.errors if self._flush_service else 0,
            max_offset=self.commit_log.max_offset,
            min_offset=self.commit_log.min_offset,
            flushed_offset=self.commit_log.flushed_offset,
            checkpoint_offset=self._checkpoint_offset,
            segments=len(self.commit_log.queue.files),
            consume_queues=len(self.queues),
            index_files=len(self.index.files),
            disk_used_percent=round(self.group_commit.disk.used, 1),  # as last measured by a put
            disk_full=int(self.group_commit.disk.full),  # puts are refused (docs/storage.md, "A full disk")
            durability_lost=int(self.durability.lost),  # an fsync failed: restart (docs/storage.md, "A failed fsync")
        )
        return info
