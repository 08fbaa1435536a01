"""What a transaction service keeps between the phases of a transaction: the state table, the decisions being
written, the recently stored halves, the op records; and the timing every phase shares (when a half was stored,
when it is first checked, by the store's elapsed-time account)."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from txmq.broker.config import DEFAULT_ORPHAN_FACTOR
from txmq.broker.consumer_offset_manager import DEFAULT_MAX_ENTRIES
from txmq.broker.transaction.metrics import TransactionMetrics
from txmq.broker.transaction.ops import OpQueue
from txmq.broker.transaction.state import Before, Outcome, TransactionStateTable
from txmq.message import MessageConst, MessageExt, decode_message
from txmq.refusals import RefusalLog
from txmq.store import DefaultMessageStore, GetMessageStatus
from txmq.store.group_commit import Waiter
from txmq.store.queued import look_queued_message
from txmq.topic import RMQ_SYS_TRANS_HALF_TOPIC

log = logging.getLogger("txmq.transaction")

# Memory a remembered half costs beyond its body: the MessageExt, its properties dict and strings, the ints, the
# cache's slot (tracemalloc: about 550 bytes for a half with the usual five properties), the (half, stored ms) pair
# the cache keeps it in (a tuple and an int, about 90 more) and the cache's order link (about 50).
RECENT_HALF_OVERHEAD = 700
# read per half (``_track_stored``): module constants, not class attribute reads (about 15 ns each, interpreted)
_REAL_TOPIC = MessageConst.REAL_TOPIC
_PRODUCER_GROUP, _CHECK_IMMUNITY = MessageConst.PRODUCER_GROUP, MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS

# One decision: the transaction (half offset and the half message's commit-log offset) and its outcome. A plain
# tuple: a NamedTuple's constructor is a Python function, about 0.4 µs per decision.
EndEntry = tuple[int, int, Outcome]


@dataclass(frozen=True, slots=True)
class EndResult:
    """A decision's answer: the response code and remark its END_TRANSACTION (or gRPC call) is answered with."""

    code: int
    remark: str | None = None


class TransactionTracking:
    """The state of the transactions of one broker's store, and the steps every phase takes on it."""

    def __init__(self, store: DefaultMessageStore, *, transaction_timeout_ms: int, file_reserved_time_h: float,
                 snapshot_path: Path | None = None, recent_halves_max_bytes: int = 32 * 1024 * 1024,
                 orphan_factor: int = DEFAULT_ORPHAN_FACTOR, metrics_max_groups: int = DEFAULT_MAX_ENTRIES) -> None:
        self.store = store
        # a COMMIT's real message that carries a delivery time goes to the timer topic (txmq.broker.timer)
        self.divert_timer: Callable[[MessageExt], None] | None = None
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
        self.ops = OpQueue(store)
        # by commit-log offset, oldest first: the half and when it was stored (``_stored_ms``). An OrderedDict: the
        # oldest goes in O(1) once the cache is full, where a dict's first key is found past every slot its
        # removed keys left (at 32 MB of 256-byte halves, about 20 µs a half stored)
        self._recent_halves: OrderedDict[int, tuple[MessageExt, int]] = OrderedDict()
        self._recent_bytes = 0
        # single decisions asked for in this loop iteration, by (producer group, source): decided together, each
        # answered through its waiter (the same place in the second list)
        self._gathered_ends: dict[tuple[str, str], tuple[list[EndEntry], list[Waiter]]] = {}
        self.recent_halves_max_bytes = recent_halves_max_bytes
        self._conflicts_log = RefusalLog(log, "transaction decision refused")

    def _track_stored(self, half: MessageExt) -> None:
        """A half message just stored: tracked as pending (``_track``, first checked at ``first_check_s``) and
        remembered. Written out in one call, not three, with the immunity looked up only when the half carries one:
        every transactional send runs it.

        Remembered, a half is kept for its decision, which usually follows within milliseconds: the commit then
        neither reads nor decodes it again, nor works out again when it was stored (its commit latency counts from
        then). Oldest first out past ``recent_halves_max_bytes``, counting what a remembered half really costs: its
        body and its Python objects (``RECENT_HALF_OVERHEAD``)."""
        props = half.properties
        clo = half.commit_log_offset
        stored_ms = self.store.clock.elapsed_of(clo, half.store_timestamp)  # _stored_ms, without its call
        immunity_ms = self._immunity_ms(half) if _CHECK_IMMUNITY in props else self.transaction_timeout_ms
        self.table.add_pending(half.queue_offset, props.get(_REAL_TOPIC, ""), props.get(_PRODUCER_GROUP, ""),
                               stored_ms // 1000, -(-(stored_ms + immunity_ms) // 1000))
        recent = self._recent_halves
        recent[clo] = (half, stored_ms)
        self._recent_bytes += len(half.body) + RECENT_HALF_OVERHEAD
        while self._recent_bytes > self.recent_halves_max_bytes and recent:
            self._recent_bytes -= len(recent.popitem(last=False)[1][0].body) + RECENT_HALF_OVERHEAD

    def _taken_half(self, commit_log_offset: int) -> tuple[MessageExt, int]:
        """The half message stored at ``commit_log_offset`` and when it was stored (``_stored_ms``): remembered, both
        are taken out of memory; else read from the store, where its consume queue must name it (raises
        ``StoreError`` when there is none)."""
        taken = self._recent_halves.pop(commit_log_offset, None)
        if taken is not None:
            self._recent_bytes -= len(taken[0].body) + RECENT_HALF_OVERHEAD
            return taken
        # A record a producer forged in a message body is in no queue: taken for a half, it decided another group's
        # transaction with a body of its own. Its caller checks that the queue is the half queue.
        half = look_queued_message(self.store, commit_log_offset)
        return half, self._stored_ms(half)

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

    def first_check_s(self, half: MessageExt, *, immunity: bool = True) -> int:
        """The first whole second of the account at which the stored half message is at least its immunity time old
        (the wheel has one-second buckets: rounding down would check up to a second before ``transactionTimeOut``);
        not ``immunity``: ``transactionTimeOut`` old, whatever the half asks."""
        wait_ms = self._immunity_ms(half) if immunity else self.transaction_timeout_ms
        return -(-(self._stored_ms(half) + wait_ms) // 1000)

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

    def _forget_recent_halves(self) -> None:
        self._recent_halves.clear()
        self._recent_bytes = 0

    def half_message(self, half_offset: int) -> MessageExt | None:
        got = self.store.get_message(RMQ_SYS_TRANS_HALF_TOPIC, 0, half_offset, 1)
        if got.status != GetMessageStatus.FOUND or not got.messages:
            return None
        return decode_message(got.messages[0])[0]
