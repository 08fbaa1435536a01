"""Half messages, end of transaction and discards: RocketMQ's ``TransactionalMessageService`` (README,
Transactions). Phase one, the half message, is here; phase two, COMMIT or ROLLBACK, is ``decision.py``; op records
``ops.py``; recovery, snapshots and role changes ``recovery.py``; the state they share ``tracking.py``.

* A half message may carry a batch (txmq's, beyond RocketMQ; ``HALF_BATCH``): its body is the batch as the
  producer sent it, and its transaction is one for all the messages in it. COMMIT stores each as a real
  message of its own (with its own ``UNIQ_KEY`` and the batch's transaction id in ``__transactionId__``).
* A check never rewrites the half message: op records carry outcomes and check counts for many transactions at
  once. Recovery replays half and op queues.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from txmq.broker.transaction.decision import EXPIRED_REMARK, Decisions
from txmq.broker.transaction.half import HALF_BATCH as HALF_BATCH  # the names the send paths import from here
from txmq.broker.transaction.half import half_of
from txmq.broker.transaction.ops import OP_PROPERTY as OP_PROPERTY
from txmq.broker.transaction.recovery import TransactionRecovery
from txmq.broker.transaction.state import EXPIRED, Outcome
from txmq.broker.transaction.tracking import EndEntry as EndEntry
from txmq.broker.transaction.tracking import EndResult as EndResult
from txmq.broker.transaction.tracking import TransactionTracking
from txmq.message import MessageConst, MessageExt
from txmq.store import PutMessageResult
from txmq.store.group_commit import Waiter
from txmq.topic import RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC

log = logging.getLogger("txmq.transaction")


class _Tracking:
    """The answer of a put of half messages (``put_messages``' ``answer``): tracks them, then answers as the
    caller asked. One object per put where a closure was five (its function and four cells), kept alive until
    the put's flush."""

    __slots__ = ("answer", "halves", "msgs", "service")

    def __init__(self, service: TransactionTracking, msgs: Sequence[MessageExt], halves: list[MessageExt],
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


class TransactionalMessageService(Decisions, TransactionRecovery):
    """One broker's transactions: its halves stored and tracked, decided, checked, discarded and recovered."""

    def prepare_message(self, msg: MessageExt, answer: Callable[[PutMessageResult], Any] | None = None,
                        waiter: Waiter | None = None) -> Any:
        """Store ``msg`` as a half message (invisible) and start tracking it; ``waiter`` as ``put_messages``'. Every
        transactional send's: ``prepare_messages`` for one message, without its keyword call and comprehension."""
        halves = [half_of(msg, 0)]
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
        halves = [half_of(msg, half_batch) for msg in msgs]
        return self.store.put_messages(halves, _Tracking(self, msgs, halves, answer), waiter)

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
        await self.ops.write("DISCARD", [half_offset])
        self.metrics.discards += 1
        self.metrics.of(half).discards += 1
        log.warning("transaction %.100s of group %s discarded to %s after %d checks: %s", half.msg_id,
                    half.properties.get(MessageConst.PRODUCER_GROUP), RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, checks, why)
        self._compact_names()  # orphans of made-up groups end here, never decided

    async def resume(self, half_offset: int) -> str | None:
        """Put a discarded transaction back into checking; returns an error text or None."""
        outcome = self.table.outcome(half_offset)
        if outcome is EXPIRED:
            return f"half message {half_offset} {EXPIRED_REMARK}"
        if outcome != Outcome.DISCARD:
            return f"transaction at half offset {half_offset} is {outcome.name}, not DISCARD"
        half = self.half_message(half_offset)
        if half is None:
            return f"half message {half_offset} is no longer in the log"
        self._track(half_offset, half, self.now_s())
        await self.ops.write("RESUME", [half_offset])
        self.metrics.resumes += 1
        log.info("transaction %s resumed into checking", half.msg_id)
        return None

    async def record_checks(self, half_offsets: list[int]) -> None:
        await self.ops.write("CHECK", half_offsets)
