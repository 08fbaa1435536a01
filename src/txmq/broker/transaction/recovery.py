"""The transaction table rebuilt and kept: snapshots, recovery from the half and op queues, a slave following its
master's records, a promoted slave taking over, and the table trimmed as retention deletes halves."""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable

import orjson

from txmq.broker.transaction.ops import OP_PROPERTY, op_offsets
from txmq.broker.transaction.state import Outcome, TransactionStateTable
from txmq.broker.transaction.tracking import TransactionTracking
from txmq.fileio import write_atomic
from txmq.message import MessageExt, decode_message
from txmq.store import DispatchRequest, GetMessageStatus
from txmq.topic import RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC

log = logging.getLogger("txmq.transaction")

_OP_OUTCOMES = {"COMMIT": Outcome.COMMIT, "ROLLBACK": Outcome.ROLLBACK, "DISCARD": Outcome.DISCARD}


class TransactionRecovery(TransactionTracking):
    """Keeps the table what the log says across restarts, truncations, role changes and retention."""

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

    def snapshot(self) -> bool:
        """Trim the table to what retention left (``trim``), then write it to ``snapshot_path`` if it changed
        since the last one. Runs on the loop thread with no await, and flushes the store first, so every record
        the snapshot reflects is on disk: none is written once the store lost its durability (a failed fsync; the
        store logged it). The caller keeps it out of check passes (their counts reach the log in
        one op record at the end); it runs on slaves too, so a slave's table is trimmed like its master's."""
        trimmed = self.trim()
        if self.snapshot_path is None:
            return False
        covers = (self.store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0),
                  self.store.get_max_offset_in_queue(RMQ_SYS_TRANS_OP_HALF_TOPIC, 0))
        if covers == self._snapshot_covers and not trimmed:
            return False
        if self.store.durability.lost:  # nothing is flushed again until a restart: the snapshot on disk stays
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
                found.update(op_offsets(op))
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

    def _replay(self, topic: str, apply: Callable[[MessageExt], None], start: int | None = None) -> int:
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
        """Tracked as pending, first looked at once ``transactionTimeOut`` old whatever immunity it asks: a commit the
        crash cut short is then finished (``resolve_recovered``), which asks the producer nothing; the check pass
        holds a check-back to the half's immunity."""
        self._track(half.queue_offset, half, max(self.first_check_s(half, immunity=False), self.now_s()))

    def _replay_op(self, op: MessageExt) -> None:
        kind = op.properties.get(OP_PROPERTY, "COMMIT")
        for half_offset in op_offsets(op):
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
