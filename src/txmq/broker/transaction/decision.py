"""Phase two, COMMIT or ROLLBACK (RocketMQ's ``EndTransactionProcessor`` logic), with txmq's contract on top:

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
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from typing import Any

from txmq.broker.transaction.half import real_messages
from txmq.broker.transaction.state import COMMIT, EXPIRED, FINAL, ROLLBACK, Before, Outcome
from txmq.broker.transaction.tracking import RECENT_HALF_OVERHEAD, EndEntry, EndResult, TransactionTracking
from txmq.errors import RemoteProtocolError, StoreError
from txmq.message import MessageConst, MessageExt, MessageSysFlag
from txmq.remoting.codes import ResponseCode
from txmq.store import PutMessageResult, PutMessageStatus
from txmq.store.group_commit import Waiter
from txmq.topic import RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC

log = logging.getLogger("txmq.transaction")

PUT_SLICE = 1024  # real messages per store put when a decision commits many: the loop serves others between
_DONE = {Outcome.COMMIT: "committed", Outcome.ROLLBACK: "rolled back"}
_PRODUCER_GROUP = MessageConst.PRODUCER_GROUP
# A decision claimed for a call: its entry, its half, when the half was stored (ms of the elapsed-time account) and
# its outcome before. A commit being stored: its entry, its half, the real messages and the half's store time.
Claimed = tuple[int, MessageExt, int, Outcome]
Commit = tuple[int, MessageExt, list[MessageExt], int]
EXPIRED_REMARK = "was deleted by retention (fileReservedTime): its transaction can no longer be ended"


# the answers of stored decisions, shared: no object per decision
_STORED: dict[int, EndResult] = {
    code: EndResult(code)
    for code in (ResponseCode.SUCCESS, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.FLUSH_DISK_TIMEOUT)}


def _expired(where: str) -> EndResult:
    """The answer to a decision for a transaction whose half message retention deleted: a COMMIT cannot store
    its body any more, and the table no longer knows whether it was decided, so nothing is accepted."""
    return EndResult(ResponseCode.SYSTEM_ERROR, f"the half message at {where} {EXPIRED_REMARK}")


def _stored_answer(put: PutMessageResult) -> EndResult:
    """The answer to a commit whose real messages this stored put holds (a refused op record does not change it)."""
    return _STORED[ResponseCode.SUCCESS if put.ok else ResponseCode.SERVICE_NOT_AVAILABLE
                   if put.status is PutMessageStatus.NOT_ACKNOWLEDGED else ResponseCode.FLUSH_DISK_TIMEOUT]


def _commit_of(stored: MessageExt, half: MessageExt) -> bool:
    """Whether ``stored`` is a real message a COMMIT of ``half`` stored: a commit's own type, naming the half (a
    plain message's PREPAREDTRANSACTIONOFFSET is 0, the first record's offset, and its ids are the producer's)."""
    return stored.prepared_transaction_offset == half.commit_log_offset \
        and MessageSysFlag.transaction_value(stored.sys_flag) == MessageSysFlag.TRANSACTION_COMMIT_TYPE


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


