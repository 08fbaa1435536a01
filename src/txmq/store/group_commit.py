"""The group commit (RocketMQ's putMessage and its GroupCommitService, on the asyncio loop): the puts asked for in
one loop iteration are encoded, written with one append, their consume-queue entries and index keys derived, and
each answered once the flush (and the replication) covers the group's last byte. ``DefaultMessageStore`` owns one
and hands it every put."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

import cython

from txmq.errors import InvalidMessageError, StoreError
from txmq.message import MessageConst, MessageExt, create_offset_msg_id
from txmq.store.config import FlushDiskType, StoreConfig
from txmq.store.consume_queue import ConsumeQueue, valid_topic_directory
from txmq.store.dispatcher import DispatchRequest, build_index, builds_consume_queue, run_dispatchers, tags_code
from txmq.store.record import BLANK_SIZE, TRAILER_SIZE, encode_record, set_store_timestamp
from txmq.store.results import AppendMessageResult, PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from txmq.store.clock import StoreClock
    from txmq.store.commit_log import CommitLog
    from txmq.store.consume_queue_store import ConsumeQueueStore
    from txmq.store.disk import DiskGuard
    from txmq.store.durability import Durability
    from txmq.store.flush import FlushCommitLogService
    from txmq.store.index import IndexService
    from txmq.store.replica import ConfirmOffset

log = logging.getLogger("txmq.store")

DISK_CHECK_INTERVAL_S = 0.1  # puts measure the disk at most this often (one statvfs)
EARLY_CLEAN_INTERVAL_S = 1.0  # retention runs at most this often on behalf of a disk over diskMaxUsedSpaceRatio
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


AnswerBatch = Callable[[], AbstractContextManager[Any]]


@cython.locals(put=_Put)
def _after_replication(group: list[_Put], flushed: PutMessageStatus, remark: str, batch: AnswerBatch,
                       fut: asyncio.Future[PutMessageStatus]) -> None:
    """A written group's replication is over, and its flush (``flushed``: PUT_OK, or FLUSH_DISK_TIMEOUT and why):
    the two statuses combined answer each put inside ``batch()``, as RocketMQ combines them — a failed
    replication's status first (a put not acknowledged by the replicas, or by a master that stepped down, is not
    answered "stored"), then the flush's."""
    with batch():
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
        status = fut.result()
        if status is _PUT_OK and flushed is not _PUT_OK:
            _answer_durable(group, flushed, remark)
        else:
            _answer_durable(group, status)


def _after_durable_flush(group: list[_Put], replicated: asyncio.Future[PutMessageStatus] | None, batch: AnswerBatch,
                         flushed: PutMessageStatus = _PUT_OK, remark: str = "") -> None:
    """A written group's flush is over (``flushed``): answered now, or once its replication is over; the answers
    given inside ``batch()``."""
    if replicated is not None:
        replicated.add_done_callback(functools.partial(_after_replication, group, flushed, remark, batch))
    else:
        with batch():
            _answer_durable(group, flushed, remark)


