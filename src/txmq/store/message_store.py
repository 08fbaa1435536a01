"""DefaultMessageStore: the facade the broker calls (RocketMQ ``DefaultMessageStore``).

Every public method runs on the asyncio loop thread. Appends write the commit log and dispatch to the
consume queue, the index and the extra dispatchers before ``put_message`` returns; two threads make things
durable: the commit-log flush thread (``flush.py``) and, every ``checkpoint_interval_ms``, a worker that
fsyncs consume queues and index files and then writes the checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import functools
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import cython

from txmq.errors import CorruptRecordError, InvalidMessageError, StoreError
from txmq.message import (
    MessageConst,
    MessageExt,
    create_offset_msg_id,
    decode_message,
)
from txmq.store.checkpoint import Checkpoint, StoreCheckpoint
from txmq.store.clock import StoreClock
from txmq.store.commit_log import CommitLog
from txmq.store.config import FlushDiskType, StoreConfig, delete_hours
from txmq.store.consume_queue import CQ_ENTRY, CQ_ENTRY_SIZE, ConsumeQueue, topic_directory, valid_topic_directory
from txmq.store.disk import DiskGuard
from txmq.store.dispatcher import (
    DispatchRequest,
    builds_consume_queue,
    builds_index,
    keys_of,
    request_from_record,
    tags_code,
)
from txmq.store.flush import FlushCommitLogService
from txmq.store.index import IndexFile, IndexService
from txmq.store.mapped_file import MappedFile, MappedFileQueue, fsync_dir
from txmq.store.record import BLANK_SIZE, TRAILER_SIZE, encode_record, to_wire
from txmq.store.recovery import RecoveryReport, recover
from txmq.store.results import (
    AppendMessageResult,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)

log = logging.getLogger("txmq.store")

DISK_CHECK_INTERVAL_S = 0.1  # puts measure the disk at most this often (one statvfs)
EARLY_CLEAN_INTERVAL_S = 1.0  # retention runs at most this often on behalf of a disk over diskMaxUsedSpaceRatio
_MEMORY = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # RocketMQ TOTAL_PHYSICAL_MEMORY_SIZE
MAX_FILTER_ENTRIES = 800  # entries one get_message looks at when filtering (RocketMQ maxFilterMessageCount/20)
MAX_HELD_ARRIVALS = 4096  # arrivals held for the confirm offset; more are merged into the newest (woken later)
# Read for every stored message: module constants, not class attributes.
_TAGS = MessageConst.TAGS
_KEYS = MessageConst.KEYS
_UNIQ_KEY = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
# Read for every group: module constants, not enum member reads (EnumType's __getattr__ hook, 70-125 ns each).
_PUT_OK = PutMessageStatus.PUT_OK
_SYNC_FLUSH = FlushDiskType.SYNC_FLUSH


class Waiter(Protocol):
    """What a put resolves: an ``asyncio.Future`` by default, or the caller's own object with a future's methods
    (the transport's ``Reply``, which writes a send's answer itself: no future and no callback per send)."""

    def done(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def cancel(self) -> bool: ...
    def set_result(self, value: Any) -> None: ...
    def set_exception(self, exc: BaseException) -> None: ...


@cython.freelist(64)  # one per put
@cython.cclass
class _Put:
    """One put waiting in the loop iteration's group: where its messages (and their encoded records) start in the
    group's lists and how many, their bytes, its future (or the caller's waiter), the caller's ``answer``
    (``put_messages``) and, once written, its ``AppendMessageResult``. One object per put that lives until the
    flush: no lists of its own and no tuple with its result (each a container the cyclic collector walks). Compiled,
    an extension type (message_store.pxd) whose fields the group's loops read as C struct members."""

    __slots__ = ("answer", "appended", "count", "first", "future", "wrote")

    def __init__(self, first: int, count: int, wrote: int, future: Waiter,
                 answer: Callable[[PutMessageResult], Any] | None) -> None:
        self.first = first
        self.count = count
        self.wrote = wrote
        self.future = future
        self.answer = answer
        self.appended: AppendMessageResult | None = None

    def settle(self, result: PutMessageResult) -> None:
        _settle(self.future, self.answer, result)


def _settle(fut: Waiter, answer: Callable[[PutMessageResult], Any] | None,
            result: PutMessageResult) -> None:
    """Resolve a put's future with ``answer(result)`` (``result`` itself without an answer); an answer that raises
    fails the future, as an awaiting caller would have seen it. A future given up on (cancelled) is left alone,
    but its answer still runs: the put is stored all the same, and an answer may record it (a half's tracking)."""
    if fut.done():
        if answer is not None and fut.cancelled():
            try:
                answer(result)
            except Exception:
                log.exception("the answer to a put whose caller was gone failed")
        return
    if answer is None:
        fut.set_result(result)
        return
    try:
        value = answer(result)
    except Exception as exc:
        fut.set_exception(exc)
        return
    fut.set_result(value)