class Decisions(TransactionTracking):
    """Applies producers' decisions: gathered per loop iteration, validated one by one, stored together."""

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
        claimed: list[Claimed] = []
        decided: asyncio.Future[list[EndResult | None]] = asyncio.get_running_loop().create_future()
        in_flight, table, recent = self._in_flight, self.table, self._recent_halves
        # No await from here to the decisions in _decide: claiming and deciding are one step on the loop.
        for i, (half_offset, commit_log_offset, outcome) in enumerate(entries):
            taken = recent.pop(commit_log_offset, None)  # _taken_half's usual case, without its call
            if taken is not None:
                self._recent_bytes -= len(taken[0].body) + RECENT_HALF_OVERHEAD
            else:
                try:
                    taken = self._taken_half(commit_log_offset)
                except StoreError:
                    results[i] = _expired(f"commit-log offset {commit_log_offset}") \
                        if commit_log_offset < self.store.min_phy_offset \
                        else EndResult(ResponseCode.SYSTEM_ERROR, _no_half(producer_group, commit_log_offset))
                    continue
            half = taken[0]
            if half.queue_offset != half_offset or half.commit_log_offset != commit_log_offset \
                    or half.topic != RMQ_SYS_TRANS_HALF_TOPIC or half.properties.get(_PRODUCER_GROUP) != producer_group:
                results[i] = EndResult(ResponseCode.SYSTEM_ERROR, self._check_prepare_message(
                    half, producer_group, half_offset, commit_log_offset))
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
                claimed.append((i, half, taken[1], current))
        if claimed:
            try:
                await self._decide(producer_group, entries, claimed, results, source)
                decided.set_result(results)
            except BaseException as exc:
                decided.set_exception(exc)
                decided.exception()  # the waiters, if any, see it; nobody else needs to
                raise
            finally:
                for c in claimed:
                    del self._in_flight[entries[c[0]][0]]
        for i, (deciding, j) in waits:
            try:
                first = (await asyncio.shield(deciding))[j]
            except Exception as exc:
                results[i] = EndResult(ResponseCode.SYSTEM_ERROR, f"the decision this one waited for failed: {exc}")
                continue
            half_offset, _, outcome = entries[i]
            results[i] = self._repeat(half_offset, outcome, first)
        return results  # type: ignore[return-value]

    async def _decide(self, producer_group: str, entries: Sequence[EndEntry], claimed: list[Claimed],
                      results: list[EndResult | None], source: str) -> None:
        """Decide and store the claimed entries: undecided or discarded, each in ``_in_flight`` for this call."""
        found: list[int] = []  # recovered transactions whose commit was already in the log
        commits: list[Commit] = []
        rollbacks: list[tuple[int, MessageExt]] = []  # entry, half (the state before it: _rolling_back)
        overruled: list[int] = []  # ROLLBACKs of a batch whose commit a crash cut short: it is finished instead
        table = self.table  # read per decision: locals, not attribute chains
        pending, discarded, recovered = table.pending, table.discarded, table.recovered
        for i, half, stored_ms, current in claimed:
            half_offset, commit_log_offset, outcome = entries[i]
            # As it was, recovered flag included: a commit that cannot be stored goes back to exactly this.
            before = (current, pending.get(half_offset), discarded.get(half_offset, 0))
            unsure = half_offset in recovered
            if unsure:
                self._recovered_before.add(half_offset)
            try:
                reals = real_messages(half, half_offset, commit_log_offset) if outcome == COMMIT or unsure else []
                if self.divert_timer is not None:
                    for real in reals:
                        self.divert_timer(real)
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
                commits.append((i, half, reals, stored_ms))
            else:
                self._rolling_back[half_offset] = (before, self.store.get_max_offset_in_queue(
                    RMQ_SYS_TRANS_OP_HALF_TOPIC, 0))
                table.decide(half_offset, ROLLBACK)
                rollbacks.append((i, half))
        # Shielded: once started, puts append whatever happens to the caller (a gRPC deadline, a closing
        # server), so their outcome must be judged and recorded, never undone blindly.
        await asyncio.shield(asyncio.get_running_loop().create_task(
            self._store_and_answer(producer_group, entries, commits, rollbacks, found, overruled, results, source)))

    async def _store_and_answer(self, producer_group: str, entries: Sequence[EndEntry], commits: list[Commit],
                                rollbacks: list[tuple[int, MessageExt]], found: list[int],
                                overruled: list[int], results: list[EndResult | None], source: str) -> None:
        """Store the commits' real messages, write the op records, and answer each entry."""
        committing = [entries[c[0]][0] for c in commits]
        rolling_back = [entries[i][0] for i, _ in rollbacks]
        stored: list[Commit] = []  # the commits whose real messages are stored
        ended = 0  # commits stored or undone, in order
        try:
            puts, recorded = await self._store_decided([c[2] for c in commits], found + committing, rolling_back)
            if recorded:
                # The usual case: real messages and op records in one put, stored: one answer for every commit.
                ended = len(commits)
                stored = commits
                if stored:
                    answer = _stored_answer(puts[0])  # type: ignore[arg-type]  # a stored put's result
                    for c in stored:
                        results[c[0]] = answer
            else:
                for commit, put in zip(commits, puts, strict=True):
                    ended += 1
                    i = commit[0]
                    if isinstance(put, PutMessageResult) and put.stored:
                        stored.append(commit)
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
                    self.ops.write("COMMIT", found + [entries[c[0]][0] for c in stored]),
                    self.ops.write("ROLLBACK", rolling_back)))[1]
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
            # from each half's store time (remembered with it: _taken_half) to now, by the elapsed-time account
            now = self.store.clock.elapsed_ms()
            latencies = [max(0, now - c[3]) for c in stored]
            self.metrics.commit_latency_ms.extend(latencies)
            group = self.metrics.group(producer_group)  # every half's (_check_prepare_message)
            group.committed(latencies)
            group.rollbacks += len(rollbacks)
        if overruled:
            committed = {c[0] for c in stored}
            for i in overruled:
                if i in committed:
                    results[i] = self._repeat(entries[i][0], Outcome.ROLLBACK, None)
        for i, _ in rollbacks:
            results[i] = _STORED[ResponseCode.SUCCESS]
        self.metrics.commits += len(stored)
        self.metrics.rollbacks += len(rollbacks)
        if log.isEnabledFor(logging.DEBUG):
            for i, half in [c[:2] for c in stored] + rollbacks:
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
            ops = self.ops.messages({"COMMIT": committed, "ROLLBACK": rolled_back})
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

    def _not_in_log(self, half: MessageExt, reals: list[MessageExt]) -> list[MessageExt]:
        """Of the real messages of a commit of ``half``, those not in the log yet. After a crash, a commit can be
        in the log without its op record, or (a batch cut short) in part: found by ``UNIQ_KEY`` in the index."""
        # in the half's REAL_TOPIC, or, a timer message, in the timer topic (txmq.broker.timer)
        topics = (half.properties.get(MessageConst.REAL_TOPIC, ""), RMQ_SYS_WHEEL_TIMER_TOPIC)
        left = []
        for real in reals:
            uniq = real.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            if not uniq or not any(_commit_of(m, half) for t in topics for m in self.store.query_message(t, uniq, 64)):
                left.append(real)
        return left

    async def resolve_recovered(self, half: MessageExt, half_offset: int) -> bool:
        """For a transaction recovery found pending: True when its commit is in the log, whole or (a batch cut
        short by the crash) in part; it is then recorded as committed, the missing part stored first."""
        if half_offset not in self.table.recovered:
            return False
        try:
            reals = real_messages(half, half_offset, half.commit_log_offset)
        except RemoteProtocolError:
            reals = []  # an unreadable batch body: it is checked, and its decision answered as unreadable
        if len(self._not_in_log(half, reals)) == len(reals):
            self.table.recovered.discard(half_offset)
            return False
        await self.end_transaction(producer_group=half.properties.get(MessageConst.PRODUCER_GROUP, ""),
                                   half_offset=half_offset, commit_log_offset=half.commit_log_offset,
                                   outcome=Outcome.COMMIT, source="recovery")
        return True
