"""Half messages, end of transaction and discards: RocketMQ's ``TransactionalMessageService`` and
``EndTransactionProcessor`` logic, with txmq's contract on top (README, Transactions):

* COMMIT stores exactly one real message. Repeats answer SUCCESS and store nothing; a decision racing its own
  repeat waits for the first one. After a restart, a transaction that recovery found pending is checked
  against the index (its ``UNIQ_KEY`` in the real topic) before a commit or a check, because a crash can
  land between the real message and its op record.
* The first decision wins: COMMIT after ROLLBACK is refused with ``TRANSACTION_SHOULD_ROLLBACK`` and ROLLBACK
  after COMMIT with ``TRANSACTION_SHOULD_COMMIT``, and logged.
* Decisions come one at a time (END_TRANSACTION, gRPC, check answers) or in batches (txmq's
  TXMQ_END_TRANSACTION_BATCH): a single decision is a batch of one, and a batch stores the real messages of
  all its commits in puts of about ``PUT_SLICE`` messages and writes one op record per outcome (when the real
  messages fit one put, in that same put: the END_TRANSACTIONs that arrive together cost one write).
* A half message may carry a batch (txmq's, beyond RocketMQ; ``HALF_BATCH``): its body is the batch as the
  producer sent it, and its transaction is one for all the messages in it. COMMIT stores each as a real
  message of its own (with its own ``UNIQ_KEY`` and the batch's transaction id in ``__transactionId__``).
* A check never rewrites the half message: op records in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` carry outcomes
  and check counts for many transactions at once (body: comma-separated half offsets, property
  ``TXMQ_OP``: COMMIT, ROLLBACK, DISCARD, RESUME or CHECK). Recovery replays half and op queues.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from txmq.broker.config import DEFAULT_ORPHAN_FACTOR
from txmq.broker.consumer_offset_manager import DEFAULT_MAX_ENTRIES
from txmq.broker.transaction.metrics import TransactionMetrics
from txmq.broker.transaction.state import COMMIT, EXPIRED, FINAL, ROLLBACK, Before, Outcome, TransactionStateTable
from txmq.errors import RemoteProtocolError, StoreError
from txmq.fileio import write_atomic
from txmq.message import MessageConst, MessageExt, MessageSysFlag, decode_batch, decode_message
from txmq.remoting.codes import ResponseCode
from txmq.remoting.refusals import RefusalLog
from txmq.store import DefaultMessageStore, DispatchRequest, GetMessageStatus, PutMessageResult, PutMessageStatus
from txmq.store.message_store import Waiter
from txmq.topic import (
    RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
)

log = logging.getLogger("txmq.transaction")

OP_PROPERTY = "TXMQ_OP"
HALF_BATCH = "TXMQ_HALF_BATCH"  # on a half message whose body is a batch: how many messages it carries
PUT_SLICE = 1024  # real messages per store put when a decision commits many: the loop serves others between
REMOVE_TAG = "d"
# Memory a remembered half costs beyond its body: the MessageExt, its properties dict and strings, the ints, the
# cache's dict slot (tracemalloc: about 550 bytes for a half with the usual five properties).
RECENT_HALF_OVERHEAD = 600
# properties of a half message that its real message does not carry
_HALF_ONLY = (MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID, MessageConst.TRANSACTION_PREPARED)
# read per half and per commit (``_half_of``, ``_track_stored``, ``real_messages``): module constants, not class
# attribute reads (about 15 ns each, interpreted)
_REAL_TOPIC, _REAL_QUEUE_ID = MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID
_PRODUCER_GROUP, _CHECK_IMMUNITY = MessageConst.PRODUCER_GROUP, MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS
_PREPARED_QUEUE_OFFSET = MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET
_NOT_TYPE, _COMMIT_TYPE = MessageSysFlag.TRANSACTION_NOT_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE
_reset_transaction_value = MessageSysFlag.reset_transaction_value
_OP_OUTCOMES = {"COMMIT": Outcome.COMMIT, "ROLLBACK": Outcome.ROLLBACK, "DISCARD": Outcome.DISCARD}
_DONE = {Outcome.COMMIT: "committed", Outcome.ROLLBACK: "rolled back"}
_EXPIRED = "was deleted by retention (fileReservedTime): its transaction can no longer be ended"


@dataclass(frozen=True, slots=True)
class EndResult:
    code: int
    remark: str | None = None


# the answers of stored decisions, shared: no object per decision
_STORED: dict[int, EndResult] = {
    code: EndResult(code)
    for code in (ResponseCode.SUCCESS, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.FLUSH_DISK_TIMEOUT)}


# One decision: the transaction (half offset and the half message's commit-log offset) and its outcome. A plain
# tuple: a NamedTuple's constructor is a Python function, about 0.4 µs per decision.
EndEntry = tuple[int, int, Outcome]


def _expired(where: str) -> EndResult:
    """The answer to a decision for a transaction whose half message retention deleted: a COMMIT cannot store
    its body any more, and the table no longer knows whether it was decided, so nothing is accepted."""
    return EndResult(ResponseCode.SYSTEM_ERROR, f"the half message at {where} {_EXPIRED}")


def _stored_answer(put: PutMessageResult) -> EndResult:
    """The answer to a commit whose real messages this stored put holds (a refused op record does not change it)."""
    return _STORED[ResponseCode.SUCCESS if put.ok else ResponseCode.SERVICE_NOT_AVAILABLE
                   if put.status is PutMessageStatus.NOT_ACKNOWLEDGED else ResponseCode.FLUSH_DISK_TIMEOUT]


def _no_half(group: str, commit_log_offset: int) -> str:
    """The answer to a decision naming no half message of its group: the same whether the offset holds no record,
    another message or another group's half, so a producer's decisions learn nothing of other groups' halves or of
    where the log ends."""
    return f"Find prepared transaction message failed: no half message of group {group} at commit-log offset " \
           f"{commit_log_offset}"


def _settle(futures: list[Waiter], task: asyncio.Task[list[EndResult]]) -> None:
    """Each gathered decision its own result; a failed call fails each (as it would have failed one alone)."""
    if task.cancelled():
        for fut in futures:
            fut.cancel()  # a done one stays as it is
        return
    exc = task.exception()
    results = task.result() if exc is None else None
    for i, fut in enumerate(futures):
        if fut.done():
            continue
        if results is None:
            fut.set_exception(exc)  # type: ignore[arg-type]
        else:
            fut.set_result(results[i])


class _Tracking:
    """The answer of a put of half messages (``put_messages``' ``answer``): tracks them, then answers as the
    caller asked. One object per put where a closure was five (its function and four cells), kept alive until
    the put's flush."""

    __slots__ = ("answer", "halves", "msgs", "service")

    def __init__(self, service: TransactionalMessageService, msgs: Sequence[MessageExt], halves: list[MessageExt],
                 answer: Callable[[PutMessageResult], Any] | None) -> None:
        self.service = service
        self.msgs = msgs
        self.halves = halves
        self.answer = answer

    def __call__(self, result: PutMessageResult) -> Any:
        """Each sender's message learns where its half is; a stored half is tracked and remembered."""
        track = self.service._track_stored if result.stored else None
        for msg, half in zip(self.msgs, self.halves, strict=True):
            msg.queue_offset, msg.commit_log_offset = half.queue_offset, half.commit_log_offset
            if track is not None:  # a late flush too: the producer is told where its half is, and may never end it
                track(half)
        return result if self.answer is None else self.answer(result)


class TransactionalMessageService:
    def __init__(self, store: DefaultMessageStore, *, transaction_timeout_ms: int, file_reserved_time_h: float,
                 snapshot_path: Path | None = None, recent_halves_max_bytes: int = 32 * 1024 * 1024,
                 orphan_factor: int = DEFAULT_ORPHAN_FACTOR, metrics_max_groups: int = DEFAULT_MAX_ENTRIES) -> None:
        self.store = store
        self.table = TransactionStateTable()
        self.metrics = TransactionMetrics(metrics_max_groups)
        self.transaction_timeout_ms = transaction_timeout_ms
        # transactionTimeOut x transactionOrphanFactor: the longest a half waits for its first check (immunity
        # included), and, no check ever handed to a producer of its group by then, when it is discarded
        self.orphan_after_ms = transaction_timeout_ms * orphan_factor
        self.file_reserved_time_h = file_reserved_time_h
        self.snapshot_path = snapshot_path
        # transactions being decided, by half offset: the deciding call's results (one future per call) and the
        # entry's place in them
        self._in_flight: dict[int, tuple[asyncio.Future[list[EndResult | None]], int]] = {}
        # Commits decided in the table whose real message or op record is still being written, with the state
        # from before the decision: a snapshot must show them as they are in the log.
        self._committing: dict[int, Before] = {}
        # ROLLBACKs decided in the table whose op record is still being written: the state from before, and the
        # op queue's end when decided (their record, once written, lies after it). A snapshot shows each as the
        # log has it: refused, a ROLLBACK is undone, and a snapshot keeping it would bring it back at a restart.
        self._rolling_back: dict[int, tuple[Before, int]] = {}
        self._recovered_before: set[int] = set()  # decisions under way for transactions recovery left unsure
        self._snapshot_covers = (-1, -1)
        self._op_queue: dict[str, list[int]] = {}  # op records asked for in this loop iteration
        self._op_written: asyncio.Future[bool] | None = None
        self._recent_halves: dict[int, MessageExt] = {}  # by commit-log offset, oldest first
        self._recent_bytes = 0
        # single decisions asked for in this loop iteration, by (producer group, source): decided together, each
        # answered through its waiter (the same place in the second list)
        self._gathered_ends: dict[tuple[str, str], tuple[list[EndEntry], list[Waiter]]] = {}
        self.recent_halves_max_bytes = recent_halves_max_bytes
        self._conflicts_log = RefusalLog(log, "transaction decision refused")

    # --- phase one: the half message ------------------------------------------------------------------

    def prepare_message(self, msg: MessageExt, answer: Callable[[PutMessageResult], Any] | None = None,
                        waiter: Waiter | None = None) -> Any:
        """Store ``msg`` as a half message (invisible) and start tracking it; ``waiter`` as ``put_messages``'. Every
        transactional send's: ``prepare_messages`` for one message, without its keyword call and comprehension."""
        halves = [self._half_of(msg, 0)]
        return self.store.put_messages(halves, _Tracking(self, (msg,), halves, answer), waiter)

    def prepare_half_batch(self, msg: MessageExt, count: int, answer: Callable[[PutMessageResult], Any] | None = None
                           ) -> asyncio.Future[Any]:
        """Store ``msg``, whose body is a checked batch of ``count`` messages, as one half message: one
        transaction for them all (``HALF_BATCH``; the send processor checked the batch)."""
        return self.prepare_messages([msg], half_batch=count, answer=answer)

    def prepare_messages(self, msgs: Sequence[MessageExt], *, half_batch: int = 0,
                         answer: Callable[[PutMessageResult], Any] | None = None, waiter: Waiter | None = None) -> Any:
        """Store ``msgs`` as half messages with one write (and one flush wait) and start tracking each: a batch
        of halves, as a Spark sink task sends them. They get consecutive half offsets; ``append_result`` covers
        the first, and each message gets its half's queue offset and commit-log offset. The caller's messages
        keep their own topic and queue: the client sees them in the answer, as with RocketMQ. A future of the
        result, or of ``answer(result)`` once tracked (``put_messages``' answer: one future per put, no task), or
        the ``waiter`` given, resolved so instead (a remoting send's ``Reply``: no future at all): halves share the
        store's group commit with the sends of the same loop iteration."""
        halves = [self._half_of(msg, half_batch) for msg in msgs]
        return self.store.put_messages(halves, _Tracking(self, msgs, halves, answer), waiter)

    @staticmethod
    def _half_of(msg: MessageExt, half_batch: int) -> MessageExt:
        """The half to store for ``msg``. ``HALF_BATCH`` is the broker's word only: a sender's is dropped (a
        plain body read as a batch at COMMIT would fail the decision)."""
        half = MessageExt(
            RMQ_SYS_TRANS_HALF_TOPIC, msg.body, msg.properties, flag=msg.flag, queue_id=0,
            sys_flag=_reset_transaction_value(msg.sys_flag, _NOT_TYPE),
            born_timestamp=msg.born_timestamp, born_host=msg.born_host, store_host=msg.store_host,
            reconsume_times=msg.reconsume_times,
        )
        props = half.properties  # its own copy: the sender's message keeps its properties
        props.pop(HALF_BATCH, None)
        if half_batch:
            props[HALF_BATCH] = str(half_batch)
        props[_REAL_TOPIC] = msg.topic
        props[_REAL_QUEUE_ID] = str(msg.queue_id)
        return half

    def _track_stored(self, half: MessageExt) -> None:
        """A half message just stored: tracked as pending (``_track``, first checked at ``_first_check_s``) and
        remembered. Written out in one call, not three, with the immunity looked up only when the half carries one:
        every transactional send runs it.

        Remembered, a half is kept for its decision, which usually follows within milliseconds: the commit then
        neither reads nor decodes it again. Oldest first out past ``recent_halves_max_bytes``, counting what a
        remembered half really costs: its body and its Python objects (``RECENT_HALF_OVERHEAD``)."""
        props = half.properties
        stored_ms = self._stored_ms(half)
        immunity_ms = self._immunity_ms(half) if _CHECK_IMMUNITY in props else self.transaction_timeout_ms
        self.table.add_pending(half.queue_offset, props.get(_REAL_TOPIC, ""), props.get(_PRODUCER_GROUP, ""),
                               stored_ms // 1000, -(-(stored_ms + immunity_ms) // 1000))
        recent = self._recent_halves
        recent[half.commit_log_offset] = half
        self._recent_bytes += len(half.body) + RECENT_HALF_OVERHEAD
        while self._recent_bytes > self.recent_halves_max_bytes and recent:
            self._recent_bytes -= len(recent.pop(next(iter(recent))).body) + RECENT_HALF_OVERHEAD

    def _half_at(self, commit_log_offset: int) -> MessageExt:
        """The half message stored at ``commit_log_offset``: remembered, else read from the store (which raises
        ``StoreError`` when there is none)."""
        half = self._recent_halves.pop(commit_log_offset, None)
        if half is not None:
            self._recent_bytes -= len(half.body) + RECENT_HALF_OVERHEAD
            return half
        return self.store.look_message_by_offset(commit_log_offset)

    def _track(self, half_offset: int, half: MessageExt, first_check_s: int, *, schedule: bool = True) -> None:
        """Track the transaction of a stored half message as pending (its real topic and producer group are in
        the half's properties)."""
        props = half.properties
        self.table.add_pending(half_offset, props.get(MessageConst.REAL_TOPIC, ""),
                               props.get(MessageConst.PRODUCER_GROUP, ""), self._stored_ms(half) // 1000,
                               first_check_s, schedule=schedule)

    def _stored_ms(self, half: MessageExt) -> int:
        """When the half was stored, by the store's elapsed-time account: what its checks and its age count from
        (``txmq.store.clock``; never its wall-clock stamp, which a step of the clock moves)."""
        return self.store.clock.elapsed_of(half.commit_log_offset, half.store_timestamp)

    def now_s(self) -> int:
        """The elapsed-time account now, in the check wheel's whole seconds."""
        return self.store.clock.elapsed_ms() // 1000

    def _immunity_ms(self, msg: MessageExt) -> int:
        """``transactionTimeOut``, or the message's longer ``CHECK_IMMUNITY_TIME_IN_SECONDS`` up to the orphan
        bound: a producer's huge immunity must not keep its transaction unchecked, and tracked, forever."""
        raw = msg.properties.get(MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS)
        default = self.transaction_timeout_ms
        if not raw:
            return default
        try:
            asked = int(raw) * 1000
        except ValueError:
            return default
        return max(default, min(asked, self.orphan_after_ms))

    def _first_check_s(self, half: MessageExt) -> int:
        """The first whole second of the account at which the stored half message is at least its immunity time old
        (the wheel has one-second buckets: rounding down would check up to a second before ``transactionTimeOut``)."""
        return -(-(self._stored_ms(half) + self._immunity_ms(half)) // 1000)

    # --- phase two: COMMIT or ROLLBACK ----------------------------------------------------------------

    def end_transaction(self, *, producer_group: str, half_offset: int, commit_log_offset: int,
                        outcome: Outcome, source: str, waiter: Waiter | None = None) -> Any:
        """Apply a producer's decision (``source`` is for the log: client, check, grpc…); a future of its result,
        or the ``waiter`` given, resolved with it instead (a remoting END_TRANSACTION's ``Reply``: no future, no
        done callback per decision).

        Natural batching: the single decisions of one loop iteration (END_TRANSACTIONs of one socket read, and
        those of other connections and gRPC calls at the same moment) go to ``end_transactions`` together, one
        call per producer group and source, so their real messages share one put and their outcomes one op
        record; each keeps its own result. A caller that stops waiting does not undo its decision."""
        gathered = self._gathered_ends
        if waiter is None:
            waiter = asyncio.get_running_loop().create_future()
        if not gathered:
            asyncio.get_running_loop().call_soon(self._end_gathered)
        batch = gathered.get((producer_group, source))
        if batch is None:
            batch = gathered[(producer_group, source)] = ([], [])
        batch[0].append((half_offset, commit_log_offset, outcome))
        batch[1].append(waiter)
        return waiter

    def _end_gathered(self) -> None:
        gathered, self._gathered_ends = self._gathered_ends, {}
        for (group, source), (entries, waiters) in gathered.items():
            task = asyncio.get_running_loop().create_task(self.end_transactions(group, entries, source))
            task.add_done_callback(functools.partial(_settle, waiters))

    async def end_transactions(self, producer_group: str, entries: Sequence[EndEntry], source: str) -> list[EndResult]:
        """Apply decisions of one producer group; one result per entry, in order.

        Each entry keeps every promise of a single decision: it is validated on its own, a repeat answers
        SUCCESS and stores nothing, the first decision wins, and an entry whose transaction is being decided
        (by another request, or earlier in this batch) waits for that decision. The real messages of all the
        commits go to the store in puts of about ``PUT_SLICE`` (their flush waits overlap), their outcomes in
        one op record and the rollbacks' in another, in the same put as the real messages when they fit one."""
        results: list[EndResult | None] = [None] * len(entries)
        waits: list[tuple[int, tuple[asyncio.Future[list[EndResult | None]], int]]] = []
        claimed: list[tuple[int, MessageExt]] = []
        decided: asyncio.Future[list[EndResult | None]] = asyncio.get_running_loop().create_future()
        in_flight, table = self._in_flight, self.table
        # No await from here to the decisions in _decide: claiming and deciding are one step on the loop.
        for i, (half_offset, commit_log_offset, outcome) in enumerate(entries):
            try:
                half = self._half_at(commit_log_offset)
            except StoreError:
                results[i] = _expired(f"commit-log offset {commit_log_offset}") \
                    if commit_log_offset < self.store.min_phy_offset \
                    else EndResult(ResponseCode.SYSTEM_ERROR, _no_half(producer_group, commit_log_offset))
                continue
            problem = self._check_prepare_message(half, producer_group, half_offset, commit_log_offset)
            if problem:
                results[i] = EndResult(ResponseCode.SYSTEM_ERROR, problem)
                continue
            running = in_flight.get(half_offset)
            current = table.outcome(half_offset)
            if running is not None:
                waits.append((i, running))
            elif current in FINAL:
                results[i] = self._repeat(half_offset, outcome, None)
            elif current is EXPIRED:  # a remembered half whose transaction the table forgot: never decided again
                results[i] = _expired(f"half offset {half_offset}")
            else:
                in_flight[half_offset] = (decided, i)
                claimed.append((i, half))
        if claimed:
            try:
                await self._decide(producer_group, entries, claimed, results, source)
                decided.set_result(results)
            except BaseException as exc:
                decided.set_exception(exc)
                decided.exception()  # the waiters, if any, see it; nobody else needs to
                raise
            finally:
                for i, _ in claimed:
                    del self._in_flight[entries[i][0]]
        for i, (deciding, j) in waits:
            try:
                first = (await asyncio.shield(deciding))[j]
            except Exception as exc:
                results[i] = EndResult(ResponseCode.SYSTEM_ERROR, f"the decision this one waited for failed: {exc}")
                continue
            half_offset, _, outcome = entries[i]
            results[i] = self._repeat(half_offset, outcome, first)
        return results  # type: ignore[return-value]

    async def _decide(self, producer_group: str, entries: Sequence[EndEntry], claimed: list[tuple[int, MessageExt]],
                      results: list[EndResult | None], source: str) -> None:
        """Decide and store the claimed entries: undecided or discarded, each in ``_in_flight`` for this call."""
        found: list[int] = []  # recovered transactions whose commit was already in the log
        commits: list[tuple[int, MessageExt, list[MessageExt]]] = []  # entry, half, the real messages to store
        rollbacks: list[tuple[int, MessageExt]] = []  # entry, half (the state before it: _rolling_back)
        overruled: list[int] = []  # ROLLBACKs of a batch whose commit a crash cut short: it is finished instead
        table = self.table  # read per decision: locals, not attribute chains
        pending, discarded, recovered = table.pending, table.discarded, table.recovered
        for i, half in claimed:
            half_offset, commit_log_offset, outcome = entries[i]
            # As it was, recovered flag included: a commit that cannot be stored goes back to exactly this.
            before = (table.outcome(half_offset), pending.get(half_offset), discarded.get(half_offset, 0))
            unsure = half_offset in recovered
            if unsure:
                self._recovered_before.add(half_offset)
            try:
                reals = self.real_messages(half, half_offset, commit_log_offset) if outcome == COMMIT or unsure else []
            except RemoteProtocolError as exc:
                results[i] = EndResult(ResponseCode.SYSTEM_ERROR, f"half batch at {half_offset} unreadable: {exc}")
                continue
            if unsure:
                recovered.discard(half_offset)
                left = self._not_in_log(half, reals)
                if not left:
                    table.decide(half_offset, COMMIT)
                    found.append(half_offset)
                    results[i] = self._repeat(half_offset, outcome, None)
                    continue
                if len(left) < len(reals) and outcome != COMMIT:
                    overruled.append(i)
                    outcome = COMMIT
                reals = left
            if outcome == COMMIT:
                # With the state from before: a snapshot shows it as the log has it until the op record is written.
                self._committing[half_offset] = before
                table.decide(half_offset, COMMIT)
                commits.append((i, half, reals))
            else:
                self._rolling_back[half_offset] = (before, self.store.get_max_offset_in_queue(
                    RMQ_SYS_TRANS_OP_HALF_TOPIC, 0))
                table.decide(half_offset, ROLLBACK)
                rollbacks.append((i, half))
        # Shielded: once started, puts append whatever happens to the caller (a gRPC deadline, a closing
        # server), so their outcome must be judged and recorded, never undone blindly.
        await asyncio.shield(asyncio.get_running_loop().create_task(
            self._store_and_answer(producer_group, entries, commits, rollbacks, found, overruled, results, source)))

    async def _store_and_answer(self, producer_group: str, entries: Sequence[EndEntry],
                                commits: list[tuple[int, MessageExt, list[MessageExt]]],
                                rollbacks: list[tuple[int, MessageExt]], found: list[int],
                                overruled: list[int], results: list[EndResult | None], source: str) -> None:
        """Store the commits' real messages, write the op records, and answer each entry."""
        committing = [entries[i][0] for i, _, _ in commits]
        rolling_back = [entries[i][0] for i, _ in rollbacks]
        stored: list[tuple[int, MessageExt]] = []  # entry, half: the commits whose real messages are stored
        ended = 0  # commits stored or undone, in order
        try:
            puts, recorded = await self._store_decided([reals for _, _, reals in commits], found + committing,
                                                       rolling_back)
            if recorded:
                # The usual case: real messages and op records in one put, stored: one answer for every commit.
                ended = len(commits)
                stored = [(i, half) for i, half, _ in commits]
                if stored:
                    answer = _stored_answer(puts[0])  # type: ignore[arg-type]  # a stored put's result
                    for i, _ in stored:
                        results[i] = answer
            else:
                for (i, half, _), put in zip(commits, puts, strict=True):
                    ended += 1
                    if isinstance(put, PutMessageResult) and put.stored:
                        stored.append((i, half))
                        results[i] = _stored_answer(put)
                    else:
                        # Undone, not left at COMMIT: a retried COMMIT would be answered "already committed" and
                        # the message never stored.
                        self._undo_commits([entries[i][0]])
                        why = f"{put.status.name} {put.remark}" if isinstance(put, PutMessageResult) else str(put)
                        results[i] = EndResult(ResponseCode.SYSTEM_ERROR,
                                               f"storing the committed message failed: {why}")
                # The two op records share one write of their own. A COMMIT whose op record is refused stands: its
                # messages are the record (recovery finds them by UNIQ_KEY). A ROLLBACK is nothing but its op
                # record: refused, it is undone, or it would be forgotten by a restart after being answered.
                rolled_back = (await asyncio.gather(
                    self._write_op("COMMIT", found + [entries[i][0] for i, _ in stored]),
                    self._write_op("ROLLBACK", rolling_back)))[1]
                if not rolled_back:
                    for i, _ in rollbacks:
                        self._restore(entries[i][0], self._rolling_back[entries[i][0]][0])
                        results[i] = EndResult(ResponseCode.SYSTEM_ERROR, "the ROLLBACK could not be recorded (the "
                                               "store refused its op record): the transaction stays pending")
                    rollbacks = []
        except BaseException:
            self._undo_commits(committing[ended:])
            raise
        finally:
            in_writing = self._committing
            for half_offset in committing:
                in_writing.pop(half_offset, None)
            for half_offset in rolling_back:
                self._rolling_back.pop(half_offset, None)
            if self._recovered_before:
                self._recovered_before.difference_update(committing, rolling_back)
            self._compact_names()
        if stored or rollbacks:
            age_ms = self.store.clock.age_ms
            latencies = self.metrics.commit_latency_ms
            group = self.metrics.group(producer_group)  # every half's (_check_prepare_message)
            for _, half in stored:
                latency = age_ms(half.commit_log_offset, half.store_timestamp)
                latencies.append(latency)
                group.committed(latency)
            group.rollbacks += len(rollbacks)
        if overruled:
            committed = {i for i, _ in stored}
            for i in overruled:
                if i in committed:
                    results[i] = self._repeat(entries[i][0], Outcome.ROLLBACK, None)
        for i, _ in rollbacks:
            results[i] = _STORED[ResponseCode.SUCCESS]
        self.metrics.commits += len(stored)
        self.metrics.rollbacks += len(rollbacks)
        if log.isEnabledFor(logging.DEBUG):
            for i, half in stored + rollbacks:
                log.debug("transaction %s %s by %s", half.msg_id, entries[i][2].name, source)

    async def _store_decided(self, groups: list[list[MessageExt]], committed: list[int], rolled_back: list[int]
                             ) -> tuple[list[PutMessageResult | Exception], bool]:
        """Store the real messages of each commit (``groups``) and, when they fit one put of ``PUT_SLICE``, the op
        records of the decisions (COMMIT of the half offsets ``committed``, ROLLBACK of ``rolled_back``) in the
        same put, after them: one write and one flush wait for a whole gathering of decisions. Returns each
        commit's result and whether the op records were stored. When that put is refused (it stored nothing),
        the commits are stored as ``_store_reals`` stores them, each alone if need be, and the caller writes
        the op records of those stored."""
        reals = [msg for group in groups for msg in group]
        if len(reals) <= PUT_SLICE:
            ops = self._op_messages({"COMMIT": committed, "ROLLBACK": rolled_back})
            if not reals and not ops:
                return [], True
            try:
                together: PutMessageResult | None = await self.store.put_messages(reals + ops)
            except Exception as exc:
                log.warning("the put of %d decisions failed (%s): storing each commit alone", len(groups), exc)
                together = None
            if together is not None and together.stored:
                return [together] * len(groups), True
        return await self._store_reals(groups), False

    async def _store_reals(self, groups: list[list[MessageExt]]) -> list[PutMessageResult | Exception]:
        """Store the real messages of each commit (never none), a commit's never split, in puts of about ``PUT_SLICE``
        messages started one per loop iteration: a decision committing many batches does not hold the loop
        (the flush waits overlap). Returns the result of each group's put, or the exception it raised."""
        slices: list[tuple[list[int], list[MessageExt]]] = []
        for g, reals in enumerate(groups):
            if not slices or (slices[-1][1] and len(slices[-1][1]) + len(reals) > PUT_SLICE):
                slices.append(([], []))
            slices[-1][0].append(g)
            slices[-1][1].extend(reals)
        puts: list[asyncio.Future[PutMessageResult]] = []
        for n, (_, msgs) in enumerate(slices):
            if n:
                await asyncio.sleep(0)
            puts.append(asyncio.ensure_future(self.store.put_messages(msgs)))
        out: list[PutMessageResult | Exception] = []
        for (members, _), result in zip(slices, await asyncio.gather(*puts, return_exceptions=True), strict=True):
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result
            if isinstance(result, PutMessageResult) and not result.stored and len(members) > 1:
                # A put is all or nothing: one commit the store refuses must not fail its neighbours.
                out += [await self.store.put_messages(groups[g]) for g in members]
            else:
                out += [result] * len(members)
        return out

    def _compact_names(self) -> None:
        """Rebuild the table's name list when it is due, with the packed entries the decisions being written keep
        to go back to: under steady traffic a moment with none may never come."""
        if self.table.names_to_compact():
            self._renumber_held(self.table.compact_names())

    def _renumber_held(self, names: list[str]) -> None:
        """The packed entries kept by the decisions being written (their ``Before``), whose name indexes point into
        ``names``, renumbered for the table's list now."""
        adopt = self.table.adopt
        for h, (outcome, packed, checks) in self._committing.items():
            if packed is not None:
                self._committing[h] = (outcome, adopt(packed, names), checks)
        for h, ((outcome, packed, checks), since) in self._rolling_back.items():
            if packed is not None:
                self._rolling_back[h] = ((outcome, adopt(packed, names), checks), since)

    def _undo_commits(self, half_offsets: list[int]) -> None:
        """Commits that did not reach the log: each transaction is as it was before (``_committing``)."""
        for half_offset in half_offsets:
            self._restore(half_offset, self._committing.pop(half_offset))

    def _restore(self, half_offset: int, before: Before) -> None:
        """A decision that did not reach the log: the transaction is as it was before it (unless the table was
        trimmed past it meanwhile: then it is gone with its half message)."""
        if half_offset < self.table.outcomes_base:
            return
        outcome, packed, checks = before
        if half_offset in self._recovered_before:
            self.table.recovered.add(half_offset)  # its commit may be in the log in part: look again
        if packed is not None:
            self.table.reopen(half_offset, packed, self.now_s() + 1)
        else:
            self.table.decide(half_offset, outcome)
            if outcome == Outcome.DISCARD:
                self.table.discarded[half_offset] = checks

    def _repeat(self, half_offset: int, outcome: Outcome, first: EndResult | None) -> EndResult:
        current = self.table.outcome(half_offset)
        if current == outcome:
            self.metrics.duplicates += 1
            return EndResult(ResponseCode.SUCCESS, f"transaction already {_DONE[current]}: nothing changed")
        if current in (Outcome.COMMIT, Outcome.ROLLBACK):
            self.metrics.conflicts += 1
            code = ResponseCode.TRANSACTION_SHOULD_COMMIT if current == Outcome.COMMIT \
                else ResponseCode.TRANSACTION_SHOULD_ROLLBACK
            remark = (f"transaction at half offset {half_offset} was already {_DONE[current]}; "
                      f"{outcome.name} refused (the first decision wins)")
            self._conflicts_log.refused("", remark)  # a producer may repeat one at will: folded, counted
            return EndResult(code, remark)
        return first or EndResult(ResponseCode.SYSTEM_ERROR, "transaction decision failed")

    @staticmethod
    def _check_prepare_message(half: MessageExt, group: str, half_offset: int, commit_log_offset: int) -> str | None:
        if half.topic != RMQ_SYS_TRANS_HALF_TOPIC or half.properties.get(MessageConst.PRODUCER_GROUP) != group:
            return _no_half(group, commit_log_offset)
        if half.queue_offset != half_offset:
            return "The transaction state table offset wrong"
        if half.commit_log_offset != commit_log_offset:
            return "The commit log offset wrong"
        return None

    @staticmethod
    def real_messages(half: MessageExt, half_offset: int, commit_log_offset: int) -> list[MessageExt]:
        """What a COMMIT of ``half`` stores: its real message, or, for a batch half, one per message it carries."""
        props = half.properties
        topic = props[_REAL_TOPIC]
        queue_id = int(props.get(_REAL_QUEUE_ID, "0"))
        sys_flag = _reset_transaction_value(half.sys_flag, _COMMIT_TYPE)
        if HALF_BATCH not in props:
            real = MessageExt(topic, half.body, props, flag=half.flag, queue_id=queue_id, sys_flag=sys_flag,
                              born_timestamp=half.born_timestamp, born_host=half.born_host,
                              store_host=half.store_host, reconsume_times=half.reconsume_times,
                              prepared_transaction_offset=commit_log_offset)
            inner = real.properties  # its own copy: the half's stay as they are
            for name in _HALF_ONLY:
                inner.pop(name, None)
            inner[_PREPARED_QUEUE_OFFSET] = str(half_offset)
            return [real]
        link = {MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET: str(half_offset),
                MessageConst.TRANSACTION_ID: props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")}
        return [MessageExt(topic, body, {**inner, **link}, flag=flag, queue_id=queue_id, sys_flag=sys_flag,
                           born_timestamp=half.born_timestamp, born_host=half.born_host, store_host=half.store_host,
                           prepared_transaction_offset=commit_log_offset)
                for flag, body, inner in decode_batch(half.body)]

    def _not_in_log(self, half: MessageExt, reals: list[MessageExt]) -> list[MessageExt]:
        """Of the real messages of a commit of ``half``, those not in the log yet. After a crash, a commit can be
        in the log without its op record, or (a batch cut short) in part: found by ``UNIQ_KEY`` in the index."""
        topic = half.properties.get(MessageConst.REAL_TOPIC, "")
        left = []
        for real in reals:
            uniq = real.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            if not uniq or not any(m.prepared_transaction_offset == half.commit_log_offset
                                   for m in self.store.query_message(topic, uniq, 64)):
                left.append(real)
        return left

    async def resolve_recovered(self, half: MessageExt, half_offset: int) -> bool:
        """For a transaction recovery found pending: True when its commit is in the log, whole or (a batch cut
        short by the crash) in part; it is then recorded as committed, the missing part stored first."""
        if half_offset not in self.table.recovered:
            return False
        try:
            reals = self.real_messages(half, half_offset, half.commit_log_offset)
        except RemoteProtocolError:
            reals = []  # an unreadable batch body: it is checked, and its decision answered as unreadable
        if len(self._not_in_log(half, reals)) == len(reals):
            self.table.recovered.discard(half_offset)
            return False
        await self.end_transaction(producer_group=half.properties.get(MessageConst.PRODUCER_GROUP, ""),
                                   half_offset=half_offset, commit_log_offset=half.commit_log_offset,
                                   outcome=Outcome.COMMIT, source="recovery")
        return True

    # --- discard and resume ---------------------------------------------------------------------------

    async def discard(self, half: MessageExt, half_offset: int, checks: int, why: str) -> None:
        if self.table.info(half_offset) is None:
            return  # decided while the check pass was busy with others
        # Decide before the first await: a COMMIT arriving meanwhile then finds DISCARD (and wins) instead of
        # being overwritten by it, which let `tx resume` bring a committed transaction back and commit it twice.
        self.table.decide(half_offset, Outcome.DISCARD)
        copy = MessageExt(RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, half.body, dict(half.properties), flag=half.flag,
                          queue_id=0, sys_flag=half.sys_flag, born_timestamp=half.born_timestamp,
                          born_host=half.born_host, store_host=half.store_host)
        copy.properties[MessageConst.TRANSACTION_CHECK_TIMES] = str(checks)
        copy.properties[MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET] = str(half_offset)
        await self.store.put_message(copy)
        await self._write_op("DISCARD", [half_offset])
        self.metrics.discards += 1
        self.metrics.of(half).discards += 1
        log.warning("transaction %s of group %s discarded to %s after %d checks: %s", half.msg_id,
                    half.properties.get(MessageConst.PRODUCER_GROUP), RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, checks, why)
        self._compact_names()  # orphans of made-up groups end here, never decided

    async def resume(self, half_offset: int) -> str | None:
        """Put a discarded transaction back into checking; returns an error text or None."""
        outcome = self.table.outcome(half_offset)
        if outcome is EXPIRED:
            return f"half message {half_offset} {_EXPIRED}"
        if outcome != Outcome.DISCARD:
            return f"transaction at half offset {half_offset} is {outcome.name}, not DISCARD"
        half = self.half_message(half_offset)
        if half is None:
            return f"half message {half_offset} is no longer in the log"
        self._track(half_offset, half, self.now_s())
        await self._write_op("RESUME", [half_offset])
        self.metrics.resumes += 1
        log.info("transaction %s resumed into checking", half.msg_id)
        return None

    def half_message(self, half_offset: int) -> MessageExt | None:
        got = self.store.get_message(RMQ_SYS_TRANS_HALF_TOPIC, 0, half_offset, 1)
        if got.status != GetMessageStatus.FOUND or not got.messages:
            return None
        return decode_message(got.messages[0])[0]

    # --- op records -----------------------------------------------------------------------------------

    async def _write_op(self, op: str, half_offsets: list[int]) -> bool:
        """Record ``op`` for ``half_offsets``; return once the store answered, whether it stored the record (a
        full disk refuses it). The ops asked for in one loop iteration share one write: one record per kind, in
        the order the kinds were first asked for."""
        if not half_offsets:
            return True
        self._op_queue.setdefault(op, []).extend(half_offsets)
        if self._op_written is None:
            self._op_written = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(self._flush_ops)
        return await asyncio.shield(self._op_written)

    def _op_messages(self, offsets_by_op: dict[str, list[int]]) -> list[MessageExt]:
        """One op record per kind with half offsets, in the order of ``offsets_by_op``."""
        now = self.store.clock.wall_ms()
        return [MessageExt(RMQ_SYS_TRANS_OP_HALF_TOPIC, ",".join(map(str, offsets)).encode(),
                           {MessageConst.TAGS: REMOVE_TAG, OP_PROPERTY: op}, queue_id=0, born_timestamp=now,
                           store_host=self.store.config.store_host) for op, offsets in offsets_by_op.items() if offsets]

    def _flush_ops(self) -> None:
        queue, written = self._op_queue, self._op_written
        self._op_queue, self._op_written = {}, None
        msgs = self._op_messages(queue)

        def done(task: asyncio.Future[PutMessageResult]) -> None:
            assert written is not None
            if task.cancelled():
                written.cancel()
            elif task.exception() is not None:
                written.set_exception(task.exception())  # type: ignore[arg-type]
            else:
                result = task.result()
                if not result.stored:
                    log.error("op records %s not stored: %s %s", list(queue), result.status.name, result.remark)
                written.set_result(result.stored)

        asyncio.ensure_future(self.store.put_messages(msgs)).add_done_callback(done)

    async def record_checks(self, half_offsets: list[int]) -> None:
        await self._write_op("CHECK", half_offsets)

    # --- retention ------------------------------------------------------------------------------------

    def trim(self, *, always: bool = False) -> bool:
        """Forget the transactions whose half messages retention deleted (the half queue's start moved past the
        table's base), once that frees enough of the table to pay for the copy, or ``always``. Pending and
        discarded ones among them are dropped, as RocketMQ's check skips a half it can no longer read: their
        bodies are gone, so nothing can commit them. One log line per trim."""
        min_offset = self.store.get_min_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0)
        base = self.table.outcomes_base
        if min_offset <= base or not (always or self.table.due_for_trim(min_offset)):
            return False
        pending, discarded = self.table.trim(min_offset)
        log.info("retention deleted the half messages below offset %d: transaction table trimmed from %d, "
                 "%d pending and %d discarded transactions dropped with their halves", min_offset, base, pending,
                 discarded)
        return True

    def half_gone(self, half_offset: int) -> bool:
        """Whether retention deleted the half message at ``half_offset`` (it lies before the half queue's start)."""
        return half_offset < self.store.get_min_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0)

    # --- recovery -------------------------------------------------------------------------------------

    def snapshot(self) -> bool:
        """Trim the table to what retention left (``trim``), then write it to ``snapshot_path`` if it changed
        since the last one. Runs on the loop thread with no await, and flushes the store first, so every record
        the snapshot reflects is on disk. The caller keeps it out of check passes (their counts reach the log in
        one op record at the end); it runs on slaves too, so a slave's table is trimmed like its master's."""
        trimmed = self.trim()
        if self.snapshot_path is None:
            return False
        covers = (self.store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0),
                  self.store.get_max_offset_in_queue(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0))
        if covers == self._snapshot_covers and not trimmed:
            return False
        self.store.flush_and_checkpoint()
        as_before = dict(self._committing)
        if self._rolling_back:
            logged = self._rollbacks_in_log(min(since for _, since in self._rolling_back.values()))
            as_before.update((h, before) for h, (before, _) in self._rolling_back.items() if h not in logged)
        write_atomic(self.snapshot_path, self.table.to_snapshot(*covers, as_before=as_before))
        self._snapshot_covers = covers
        return True

    def _rollbacks_in_log(self, since: int) -> set[int]:
        """The half offsets of the ROLLBACK op records from op queue offset ``since`` on (a few recent records)."""
        found: set[int] = set()

        def collect(op: MessageExt) -> None:
            if op.properties.get(OP_PROPERTY) == "ROLLBACK":
                found.update(_op_offsets(op))
        self._replay(RMQ_SYS_TRANS_OP_HALF_TOPIC, collect, since)
        return found

    def _load_snapshot(self) -> tuple[int, int] | None:
        """Take the table from the snapshot; return the half and op queue offsets to replay from."""
        if self.snapshot_path is None or not self.snapshot_path.exists():
            return None
        try:
            # The snapshot keeps whole store seconds, rounded down: a first check counted from one would come up to a
            # second before transactionTimeOut. Counted from the second after it, never early.
            now_s, timeout_s = self.now_s(), -(-self.transaction_timeout_ms // 1000)
            table, half_from, op_from = TransactionStateTable.from_snapshot(
                self.snapshot_path.read_bytes(), lambda store_s: max(store_s + 1 + timeout_s, now_s),
                lambda wall_s: self.store.clock.elapsed_of_wall(wall_s * 1000) // 1000, now_s)
        except (ValueError, IndexError, struct.error, orjson.JSONDecodeError) as exc:
            log.warning("transaction snapshot %s ignored (%s): replaying the whole half and op queues",
                        self.snapshot_path, exc)
            return None
        if half_from > self.store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0) or \
                op_from > self.store.get_max_offset_in_queue(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0) or \
                table.outcomes_base > self.store.get_min_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0):
            log.warning("transaction snapshot %s does not fit the log (ahead of its end, or trimmed past its start): "
                        "replaying the whole half and op queues", self.snapshot_path)
            return None
        self.table = table
        self._snapshot_covers = (half_from, op_from)
        return half_from, op_from

    def recover(self) -> None:
        """Rebuild the table: from the last snapshot plus the half and op records after it, or from the whole
        half and op queues when there is no usable snapshot (the log is the truth). Either way the table starts
        at the half queue's start: what retention deleted since the snapshot is dropped, and a full replay begins
        there."""
        started = time.monotonic()
        start = self._load_snapshot()
        if self.trim(always=True):
            self._snapshot_covers = (-1, -1)  # the next snapshot leaves out what was trimmed
        halves = self._replay(RMQ_SYS_TRANS_HALF_TOPIC, self._replay_half, start[0] if start else None)
        ops = self._replay(RMQ_SYS_TRANS_OP_HALF_TOPIC, self._replay_op, start[1] if start else None)
        # Discarded ones too: a COMMIT is still accepted for them (then `tx resume`), and may have been cut short.
        self.table.recovered = set(self.table.pending) | set(self.table.discarded)
        log.info("transactions recovered in %.2fs (%s): %d half, %d op records replayed, %d pending, %d discarded",
                 time.monotonic() - started, "from snapshot" if start else "full replay", halves, ops,
                 len(self.table.pending), len(self.table.discarded))

    def _replay(self, topic: str, apply, start: int | None = None) -> int:
        offset = max(start or 0, self.store.get_min_offset_in_queue(topic, 0))
        end = self.store.get_max_offset_in_queue(topic, 0)
        count = 0
        while offset < end:
            got = self.store.get_message(topic, 0, offset, 256, 4 * 1024 * 1024)
            if got.status != GetMessageStatus.FOUND:
                offset = max(offset + 1, got.next_begin_offset)
                continue
            for raw in got.messages:
                msg, _ = decode_message(raw)
                apply(msg)
                count += 1
            offset = got.next_begin_offset
        return count

    def rebuild(self, truncated_at: int = 0) -> None:
        """Start the table over from the log, which was truncated under it (a slave whose master lost a tail):
        the snapshot if it is not ahead of the log, and the records after it."""
        log.warning("commit log truncated at %d: rebuilding the transaction table", truncated_at)
        self._forget_recent_halves()  # a remembered half may be one the truncation removed
        old, self.table = self.table, TransactionStateTable()
        self._snapshot_covers = (-1, -1)
        self.recover()
        # A decision being written meanwhile goes back, if refused, to its entry numbered as the new table names.
        self._renumber_held(old.names)

    def take_over(self) -> int:
        """A slave made master (controller mode): its followed table becomes the master's at once. Every pending
        transaction goes on the check wheel (due now once its immunity is over), and each is marked recovered
        as after a crash: the old master may have stored a COMMIT's real messages without its op record, and
        a second COMMIT must then find them instead of storing them again. Returns how many are pending."""
        self._forget_recent_halves()  # remembered while this broker was master before: the log decides now
        now = self.now_s()
        timeout_s = -(-self.transaction_timeout_ms // 1000)
        for half_offset in list(self.table.pending):
            info = self.table.info(half_offset)
            if info is not None:  # from the second after its (rounded down) store second: never early
                self.table.schedule(half_offset, max(now, info.store_time_s + 1 + timeout_s))
        self.table.recovered = set(self.table.pending) | set(self.table.discarded)
        log.warning("taking over %d pending transactions for check-back", len(self.table.pending))
        return len(self.table.pending)

    def _forget_recent_halves(self) -> None:
        self._recent_halves.clear()
        self._recent_bytes = 0

    def follow(self, req: DispatchRequest) -> None:
        """A slave's dispatcher: keep the table current from the replicated half and op records, so that a
        slave made master can check back at once, without a replay. Nothing goes on the check wheel: a slave
        sends no check-backs (a promotion schedules the pending transactions)."""
        if req.topic == RMQ_SYS_TRANS_HALF_TOPIC:
            half = self.store.look_message_by_offset(req.commit_log_offset)
            self._track(half.queue_offset, half, 0, schedule=False)
        elif req.topic == RMQ_SYS_TRANS_OP_HALF_TOPIC:
            self._replay_op(self.store.look_message_by_offset(req.commit_log_offset))
            self._compact_names()  # a slave writes no decision: its names of ended ones go here

    def _replay_half(self, half: MessageExt) -> None:
        self._track(half.queue_offset, half, max(self._first_check_s(half), self.now_s()))

    def _replay_op(self, op: MessageExt) -> None:
        kind = op.properties.get(OP_PROPERTY, "COMMIT")
        for half_offset in _op_offsets(op):
            if kind in _OP_OUTCOMES:
                if self.table.outcome(half_offset) not in (Outcome.COMMIT, Outcome.ROLLBACK):
                    self.table.decide(half_offset, _OP_OUTCOMES[kind])
            elif kind == "CHECK":
                self.table.count_check(half_offset)
            elif kind == "RESUME" and self.table.outcome(half_offset) == Outcome.DISCARD:
                half = self.half_message(half_offset)
                if half is not None:
                    # Its wheel entry from _replay_half is still there: a second one would mean two checks a pass.
                    self._track(half_offset, half, self.now_s(), schedule=False)


def _op_offsets(op: MessageExt) -> list[int]:
    """The half offsets an op record names (none, with one log line, when its body is unreadable)."""
    try:
        return [int(x) for x in op.body.decode().split(",") if x]
    except ValueError:
        log.error("unreadable op record at %d ignored", op.commit_log_offset)
        return []