@cython.locals(put=_Put)
def _answer_durable(group: list[_Put], status: PutMessageStatus, remark: str = "") -> None:
    """Each put of a written group its result, with its own ``appended``."""
    for put in group:
        put.settle(PutMessageResult(status, put.appended, remark))


@cython.locals(put=_Put)
def _after_replication(group: list[_Put], fut: asyncio.Future[PutMessageStatus]) -> None:
    """A written (and flushed, if asked) group's replication is over: its status answers each put."""
    if fut.cancelled() or fut.exception() is not None:
        for put in group:
            waiter = put.future
            if waiter.done():
                continue
            if fut.cancelled():
                waiter.cancel()
            else:
                waiter.set_exception(fut.exception())  # type: ignore[arg-type]
        return
    _answer_durable(group, fut.result())


def _after_durable_flush(group: list[_Put], replicated: asyncio.Future[PutMessageStatus] | None) -> None:
    """A written group is flushed as its flush mode asks: answered now, or once its replication is over."""
    if replicated is not None:
        replicated.add_done_callback(functools.partial(_after_replication, group))
    else:
        _answer_durable(group, _PUT_OK)


@dataclass
class _Snapshot:
    """What a checkpoint makes durable, taken on the loop thread so it is consistent."""

    checkpoint: Checkpoint
    cq_files: list[MappedFile] = field(default_factory=list)
    cq_dirs: list[MappedFileQueue] = field(default_factory=list)  # queues that created or deleted files
    index_files: list[IndexFile] = field(default_factory=list)


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
        self.commit_log = CommitLog(root, config.mapped_file_size_commit_log)
        self.index = IndexService(root, config.max_hash_slot_num, config.max_index_num)
        self.checkpoint = StoreCheckpoint(root)
        self._queues: dict[str, dict[int, ConsumeQueue]] = {}
        self._queue_offsets: dict[tuple[str, int], int] = {}  # next queue offset (RocketMQ topicQueueTable)
        self._dispatchers: list[Callable[[DispatchRequest], None]] = list(dispatchers or [])
        self._late_dispatchers: list[Callable[[DispatchRequest], None]] = []
        self._arrival_listeners: list[Callable[[str, int, int], None]] = []
        self._append_listeners: list[Callable[[int], None]] = []
        self._truncate_listeners: list[Callable[[int], None]] = []
        # SYNC_MASTER (set by whoever composes the store with its HAService): a future of the put's status once
        # enough slaves have the log up to the given offset.
        self.replicate: Callable[[int], asyncio.Future[PutMessageStatus]] | None = None
        # A replica's store takes only what its master streams (append_replicated): a put of its own would make
        # its log differ from the master's at the same offsets. Set by whoever knows the role.
        self.replica = False
        # RocketMQ's confirmOffset (controller mode, set by txmq.store.ha): reads asked with ``confirmed=True`` get
        # only records that end at or before it (what every SyncStateSet member has), and arrival listeners hear of
        # a record once it does. None: no bound (outside controller mode).
        self._confirm_offset: int | None = None
        self._held_arrivals: deque[tuple[int, dict[tuple[str, int], int]]] = deque()  # (end, arrived) past it
        self._files_lock = threading.Lock()  # held while derived files are fsynced or deleted
        self._checkpoint_lock = threading.Lock()  # one checkpoint at a time; close waits for a running one
        self._last_store_ts = 0  # the store timestamp of the log's last record (not the highest: docs/reliability.md)
        # Wall-clock stamps, and the elapsed-time account every age counts on (first checks, delays, retention)
        self.clock = StoreClock(root)
        self._delete_hours = delete_hours(config.delete_when)
        self._checkpoint_offset = 0
        self._flush_service: FlushCommitLogService | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._open = True
        self._disk = DiskGuard(root, config.disk_space_warning_level_ratio, config.disk_space_clean_forcibly_ratio)
        self._disk_checked_at = -DISK_CHECK_INTERVAL_S
        self._early_clean_at = -EARLY_CLEAN_INTERVAL_S
        self._over_max_used = False
        self._counters = dict.fromkeys(
            ("put_calls", "put_groups", "appends", "dispatch_errors", "corrupt_reads", "checkpoints",
             "flush_timeouts"), 0
        )
        self._group: list[_Put] = []  # puts asked for in this loop iteration, written together (natural batching)
        self._group_msgs: list[MessageExt] = []  # their messages, in call order
        self._group_records: list[bytearray] = []  # and their encoded records
        self._group_offsets: dict[tuple[str, int], int] = {}  # next queue offsets counting the group's puts
        self._group_ts = 0  # the group's store timestamp
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

    def load_consume_queues(self) -> Iterator[tuple[ConsumeQueue, list[str]]]:
        base = os.path.join(self.config.store_path_root_dir, "consumequeue")
        if not os.path.isdir(base):
            return
        for topic in sorted(os.listdir(base)):
            if not os.path.isdir(os.path.join(base, topic)):
                continue
            for qid_name in sorted(os.listdir(os.path.join(base, topic))):
                if qid_name.isdigit():
                    cq = self.find_or_create_consume_queue(topic, int(qid_name))
                    yield cq, cq.load()

    def finish_recovery(self, cp: Checkpoint | None) -> None:
        """Rebuild the in-memory tables from the recovered files."""
        min_phy = self.commit_log.min_offset
        for cq in self.consume_queues():
            cq.correct_min_offset(min_phy)
            self._queue_offsets[(cq.topic, cq.queue_id)] = cq.max_offset
        self._checkpoint_offset = min(cp.recovery_offset if cp else 0, self.commit_log.max_offset)
        if not self._last_store_ts and cp is not None:  # no record after the checkpoint's
            self._last_store_ts = cp.last_store_timestamp
        self.clock.open(self.commit_log.max_offset)

    def consume_queues(self) -> Iterator[ConsumeQueue]:
        for qs in list(self._queues.values()):
            yield from list(qs.values())

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get(topic, {}).get(queue_id)

    def find_or_create_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            cq = ConsumeQueue(
                self.config.store_path_root_dir, topic, queue_id, self.config.mapped_file_size_consume_queue
            )
            self._queues.setdefault(topic, {})[queue_id] = cq
        return cq

    def drop_consume_queue(self, topic: str, queue_id: int) -> None:
        cq = self._queues.get(topic, {}).pop(queue_id, None)
        if cq is not None:
            with self._files_lock:
                cq.destroy()
        if topic in self._queues and not self._queues[topic]:
            del self._queues[topic]
        self._queue_offsets.pop((topic, queue_id), None)

    def dispatch(self, req: DispatchRequest, *, during_recovery: bool = False) -> None:
        """Run the dispatchers for one record recovery found (CommitLogDispatcher chain)."""
        if builds_consume_queue(req.sys_flag):
            cq = self.find_or_create_consume_queue(req.topic, req.queue_id)
            cq.put(req.consume_queue_offset, req.commit_log_offset, req.msg_size, req.tags_code)
        self._build_index(req.topic, req.sys_flag, req.keys, req.uniq_key, req.commit_log_offset, req.store_timestamp)
        self._notify_dispatchers(req)
        if during_recovery:
            self._last_store_ts = req.store_timestamp

    def _build_index(self, topic: str, sys_flag: int, keys: str | None, uniq_key: str | None, offset: int,
                     store_timestamp: int) -> None:
        if self.config.message_index_enable and builds_index(sys_flag):
            index_keys = keys_of(keys, uniq_key)
            if index_keys:
                self.index.put(topic, index_keys, offset, store_timestamp)

    def _notify_dispatchers(self, req: DispatchRequest) -> None:
        """The dispatchers beyond consume queue and index (the broker's): they see only stored records."""
        for fn in self._dispatchers:
            try:
                fn(req)
            except Exception:
                self._counters["dispatch_errors"] += 1
                log.exception("dispatcher %r failed on the record at %d", fn, req.commit_log_offset)

    # --- lifecycle ---------------------------------------------------------------------------------

    def add_dispatcher(self, fn: Callable[[DispatchRequest], None]) -> None:
        """Register a CommitLogDispatcher; before ``start()`` it also gets the records recovery dispatched."""
        self._dispatchers.append(fn)
        if not self._tasks:
            self._late_dispatchers.append(fn)

    def add_arrival_listener(self, fn: Callable[[str, int, int], None]) -> None:
        """``fn(topic, queue_id, new max offset)`` after each dispatch, on the loop thread (long polling)."""
        self._arrival_listeners.append(fn)

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
        self._tasks = [
            asyncio.create_task(self._every(self.config.checkpoint_interval_ms, self._checkpoint_async)),
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

    async def _clean_async(self) -> None:
        """Retention's tick: at a ``deleteWhen`` hour (the wall clock's local hour, as RocketMQ's), or at once when
        the disk is over ``diskMaxUsedSpaceRatio`` (``_writable`` also runs it then, between ticks)."""
        if time.localtime().tm_hour in self._delete_hours or self._over_max_used:
            self.clean_expired_files()

    async def shutdown(self) -> None:
        """Stop background work, flush everything, write the checkpoint, remove the abort file, close."""
        if not self._open:
            return
        self._open = False
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._flush_service is not None:
            await asyncio.to_thread(self._flush_service.stop_thread)
            self._flush_service.close()
            self._flush_service = None
        try:
            self._write_checkpoint(self._snapshot())
            os.unlink(self._abort_path)
            fsync_dir(self.config.store_path_root_dir)
        except OSError as exc:  # a full disk: the abort file stays, and the next open recovers as after a crash
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
            self._flush_service = None
        for task in self._tasks:
            task.cancel()
        self._open = False
        with self._checkpoint_lock:  # a checkpoint running in a worker thread still uses the files
            self._close_files()

    def _close_files(self) -> None:
        self.commit_log.close()
        for cq in self.consume_queues():
            cq.close()
        self.index.close()
        os.close(self._lock_fd)  # releases the flock

    def _check_open(self) -> None:
        if not self._open:
            raise StoreError("the store is shut down")

    # --- checkpoint --------------------------------------------------------------------------------

    def _snapshot(self) -> _Snapshot:
        queues: dict[str, dict[int, int]] = {}
        for (topic, qid), next_offset in self._queue_offsets.items():
            queues.setdefault(topic, {})[qid] = next_offset
        cp = Checkpoint(
            recovery_offset=self.commit_log.max_offset,
            written_at_ms=self.clock.wall_ms(),
            last_store_timestamp=self._last_store_ts,
            queues=queues,
            index_files=self.index.names(),
        )
        cqs = list(self.consume_queues())
        cq_files = [mf for cq in cqs for mf in cq.dirty_files()]
        cq_dirs = [cq.files for cq in cqs if cq.files.directory_dirty]
        return _Snapshot(cp, cq_files, cq_dirs, self.index.dirty_files())

    def _write_checkpoint(self, snap: _Snapshot) -> None:
        """Make the snapshot durable: commit log, then derived files, then the checkpoint (any thread)."""
        with self._checkpoint_lock:
            try:
                self.commit_log.flush()
                with self._files_lock:
                    for mf in snap.cq_files:
                        mf.flush()
                    for f in snap.index_files:
                        f.flush()
                    for files in snap.cq_dirs:
                        if os.path.isdir(files.directory):  # not a queue deleted since the snapshot
                            files.sync_directory()
                self.checkpoint.write(snap.checkpoint)
                self.clock.save()
            except BaseException:
                for mf in snap.cq_files:
                    mf.dirty = True  # the next checkpoint must fsync them again
                for files in snap.cq_dirs:
                    files.directory_dirty = True
                for f in snap.index_files:
                    f.dirty = True
                raise
            self._checkpoint_offset = snap.checkpoint.recovery_offset
            self._counters["checkpoints"] += 1

    async def _checkpoint_async(self) -> None:
        await asyncio.to_thread(self._write_checkpoint, self._snapshot())

    def flush_and_checkpoint(self) -> int:
        """Flush everything and write a checkpoint now, on the calling thread; return the recovery point."""
        self._check_open()
        self._write_checkpoint(self._snapshot())
        return self._checkpoint_offset

    # --- put ---------------------------------------------------------------------------------------

    def put_message(self, msg: MessageExt, answer: Callable[[PutMessageResult], Any] | None = None,
                    waiter: Waiter | None = None) -> Any:
        return self.put_messages([msg], answer, waiter)

    def put_messages(self, msgs: list[MessageExt], answer: Callable[[PutMessageResult], Any] | None = None,
                     waiter: Waiter | None = None) -> Any:
        """Append ``msgs`` as one all-or-nothing put; a future of its result (``append_result`` covers the first), or
        of ``answer(result)`` when an ``answer`` is given: a caller that turns the result into something else (a
        send's response) does it here, with no second future and no second callback per put (the send path).
        With a ``waiter`` (an object with a future's methods: the transport's ``Reply``), that is resolved and
        returned instead of a new future.

        Natural batching (group commit on the loop): the puts asked for in one loop iteration (every request of
        one socket read, and those of other connections read at the same moment) are written together in the
        next: one write per file, one flush wait, one replication wait. Each put is still judged alone: a
        message that cannot be encoded refuses its own put at once and never its neighbours; when the shared
        write fails, every put of it gets that failure and nothing of any of them is stored. Queue offsets are
        given here, in call order, so order within a queue is the order of the calls.
        The store assigns queue offset, commit-log offset, store timestamp and store host on each message.
        """
        loop = asyncio.get_running_loop()
        fut: Waiter = loop.create_future() if waiter is None else waiter
        refused: PutMessageResult | None
        if not self._open:
            refused = PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="the store is shut down")
        elif self.replica:
            refused = PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                       remark="this broker is a slave: it stores only what its master sends")
        elif not self._writable():
            refused = PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self._disk.remark)
        elif not msgs:
            refused = PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
        else:
            self._counters["put_calls"] += 1
            refused = self._encode_put(msgs, fut, answer)
            if refused is None and len(self._group) == 1:
                loop.call_soon(self._commit_group)
        if refused is not None:
            _settle(fut, answer, refused)
        return fut

    @cython.locals(msg=MessageExt)
    def _encode_put(self, msgs: list[MessageExt], fut: Waiter,
                    answer: Callable[[PutMessageResult], Any] | None) -> PutMessageResult | None:
        """Give ``msgs`` their queue offsets and encode them into the group to write; the refusal when one of them
        cannot be stored (the group is then as it was)."""
        now = self._group_ts
        if not now:  # the group's first put: one stamp for all its records, any new anchor made before they exist
            now = self.clock.stamp(self.commit_log.max_offset)
        pending = self._group_offsets
        next_offsets: dict[tuple[str, int], int] = {}
        records = self._group_records
        first = len(records)
        wrote = 0
        limit = min(self.config.max_message_size, self.commit_log.segment_size - BLANK_SIZE - TRAILER_SIZE)
        store_host = self.config.store_host
        refused: PutMessageResult | None = None
        for msg in msgs:
            if not valid_topic_directory(msg.topic) or msg.queue_id < 0:
                log.warning("refused a message for topic %r queue %d", msg.topic[:127], msg.queue_id)
                refused = PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                           remark=f"topic {msg.topic[:127]!r} queue {msg.queue_id} cannot be stored")
                break
            if builds_consume_queue(msg.sys_flag):
                key = (msg.topic, msg.queue_id)
                queue_offset = next_offsets.get(key)
                if queue_offset is None:
                    queue_offset = pending.get(key)
                    if queue_offset is None:
                        queue_offset = self._queue_offsets.get(key, 0)
                next_offsets[key] = queue_offset + 1
            else:
                queue_offset = 0
            msg.queue_offset = queue_offset
            msg.store_timestamp = now
            msg.store_host = store_host
            msg.commit_log_offset = 0
            try:
                rec = encode_record(msg)
            except InvalidMessageError as exc:
                log.warning("refused a message for %s: %s", msg.topic[:127], exc)
                status = (
                    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
                    if "properties" in str(exc)
                    else PutMessageStatus.MESSAGE_ILLEGAL
                )
                refused = PutMessageResult(status, remark=str(exc))
                break
            size = len(rec) - TRAILER_SIZE  # the message's own size, as encode_message writes it
            if size > limit:
                log.warning("refused a message of %d bytes for %s (limit %d)", size, msg.topic, limit)
                refused = PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=(
                    f"the stored record (body, properties and header) is {size} bytes: it must fit "
                    + (f"maxMessageSize {self.config.max_message_size}" if limit == self.config.max_message_size
                       else f"a commit-log segment ({limit} bytes, mappedFileSizeCommitLog)")))
                break
            records.append(rec)
            wrote += len(rec)
        if refused is not None:
            del records[first:]  # the group as it was
            return refused
        self._group_msgs += msgs
        pending.update(next_offsets)
        self._group_ts = now
        self._group.append(_Put(first, len(msgs), wrote, fut, answer))
        return None

    @cython.locals(put=_Put)
    def _commit_group(self) -> None:
        """Write the puts asked for since the last group with one append, dispatch them, and answer each once the
        flush (and the replication) covers the group's last byte."""
        group, self._group = self._group, []
        msgs, self._group_msgs = self._group_msgs, []
        records, self._group_records = self._group_records, []
        next_offsets, self._group_offsets = self._group_offsets, {}
        now, self._group_ts = self._group_ts, 0
        try:
            self._write_group(group, msgs, records, next_offsets, now)
        except BaseException as exc:  # a bug or a dying loop: nobody may wait forever
            for put in group:
                if not put.future.done():
                    put.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            log.exception("a group of %d puts failed", len(group))

    @cython.locals(msg=MessageExt, put=_Put)
    def _write_group(self, group: list[_Put], msgs: list[MessageExt], records: list[bytearray],
                     next_offsets: dict[tuple[str, int], int], now: int) -> None:
        # A put whose caller stopped waiting (a cancelled future) is written all the same: its queue offsets are
        # given, and a put once asked for is stored or refused as a whole, never dropped in part.
        if not self._open:
            self._answer_all(group, PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                                     remark="the store is shut down"))
            return
        start = self.commit_log.max_offset
        try:
            offsets = self.commit_log.append(records)
        except (OSError, StoreError) as exc:
            creating = isinstance(exc, OSError) and self.commit_log.queue.find(self.commit_log.max_offset) is None
            self._answer_all(group, self._put_failed("the commit log", exc, creating))
            return
        for msg, rec, offset in zip(msgs, records, offsets, strict=True):
            msg.commit_log_offset = offset
            msg.store_size = len(rec) - TRAILER_SIZE
        refused = self._build_derived(start, msgs, now, next_offsets)
        if refused is not None:
            self._answer_all(group, refused)
            return
        self._last_store_ts = now
        self._queue_offsets.update(next_offsets)
        if self._dispatchers:  # a DispatchRequest per record only for those who read one (a slave's broker)
            for msg in msgs:
                self._notify_dispatchers(self._dispatch_request(msg, now))
        self._counters["appends"] += len(msgs)
        self._counters["put_groups"] += 1
        end = self.commit_log.max_offset
        for fn in self._append_listeners:
            fn(end)
        self._notify(next_offsets, end)
        store_host = self.config.store_host
        for put in group:
            i = put.first
            # positional: no keyword dict per put (wrote_offset, wrote_bytes, msg_id, store_timestamp, logics_offset,
            # msg_num)
            put.appended = AppendMessageResult(offsets[i], put.wrote, create_offset_msg_id(store_host, offsets[i]), now,
                                               msgs[i].queue_offset, put.count)
        self._await_durable(end, group)

    def _await_durable(self, end: int, group: list[_Put]) -> None:
        """Answer a written group (each put with its ``appended`` result) once it is durable as the flush mode asks:
        the fsync and the replication run together, each a group commit shared with other groups; callbacks, no
        task. The callbacks are partials, not closures: compiled closures share one scope that holds them, a
        reference cycle that kept a whole group (its puts, messages and requests) alive for the cyclic collector
        after it was answered."""
        flushed: asyncio.Future[bool] | None = None
        if self.config.flush_disk_type is _SYNC_FLUSH:
            if self._flush_service is None:  # not started yet: no flush thread to share fsyncs with
                try:
                    self.commit_log.flush()
                except OSError as exc:  # stored and dispatched all the same: the answer must say stored
                    log.error("sync flush failed: %s", exc)
                    _answer_durable(group, PutMessageStatus.FLUSH_DISK_TIMEOUT, str(exc))
                    return
            else:
                flushed = self._flush_service.wait_flushed(end, self.config.sync_flush_timeout_ms / 1000)
        replicated = self.replicate(end) if self.replicate is not None else None
        if flushed is not None:
            flushed.add_done_callback(functools.partial(self._after_flush, group, replicated))
        else:
            _after_durable_flush(group, replicated)

    def _after_flush(self, group: list[_Put], replicated: asyncio.Future[PutMessageStatus] | None,
                     fut: asyncio.Future[bool]) -> None:
        """A group's fsync is over (or timed out): answer it, or wait for its replication first."""
        if not fut.result():
            self._counters["flush_timeouts"] += 1
            log.warning("sync flush did not finish in %d ms", self.config.sync_flush_timeout_ms)
            _answer_durable(group, PutMessageStatus.FLUSH_DISK_TIMEOUT)
        else:
            _after_durable_flush(group, replicated)

    @staticmethod
    @cython.locals(put=_Put)
    def _answer_all(group: list[_Put], result: PutMessageResult) -> None:
        for put in group:
            put.settle(result)

    @staticmethod
    def _dispatch_request(msg: MessageExt, now: int) -> DispatchRequest:
        """The request of a message just written (its offset and size set)."""
        props = msg.properties
        return DispatchRequest(
            topic=msg.topic,
            queue_id=msg.queue_id,
            commit_log_offset=msg.commit_log_offset,
            msg_size=msg.store_size + TRAILER_SIZE,
            tags_code=tags_code(props.get(MessageConst.TAGS)),
            store_timestamp=now,
            consume_queue_offset=msg.queue_offset,
            keys=props.get(MessageConst.KEYS),
            uniq_key=props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
            sys_flag=msg.sys_flag,
            prepared_transaction_offset=msg.prepared_transaction_offset,
            properties=props,
            born_timestamp=msg.born_timestamp,
        )

    @cython.locals(msg=MessageExt)
    def _build_derived(self, start: int, msgs: list[MessageExt], now: int,
                       next_offsets: dict[tuple[str, int], int]) -> PutMessageResult | None:
        """Write the consume-queue entries and index keys of a group's messages (appended from ``start``, their
        offsets and sizes set); None when done. Entries of one queue are consecutive within a group: written
        together.

        When a file cannot grow (a full disk), the put is taken back and the refusal returned: nothing may stay
        of a put answered as failed. The log goes back to ``start`` (its bytes a hole again), the consume queues
        to where they were; index entries already written point at no record, and lookups verify each one.
        """
        where = "the index"
        try:
            runs: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
            for msg in msgs:
                props = msg.properties
                if builds_consume_queue(msg.sys_flag):
                    runs.setdefault((msg.topic, msg.queue_id), []).append((
                        msg.commit_log_offset, msg.store_size + TRAILER_SIZE, tags_code(props.get(_TAGS))))
                self._build_index(msg.topic, msg.sys_flag, props.get(_KEYS), props.get(_UNIQ_KEY),
                                  msg.commit_log_offset, now)
            for (topic, queue_id), entries in runs.items():
                where = f"the consume queue {topic}/{queue_id}"
                self.find_or_create_consume_queue(topic, queue_id).put_run(
                    next_offsets[(topic, queue_id)] - len(entries), entries)
        except Exception as exc:
            with self._files_lock:  # the checkpoint thread may be fsyncing consume-queue files
                for key in next_offsets:
                    cq = self.find_consume_queue(*key)
                    before = self._queue_offsets.get(key, 0)
                    if cq is not None and cq.max_offset > before:
                        cq.truncate_logical(before)
            self.commit_log.truncate(start)
            return self._put_failed(where, exc)
        return None

    def _put_failed(self, where: str, exc: Exception, creating: bool = False) -> PutMessageResult:
        """The answer to a put that stored nothing. Out of space: SERVICE_NOT_AVAILABLE saying the disk is full
        (RocketMQ's answer to a full disk), and puts are refused until there is room again."""
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            self._disk.mark_full(f"{exc.strerror} while writing {where}")
            self._disk_checked_at = time.monotonic()
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self._disk.remark)
        log.error("put failed writing %s, nothing stored: %s", where, exc, exc_info=not isinstance(exc, OSError))
        status = PutMessageStatus.CREATE_MAPPED_FILE_FAILED if creating else PutMessageStatus.UNKNOWN_ERROR
        return PutMessageResult(status, remark=f"{exc} while writing {where}; nothing was stored")

    def _writable(self) -> bool:
        """Whether the disk has room, measured at most every ``DISK_CHECK_INTERVAL_S``; when it is fuller than
        ``disk_max_used_space_ratio``, retention runs at once instead of on its next tick."""
        now = time.monotonic()
        if now - self._disk_checked_at >= DISK_CHECK_INTERVAL_S:
            self._disk_checked_at = now
            used = self._disk.check()
            over = used > self.config.disk_max_used_space_ratio
            if over and not self._over_max_used:
                log.warning("the store's disk is %.1f %% used, over diskMaxUsedSpaceRatio %g %%: retention runs at "
                            "once from now on", used, self.config.disk_max_used_space_ratio)
            self._over_max_used = over
            if over and now - self._early_clean_at >= EARLY_CLEAN_INTERVAL_S:
                self._early_clean_at = now
                try:
                    self.clean_expired_files()
                except OSError:
                    log.exception("retention failed")
        return not self._disk.full

    # --- replication (a slave's side; see txmq.store.ha) ---------------------------------------------

    def append_replicated(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """Append the whole records at the start of a master's bytes from ``offset`` as they are, dispatch them
        (consume queues, index, dispatchers, arrival listeners) and return how many bytes were taken. Raises
        ``CorruptRecordError`` (nothing written) for bytes that are not valid records at those offsets."""
        self._check_open()
        records = self.commit_log.append_raw(offset, data)
        arrived: dict[tuple[str, int], int] = {}  # next queue offset per queue
        runs: dict[tuple[str, int], tuple[int, list[tuple[int, int, int]]]] = {}  # consecutive entries per queue
        for phy, rec in records:
            req = request_from_record(rec, phy)
            self.clock.replicated(phy, req.store_timestamp, self._last_store_ts)
            self._last_store_ts = req.store_timestamp
            self._build_index(req.topic, req.sys_flag, req.keys, req.uniq_key, phy, req.store_timestamp)
            self._notify_dispatchers(req)
            if builds_consume_queue(req.sys_flag):
                key = (req.topic, req.queue_id)
                first, entries = runs.get(key, (req.consume_queue_offset, []))
                if first + len(entries) != req.consume_queue_offset:
                    self.find_or_create_consume_queue(*key).put_run(first, entries)
                    first, entries = req.consume_queue_offset, []
                entries.append((phy, req.msg_size, req.tags_code))
                runs[key] = (first, entries)
                arrived[key] = req.consume_queue_offset + 1
        for key, (first, entries) in runs.items():  # one write per queue and file, as put_messages does
            self.find_or_create_consume_queue(*key).put_run(first, entries)
        self._queue_offsets.update(arrived)
        self._counters["appends"] += len(records)
        self._notify(arrived, self.commit_log.max_offset)
        return self.commit_log.max_offset - offset

    def truncate_replicated(self, offset: int) -> None:
        """Drop the log from ``offset`` on, with the consume-queue entries and index files that point there,
        and checkpoint at once: a slave whose master no longer has those bytes must not keep them."""
        self._check_open()
        log.warning("truncating the commit log at %d (the master's log ends there): %d bytes dropped",
                    offset, self.commit_log.max_offset - offset)
        self.commit_log.truncate(offset)
        self.clock.truncate(offset)
        self._last_store_ts = 0  # unknown: the next record is not compared with the one before it
        for cq in self.consume_queues():
            cq.truncate_dirty(offset)
            self._queue_offsets[(cq.topic, cq.queue_id)] = cq.max_offset
        self.index.truncate_from(offset)
        self._write_checkpoint(self._snapshot())
        if self._confirm_offset is not None and self._confirm_offset > offset:
            self._confirm_offset = offset  # RocketMQ's truncateDirtyFiles: the bound never passes the log's end
        # Arrivals held past the new end are told once the bound reaches it (a wake for a dropped record is only a
        # pull answered with nothing new).
        self._held_arrivals = deque((min(end, offset), arrived) for end, arrived in self._held_arrivals)
        for fn in self._truncate_listeners:
            fn(offset)

    def start_replica_at(self, offset: int) -> None:
        """An empty slave copies a master whose log no longer starts at 0: its log starts where the master's
        does (a segment boundary), so offsets mean the same on both."""
        if self.commit_log.queue.files or offset % self.commit_log.segment_size:
            raise StoreError(f"cannot start a replica at {offset}: the log is not empty or not at a segment start")
        self.commit_log.max_offset = self.commit_log.flushed_offset = offset

    def add_truncate_listener(self, fn: Callable[[int], None]) -> None:
        """``fn(offset)`` after ``truncate_replicated`` dropped the log from ``offset`` on: state derived from the
        dropped records must be rebuilt (a slave's transaction table)."""
        self._truncate_listeners.append(fn)

    def add_append_listener(self, fn: Callable[[int], None]) -> None:
        """``fn(new end of the log)`` after each put, on the loop thread (a master's HA connections)."""
        self._append_listeners.append(fn)

    def remove_append_listener(self, fn: Callable[[int], None]) -> None:
        """Stop calling ``fn`` (an HA service shut down when its master stepped down)."""
        with contextlib.suppress(ValueError):
            self._append_listeners.remove(fn)

    def _notify(self, arrived: dict[tuple[str, int], int], end: int) -> None:
        """Tell the arrival listeners of records ending at ``end`` now, or once the confirm offset reaches it."""
        if self._confirm_offset is not None and end > self._confirm_offset:
            if len(self._held_arrivals) >= MAX_HELD_ARRIVALS:
                arrived = {**self._held_arrivals.pop()[1], **arrived}
            self._held_arrivals.append((end, arrived))
            return
        self._tell_arrivals(arrived)

    def _tell_arrivals(self, arrived: dict[tuple[str, int], int]) -> None:
        for (topic, qid), next_offset in arrived.items():
            for listener in self._arrival_listeners:
                try:
                    listener(topic, qid, next_offset)
                except Exception:
                    log.exception("arrival listener %r failed", listener)

    # --- the confirm offset (controller mode; see txmq.store.ha) ----------------------------------------

    @property
    def confirm_offset(self) -> int | None:
        """RocketMQ's confirmOffset: consumers read records up to it (None: up to the log's end)."""
        return self._confirm_offset

    def set_confirm_offset(self, offset: int | None) -> None:
        """Bound consumers' reads at ``offset`` (capped at the log's end; None: no bound) and wake the long polls
        of the records it now covers. A bound lowered below the log's end (a start at 0 over a recovered log, a
        new master's lower one) uncovers records told of before, or never: every queue's arrival is held again
        until the bound covers the log's present end."""
        end = self.commit_log.max_offset
        previous = self._confirm_offset
        if offset is not None:
            offset = min(offset, end)
        self._confirm_offset = offset
        if offset is not None and offset < end and (previous is None or offset < previous):
            self._notify(dict(self._queue_offsets), end)
        held = self._held_arrivals
        while held and (offset is None or held[0][0] <= offset):
            self._tell_arrivals(held.popleft()[1])

    def _confirmed_max(self, cq: ConsumeQueue) -> int:
        """The queue's max offset for consumers: its entries whose records end at or before the confirm offset."""
        hi, bound = cq.max_offset, self._confirm_offset
        if bound is None or hi == cq.min_offset:
            return hi
        last = cq.entry(hi - 1)
        if last is None or last[0] + last[1] <= bound:
            return hi
        return cq.first_offset_where(cq.min_offset, hi - 1, lambda phy, size: phy + size > bound)

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
        refuses is passed over, never returned. A record that fails validation is skipped, logged and
        counted; it is never returned. ``confirmed`` (a consumer's read): only records up to the confirm offset;
        an offset among the entries past it is answered OFFSET_OVERFLOW_ONE (not there yet), never moved.
        """
        self._check_open()
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE)
        lo, hi = cq.min_offset, cq.max_offset
        top = self._confirmed_max(cq) if confirmed else hi
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
            if stop:
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
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            return 0
        return self._confirmed_max(cq) if confirmed else cq.max_offset

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.min_offset if cq else 0

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        entry = cq.entry(cq_offset) if cq and cq.min_offset <= cq_offset < cq.max_offset else None
        return entry[0] if entry else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int, *,
                                    confirmed: bool = False) -> int:
        """First queue offset whose message was stored at or after ``timestamp_ms``; max offset if none.
        ``confirmed`` (a consumer's start): no further than the records up to the confirm offset."""
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            return 0
        if confirmed:
            return min(self.get_offset_in_queue_by_time(topic, queue_id, timestamp_ms), self._confirmed_max(cq))

        def store_time(phy: int) -> int:
            try:
                return self.commit_log.read_store_timestamp(phy)
            except StoreError:
                return -1

        return cq.offset_by_time(timestamp_ms, store_time)

    def topics(self) -> set[str]:
        return set(self._queues)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self._queues.get(topic, {}))

    def delete_topic(self, topic: str) -> None:
        """Drop the topic's consume queues; its records age out of the commit log by retention. Raises
        ``StoreError`` for a name that is not a topic directory's."""
        directory = topic_directory(self.config.store_path_root_dir, topic)
        for qid in list(self._queues.get(topic, {})):
            self.drop_consume_queue(topic, qid)
        with contextlib.suppress(OSError):
            os.rmdir(directory)
        # The checkpoint lists queues so recovery can rebuild lost ones: it must forget these now.
        self._write_checkpoint(self._snapshot())

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
            for cq in self.consume_queues():
                cq.delete_expired_files(min_phy)
            self.index.delete_expired_files(min_phy)
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
        return self._last_store_ts

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
            consume_queues=sum(len(qs) for qs in self._queues.values()),
            index_files=len(self.index.files),
            disk_used_percent=round(self._disk.used, 1),  # as last measured by a put
            disk_full=int(self._disk.full),  # puts are refused (docs/storage.md, "A full disk")
        )
        return info