@cython.cclass
class GroupCommit:
    """The put path of one store: the group gathered in this loop iteration, its write, its derived files and its
    answers. It shares the store's parts (log, queues, index, clock, counters, dispatchers). Set by others:
    ``replicate`` (SYNC_MASTER: a future of the put's status once enough slaves have the log up to an offset, set
    by whoever composes the store with its HA service), ``replica`` (a slave's store takes only what its master
    streams: a put of its own would make its log differ from the master's at the same offsets; set by whoever knows
    the role), ``answer_batch`` (what a group's answers, and the arrival notices that wake held pulls, are given
    inside: the broker's is the remoting transport's write batch, so that what goes to one connection leaves in one
    write as soon as it is given) and
    ``flush_service`` (the store's, once started). Compiled, an extension type (group_commit.pxd)
    whose fields the group's loops read as C struct members."""

    def __init__(self, config: StoreConfig, commit_log: CommitLog, queues: ConsumeQueueStore, index: IndexService,
                 clock: StoreClock, confirm: ConfirmOffset, disk: DiskGuard, files_lock: threading.Lock,
                 counters: dict[str, int], dispatchers: list[Callable[[DispatchRequest], None]],
                 clean: Callable[[], int], durability: Durability) -> None:
        self.config = config
        self.commit_log = commit_log
        self.queues = queues
        self._queues_by_key = queues.by_key
        self.index = index
        self.clock = clock
        self.confirm = confirm
        self.disk = disk
        self.durability = durability  # lost at the store's first failed fsync: puts are refused until a restart
        self._files_lock = files_lock
        self._counters = counters
        self._dispatchers = dispatchers
        self._clean = clean  # retention, run at once when the disk is over diskMaxUsedSpaceRatio
        self.append_listeners: list[Callable[[int], None]] = []
        self.replicate: Callable[[int], asyncio.Future[PutMessageStatus]] | None = None
        self.answer_batch: AnswerBatch = contextlib.nullcontext
        self.replica = False
        self.open = True
        self.flush_service: FlushCommitLogService | None = None
        self._disk_checked_at = -DISK_CHECK_INTERVAL_S
        self._early_clean_at = -EARLY_CLEAN_INTERVAL_S
        self.over_max_used = False
        self._group: list[_Put] = []  # puts asked for in this loop iteration, written together (natural batching)
        self._group_msgs: list[MessageExt] = []  # their messages, in call order
        self._group_records: list[bytearray] = []  # and their encoded records
        self._group_offsets: dict[tuple[str, int], int] = {}  # next queue offsets counting the group's puts
        # The queues the group's puts found (None: not made yet), so that its entries go to them without looking
        # each up again in a table of 80,000 at 10,000 topics; kept only while no queue was dropped since the
        # group's first put (``ConsumeQueueStore.drops``: a dropped queue's entries go to a new one, found then).
        self._group_queues: dict[tuple[str, int], ConsumeQueue | None] = {}
        self._group_drops = 0

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
        if not self.open:
            refused = PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="the store is shut down")
        elif self.replica:
            refused = PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                       remark="this broker is a slave: it stores only what its master sends")
        elif self.durability.lost:
            refused = PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self.durability.remark)
        elif not self._writable():
            refused = PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self.disk.remark)
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
        if not self._group:
            self._group_drops = self.queues.drops
        pending = self._group_offsets
        found = self._group_queues
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
                        cq = self._queues_by_key.get(key)
                        queue_offset = 0 if cq is None else cq.max_offset
                        found[key] = cq  # (a refused put's is still that queue: harmless, as it was found)
                next_offsets[key] = queue_offset + 1
            else:
                queue_offset = 0
            msg.queue_offset = queue_offset
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
        found, self._group_queues = self._group_queues, {}
        if self.queues.drops != self._group_drops:
            found = {}
        try:
            self._write_group(group, msgs, records, next_offsets, found)
        except BaseException as exc:  # a bug or a dying loop: nobody may wait forever
            for put in group:
                if not put.future.done():
                    put.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            log.exception("a group of %d puts failed", len(group))

    @cython.locals(msg=MessageExt, put=_Put)
    def _write_group(self, group: list[_Put], msgs: list[MessageExt], records: list[bytearray],
                     next_offsets: dict[tuple[str, int], int], found: dict[tuple[str, int], ConsumeQueue | None]
                     ) -> None:
        # A put whose caller stopped waiting (a cancelled future) is written all the same: its queue offsets are
        # given, and a put once asked for is stored or refused as a whole, never dropped in part.
        if not self.open:
            self._answer_all(group, PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                                     remark="the store is shut down"))
            return
        start = self.commit_log.max_offset
        # One stamp for the group, taken now that every put of it was asked (a put that joined the group after the
        # loop was held up is not aged from its first put), any new anchor or mark made before its records exist.
        now = self.clock.stamp(start, self.commit_log.last_store_timestamp)
        for rec in records:
            set_store_timestamp(rec, now)
        try:
            offsets = self.commit_log.append(records)
        except (OSError, StoreError) as exc:
            creating = isinstance(exc, OSError) and self.commit_log.queue.find(self.commit_log.max_offset) is None
            self._answer_all(group, self._put_failed("the commit log", exc, creating))
            return
        for msg, rec, offset in zip(msgs, records, offsets, strict=True):
            msg.commit_log_offset = offset
            msg.store_size = len(rec) - TRAILER_SIZE
            msg.store_timestamp = now
        self.commit_log.last_store_timestamp = now  # the records are in the log, even if their derived state fails
        refused = self._build_derived(start, msgs, now, next_offsets, found)
        if refused is not None:
            self._answer_all(group, refused)
            return
        if self._dispatchers:  # a DispatchRequest per record only for those who read one (a slave's broker)
            for msg in msgs:
                run_dispatchers(self._dispatchers, _dispatch_request(msg, now), self._counters)
        self._counters["appends"] += len(msgs)
        self._counters["put_groups"] += 1
        end = self.commit_log.max_offset
        for fn in self.append_listeners:
            fn(end)
        with self.answer_batch():  # the held pulls it wakes answer now: those on one connection in one write
            self.confirm.notify(next_offsets, end)
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
        replicated = self.replicate(end) if self.replicate is not None else None
        if self.config.flush_disk_type is _SYNC_FLUSH:
            if self.flush_service is None:  # not started yet: no flush thread to share fsyncs with
                try:
                    self.commit_log.flush()
                except OSError as exc:  # stored and dispatched all the same: the answer must say stored
                    log.error("sync flush failed: %s", exc)
                    _after_durable_flush(group, replicated, self.answer_batch, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                                         str(exc))
                    return
            else:
                flushed = self.flush_service.wait_flushed(end, self.config.sync_flush_timeout_ms / 1000)
        if flushed is not None:
            flushed.add_done_callback(functools.partial(self._after_flush, group, replicated))
        else:
            _after_durable_flush(group, replicated, self.answer_batch)

    def _after_flush(self, group: list[_Put], replicated: asyncio.Future[PutMessageStatus] | None,
                     fut: asyncio.Future[bool]) -> None:
        """A group's fsync is over (or timed out, or durability was lost): answer it, or wait for its replication
        first. Not flushed: FLUSH_DISK_TIMEOUT, stored but not durable (a lost durability says why)."""
        if not fut.result():
            self._counters["flush_timeouts"] += 1
            if not self.durability.lost:
                log.warning("sync flush did not finish in %d ms", self.config.sync_flush_timeout_ms)
            _after_durable_flush(group, replicated, self.answer_batch, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                                 self.durability.why if self.durability.lost else "")
        else:
            _after_durable_flush(group, replicated, self.answer_batch)

    @staticmethod
    @cython.locals(put=_Put)
    def _answer_all(group: list[_Put], result: PutMessageResult) -> None:
        for put in group:
            put.settle(result)

    @cython.locals(msg=MessageExt)
    def _build_derived(self, start: int, msgs: list[MessageExt], now: int, next_offsets: dict[tuple[str, int], int],
                       found: dict[tuple[str, int], ConsumeQueue | None]) -> PutMessageResult | None:
        """Write the consume-queue entries and index keys of a group's messages (appended from ``start``, their
        offsets and sizes set); None when done. Entries of one queue are consecutive within a group: written
        together, to the queue its puts ``found`` (made now when there was none).

        When a file cannot grow (a full disk), the put is taken back and the refusal returned: nothing may stay
        of a put answered as failed. The log goes back to ``start`` (its bytes a hole again), the consume queues
        to where they were; index entries already written point at no record, and lookups verify each one. When
        the cut's fsync fails, durability is lost (``durability.py``) and the refusal says so.
        """
        where = "the index"
        queue: tuple[str, int] | None = None  # the queue being written, named in a refusal
        index_enabled = self.config.message_index_enable
        try:
            runs: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
            for msg in msgs:
                props = msg.properties
                if builds_consume_queue(msg.sys_flag):
                    runs.setdefault((msg.topic, msg.queue_id), []).append((
                        msg.commit_log_offset, msg.store_size + TRAILER_SIZE, tags_code(props.get(_TAGS))))
                build_index(self.index, index_enabled, msg.topic, msg.sys_flag, props.get(_KEYS),
                            props.get(_UNIQ_KEY), msg.commit_log_offset, now)
            for queue, entries in runs.items():
                cq = found.get(queue)
                if cq is None:
                    cq = self.queues.find_or_create(*queue)
                cq.put_run(next_offsets[queue] - len(entries), entries)
        except Exception as exc:
            if queue is not None:
                where = f"the consume queue {queue[0]}/{queue[1]}"
            before: dict[tuple[str, int], int] = {}  # each queue's offset before the group: its first message's
            for msg in msgs:
                if builds_consume_queue(msg.sys_flag):
                    before.setdefault((msg.topic, msg.queue_id), msg.queue_offset)
            with self._files_lock:  # the checkpoint thread may be fsyncing consume-queue files
                for key, offset in before.items():
                    cq = self.queues.find(*key)
                    if cq is not None and cq.max_offset > offset:
                        cq.truncate_logical(offset)
            try:
                self.commit_log.truncate(start)
            except OSError:  # the cut made, its fsync failed: durability is lost, and _put_failed says so
                if not self.durability.lost:  # something else failed: the records may still be in the log
                    raise
            return self._put_failed(where, exc)
        return None

    def _put_failed(self, where: str, exc: Exception, creating: bool = False) -> PutMessageResult:
        """The answer to a put that stored nothing. Out of space: SERVICE_NOT_AVAILABLE saying the disk is full
        (RocketMQ's answer to a full disk), and puts are refused until there is room again. Durability lost (the
        log refused the append, or the fsync of its take-back failed): SERVICE_NOT_AVAILABLE saying so."""
        if self.durability.lost:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self.durability.remark)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            self.disk.mark_full(f"{exc.strerror} while writing {where}")
            self._disk_checked_at = time.monotonic()
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self.disk.remark)
        log.error("put failed writing %s, nothing stored: %s", where, exc, exc_info=not isinstance(exc, OSError))
        status = PutMessageStatus.CREATE_MAPPED_FILE_FAILED if creating else PutMessageStatus.UNKNOWN_ERROR
        return PutMessageResult(status, remark=f"{exc} while writing {where}; nothing was stored")

    def _writable(self) -> bool:
        """Whether the disk has room, measured at most every ``DISK_CHECK_INTERVAL_S``; when it is fuller than
        ``disk_max_used_space_ratio``, retention runs at once instead of on its next tick."""
        now = time.monotonic()
        if now - self._disk_checked_at >= DISK_CHECK_INTERVAL_S:
            self._disk_checked_at = now
            used = self.disk.check()
            over = used > self.config.disk_max_used_space_ratio
            if over and not self.over_max_used:
                log.warning("the store's disk is %.1f %% used, over diskMaxUsedSpaceRatio %g %%: retention runs at "
                            "once from now on", used, self.config.disk_max_used_space_ratio)
            self.over_max_used = over
            if over and now - self._early_clean_at >= EARLY_CLEAN_INTERVAL_S:
                self._early_clean_at = now
                try:
                    self._clean()
                except OSError:
                    log.exception("retention failed")
        return not self.disk.full

    # --- replication (a slave's side; see txmq.store.ha) ---------------------------------------------


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
