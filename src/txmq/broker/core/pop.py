"""Pop: receive with an invisible duration, ack, change invisible duration — RocketMQ 5's consumption model (the
broker's ``PopMessageProcessor``, ``AckMessageProcessor``, ``ChangeInvisibleTimeProcessor``), which the gRPC
SimpleConsumer and PushConsumer use, over the same consume queues, consumer offsets, reads and counters as pulls
(``PullService``) and the one dead-letter path (``RetryService``).

State per (group, topic, queue), in memory and bounded:

* ``committed``: the group's consumer offset (``ConsumerOffsetManager``): every message below it is consumed.
  It advances over acked prefixes only.
* ``next``: the first queue offset never delivered to the group.
* ``inflight``: delivered, not yet acked: deadline, delivery attempts, the token of the current receipt handle.
* ``acked``: acked offsets above ``committed`` (the holes an unacked message leaves).

A queue is not read further while ``next - committed`` reaches ``MAX_SPAN``, so a group holds at most that many
entries per queue whatever its consumers do. The states are at most ``popStateMaxEntries`` (``max_states``): a
receive may name any group, and each group it names would otherwise hold a state per queue while the broker runs.
To make room, a state with nothing in flight is dropped, the longest idle first (it is read again from the group's
committed offset, which holds all it knew; one whose offset the full offset table could not take goes last); then
a state whose deliveries are all overdue, its group gone (``_abandoned``); when every state holds messages still
invisible, a receive that needs a new one is refused BUSY.

A message not acked before its deadline is delivered again with its attempt count raised; after
``max_delivery_attempts`` it goes to ``%DLQ%<group>``. Messages of one message group (FIFO) are delivered in
order: a queue is not read past a message whose group has a delivery in flight (one made earlier in the same
receive too: a PushConsumer consumes a batch concurrently).

Deadlines are on the monotonic clock: a step of the wall clock neither redelivers a message early nor keeps it
invisible past its duration.

A receipt handle names one delivery of one message to one consumer group::

    "1 <queue id> <queue offset> <commit-log offset> <token> <topic>"

The token is unique per delivery: after a redelivery or a change of invisible duration the old handle no longer
acks (INVALID_HANDLE), as with RocketMQ's pop. Topic names cannot hold spaces, so the topic goes last and needs
no escaping.

This state is not persisted: after a restart, messages between the committed offset and what was acked are
delivered again (at least once), as after a remoting consumer's restart. A new group starts at the queue's
minimum offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from txmq.broker.core.refusal import Kind, Refusal
from txmq.errors import InvalidMessageError, StoreError
from txmq.filter import MessageFilter
from txmq.message import MessageConst, MessageExt, decode_message
from txmq.refusals import RefusalLog
from txmq.store import GetMessageStatus

if TYPE_CHECKING:
    from txmq.broker.consumer_offset_manager import ConsumerOffsetManager
    from txmq.broker.core.pull import PullService
    from txmq.broker.core.retry import RetryService
    from txmq.store import DefaultMessageStore

log = logging.getLogger("txmq.broker")

MAX_SPAN = 4096
# Deliveries looked at by a receive that needs room once no idle state makes it (``_abandoned``): what a refused
# receive costs stays small however many states hold how many deliveries.
ABANDONED_SCAN = 1024
# How long past its deadline a delivery must be for its state to count as left by its group: a long-polling
# receive of the group wakes at the deadline to deliver it again, and a state is not taken from under it.
ABANDONED_GRACE_MS = 1000
# A line per group and LOG_EVERY_S: each receive finding a message due for the dead letters tries it again.
_DEAD_LETTERS_REFUSED = RefusalLog(log, "dead letters not stored, kept in flight")
_tokens = itertools.count(1)
# The deadline of a delivery whose dead letter waits for its store: never due (``forward_to_dead_letter``,
# ``_dead_letter_due``).
_HELD = sys.maxsize


def _now_ms() -> int:
    """Now on the monotonic clock, in ms: what invisible durations count on."""
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    token: int

    def encode(self) -> str:
        return f"1 {self.queue_id} {self.queue_offset} {self.commit_log_offset} {self.token} {self.topic}"

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        """Raises ``Refusal`` INVALID_HANDLE for anything txmq did not hand out."""
        parts = text.split(" ", 5)
        try:
            if len(parts) != 6 or parts[0] != "1" or not parts[5]:
                raise ValueError(text)
            q, off, clo, token = (int(p) for p in parts[1:5])
            if min(q, off, clo, token) < 0:
                raise ValueError(text)
        except ValueError:
            raise Refusal(Kind.INVALID_HANDLE, f"malformed receipt handle {text[:80]!r}") from None
        return cls(parts[5], q, off, clo, token)


@dataclass(slots=True)
class Inflight:
    deadline_ms: int
    attempts: int
    token: int
    commit_log_offset: int
    message_group: str | None
    msg_id: str  # the message's id, which a request that names one must name (``_entry``)


@dataclass(slots=True)
class QueueState:
    committed: int
    next: int
    inflight: dict[int, Inflight] = field(default_factory=dict)
    acked: set[int] = field(default_factory=set)
    groups: Counter[str] = field(default_factory=Counter)  # message groups with a delivery in flight


def _all_overdue(st: QueueState, now: int) -> tuple[bool, int]:
    """Whether every delivery of ``st`` is overdue at ``now`` by ``ABANDONED_GRACE_MS``, and how many were looked
    at to tell (up to the first that is not)."""
    looked = 0
    past = now - ABANDONED_GRACE_MS
    for e in st.inflight.values():
        looked += 1
        if e.deadline_ms >= past:
            return False, looked
    return True, max(looked, 1)


@dataclass(slots=True)
class Delivery:
    message: MessageExt
    handle: ReceiptHandle
    attempts: int
    invisible_ms: int


class PopService:
    def __init__(self, store: DefaultMessageStore, offsets: ConsumerOffsetManager, pulls: PullService,
                 retries: RetryService, *, max_states: int, max_delivery_attempts: int = 16) -> None:
        self.store = store
        self.offsets = offsets
        self.pulls = pulls
        self.retries = retries
        self.max_delivery_attempts = max_delivery_attempts
        self.max_states = max_states
        self.states: dict[tuple[str, str, int], QueueState] = {}
        # the states with nothing in flight, the longest idle first: those dropped to make room for new ones; apart,
        # dropped last, those whose committed offset the offset table does not hold (``_droppable``)
        self._idle: dict[tuple[str, str, int], None] = {}
        self._unkept: dict[tuple[str, str, int], None] = {}
        # the states with deliveries in flight, the longest untouched by a receive, an ack or a look for room first:
        # one whose deliveries are all overdue was left by its group, and may go too (``_abandoned``)
        self._busy: dict[tuple[str, str, int], None] = {}
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._rotation = itertools.count()
        self.store.add_arrival_listener(self._on_arrival)

    # --- long polling -----------------------------------------------------------------------------------

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        for fut in self._waiters.pop(topic, ()):
            if not fut.done():
                fut.set_result(None)

    async def _wait(self, topic: str, timeout_s: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(topic, []).append(fut)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await fut
        finally:
            waiting = self._waiters.get(topic)
            if waiting and fut in waiting:
                waiting.remove(fut)
                if not waiting:
                    del self._waiters[topic]

    async def receive(self, group: str, topic: str, batch: int, invisible_ms: int, poll_ms: int,
                      filt: MessageFilter) -> list[Delivery]:
        """Up to ``batch`` messages, waiting up to ``poll_ms`` for one to arrive or to become visible again."""
        end = time.monotonic() + poll_ms / 1000
        while True:
            got, next_deadline_ms = await self.receive_now(group, topic, batch, invisible_ms, filt)
            left = end - time.monotonic()
            if got or left <= 0:
                return got
            if next_deadline_ms is not None:
                left = min(left, max(0.01, (next_deadline_ms - _now_ms()) / 1000))
            await self._wait(topic, left)

    # --- receive ----------------------------------------------------------------------------------------

    def _queue_ids(self, group: str, topic: str) -> list[int]:
        refused = self.pulls.refusal(group, topic, None)
        if refused is not None:
            raise refused
        cfg = self.pulls.topics.get(topic)
        return list(range(cfg.read_queue_nums)) if cfg is not None else []

    def _admit(self, group: str, topic: str, queues: list[int]) -> None:
        """A state for each of ``queues`` the group has none of yet, before anything is delivered. Raises
        ``Refusal`` BUSY, nothing created, when the bound leaves no room (``_make_room``)."""
        missing = [q for q in queues if (group, topic, q) not in self.states]
        if not missing:
            return
        self._make_room(len(missing), group, topic)
        offsets = self.offsets
        for q in missing:
            committed = offsets.query(group, topic, q)
            if committed < 0:
                committed = self.store.get_min_offset_in_queue(topic, q)
                offsets.commit(group, topic, q, committed)
            key = (group, topic, q)
            self.states[key] = QueueState(committed, committed)
            self._idle[key] = None

    def _make_room(self, count: int, group: str, topic: str) -> None:
        """Room for ``count`` more states within ``max_states``, made by dropping states with nothing in flight
        (``_droppable``), then states their groups left (``_abandoned``). Raises ``Refusal`` BUSY, nothing
        dropped, when there are not enough of them."""
        over = len(self.states) + count - self.max_states
        if over <= 0:
            return
        dropped = self._droppable(over, group, topic)
        if len(dropped) < over:
            dropped += self._abandoned(over - len(dropped), group, topic)
        if len(dropped) < over:
            raise Refusal(Kind.BUSY, f"pop states full: the {len(self.states)} kept (popStateMaxEntries "
                          f"{self.max_states}) hold messages in flight: receive again later")
        self._forget(dropped)

    def _abandoned(self, count: int, group: str, topic: str) -> list[tuple[str, str, int]]:
        """Up to ``count`` states whose every delivery is overdue, not the receiving group's own of ``topic``, the
        longest untouched first: a receive of their group would have delivered those again with new deadlines, so
        none came since. Dropped, the group reads on from its committed offset: what was in flight is delivered
        again as a first attempt, and the handles of those deliveries ack nothing. Those whose committed offset
        only the state knows (``consumerOffsetMaxEntries`` was full) go last: their group then reads the queue from
        its first offset, as after a restart. Without this, groups that receive and leave could hold every state
        and lock new groups out. About ``ABANDONED_SCAN`` deliveries are looked at, and the states looked at and
        kept go last: the next receive looks further, so states still invisible hide none behind them."""
        now = _now_ms()
        found: list[tuple[str, str, int]] = []
        unkept: list[tuple[str, str, int]] = []
        kept: list[tuple[str, str, int]] = []
        budget = ABANDONED_SCAN
        for key in self._busy:
            if len(found) == count or budget <= 0:
                break
            st = self.states[key]
            overdue, looked = _all_overdue(st, now)
            budget -= looked
            if not overdue or (key[0] == group and key[1] == topic):
                kept.append(key)
            else:
                (found if self._offset_kept(key, st) else unkept).append(key)
        taken = count - len(found)
        for key in kept + unkept[taken:]:
            del self._busy[key]
            self._busy[key] = None
        return found + unkept[:taken]

    def _droppable(self, count: int, group: str, topic: str) -> list[tuple[str, str, int]]:
        """Up to ``count`` states with nothing in flight, not the receiving group's own of ``topic``: first those
        whose committed offset the offset table holds (read again, they are as they were), the longest idle first;
        then those only the state knows the offset of (``consumerOffsetMaxEntries`` was full: read again, their
        group gets the queue from its first offset, as after a restart). Those are set apart as found, so that
        each is looked at once until it delivers again."""
        dropped: list[tuple[str, str, int]] = []
        unkept: list[tuple[str, str, int]] = []
        for key in self._idle:
            if len(dropped) == count:
                break
            if key[0] != group or key[1] != topic:
                (dropped if self._offset_kept(key, self.states[key]) else unkept).append(key)
        for key in unkept:
            del self._idle[key]
            self._unkept[key] = None
        for key in self._unkept:
            if len(dropped) == count:
                break
            if key[0] != group or key[1] != topic:
                dropped.append(key)
        return dropped

    def _offset_kept(self, key: tuple[str, str, int], st: QueueState) -> bool:
        """Whether the offset table holds the committed offset of ``st``: dropped, it is read again as it was."""
        return self.offsets.query(*key) == st.committed

    def _mark(self, key: tuple[str, str, int], st: QueueState) -> None:
        """``st`` among the idle states while it has nothing in flight, else last of the busy ones (just
        touched), unless dropped or reset since."""
        if self.states.get(key) is not st:
            return
        self._busy.pop(key, None)
        if st.inflight:
            self._idle.pop(key, None)
            self._unkept.pop(key, None)
            self._busy[key] = None
        elif key not in self._unkept:
            self._idle.setdefault(key, None)

    async def receive_now(self, group: str, topic: str, batch: int, invisible_ms: int,
                          filt: MessageFilter) -> tuple[list[Delivery], int | None]:
        """What can be delivered now, and the earliest deadline of a delivery still in flight."""
        queues = self._queue_ids(group, topic)
        if not queues:
            return [], None
        self._admit(group, topic, queues)
        start = next(self._rotation) % len(queues)
        out: list[Delivery] = []
        earliest: int | None = None
        waited = False
        now = _now_ms()
        for q in queues[start:] + queues[:start]:
            key = (group, topic, q)
            st = self.states.get(key)
            if st is None:  # dropped to make room while this receive waited for a dead letter's store
                continue
            due, waits = await self._redeliver(group, topic, q, st, now, batch - len(out), invisible_ms, out)
            waited = waited or waits
            if due is not None and (earliest is None or due < earliest):
                earliest = due
            if len(out) < batch and self.states.get(key) is st:
                self._read_new(group, topic, q, st, now, batch - len(out), invisible_ms, filt, out)
                self._mark(key, st)
            if len(out) >= batch:
                break
        if waited:
            self._invisible_from_now(group, out, invisible_ms)
        return out, earliest

    def _invisible_from_now(self, group: str, out: list[Delivery], invisible_ms: int) -> None:
        """The deliveries' deadlines counted from the answer, for a receive that waited for a dead letter's store
        (for the disk) since it took them: a message visible again at once would go to another consumer while this
        one holds it. One delivered again meanwhile (its token changed) is left as it is. Only such a receive walks
        its deliveries here: one that did not wait took them at its ``now``."""
        deadline = _now_ms() + invisible_ms
        for d in out:
            h = d.handle
            st = self.states.get((group, h.topic, h.queue_id))
            e = st.inflight.get(h.queue_offset) if st is not None else None
            if e is not None and e.token == h.token:
                e.deadline_ms = deadline

    async def _redeliver(self, group: str, topic: str, q: int, st: QueueState, now: int, room: int,
                         invisible_ms: int, out: list[Delivery]) -> tuple[int | None, bool]:
        """Deliveries of the queue whose deadline passed, again (out of attempts: to the dead letters): the earliest
        deadline still ahead, and whether a dead letter's store was waited for. None of a state forgotten (reset,
        its topic or group deleted) while it waited: its handles would ack nothing, and the group reads them again
        from the new offset."""
        earliest: int | None = None
        waited = False
        for offset in sorted(st.inflight):
            e = st.inflight.get(offset)
            if e is None:  # acked while this receive waited for a dead letter's store
                continue
            if e.deadline_ms > now:
                earliest = e.deadline_ms if earliest is None else min(earliest, e.deadline_ms)
                continue
            if room <= 0:
                return now, waited
            try:
                msg = self.store.look_message_by_offset(e.commit_log_offset)
            except (StoreError, InvalidMessageError) as exc:
                log.warning("message %s:%d@%d is gone (%s): acked for group %s", topic, q, offset, exc, group)
                self._ack_offset(group, topic, q, st, offset)
                continue
            if e.attempts >= self.max_delivery_attempts:
                waited = True
                if not await self._dead_letter_due(group, (topic, q, offset), st, e, msg, now + invisible_ms):
                    earliest = e.deadline_ms if earliest is None else min(earliest, e.deadline_ms)
                if self.states.get((group, topic, q)) is not st:  # forgotten meanwhile: delivered from no state
                    return earliest, waited
                continue
            e.attempts += 1
            e.token = next(_tokens)
            e.deadline_ms = now + invisible_ms
            out.append(Delivery(msg, ReceiptHandle(topic, q, offset, e.commit_log_offset, e.token), e.attempts,
                                invisible_ms))
            room -= 1
        return earliest, waited

    async def _dead_letter_due(self, group: str, where: tuple[str, int, int], st: QueueState, e: Inflight,
                               msg: MessageExt, retry_ms: int) -> bool:
        """``msg``, out of delivery attempts, to the group's dead letters; True once stored. It is held in flight
        while its store waits (for the disk, for its topic's creation): another receive leaves it alone instead of
        storing it again, and a forward of it is refused (``forward_to_dead_letter``). Not stored (no room to
        create the dead-letter topic, the store refused), it stays in flight until ``retry_ms``, not delivered
        again, and goes to the dead letters once that deadline passed; the rest of the receive goes on."""
        refused = await self._held_dead_letter(group, where, st, e, msg, retry_ms)
        if refused is not None:
            _DEAD_LETTERS_REFUSED.refused(f"group {group}", refused.message)
            return False
        return True

    async def _held_dead_letter(self, group: str, where: tuple[str, int, int], st: QueueState, e: Inflight,
                                msg: MessageExt, refused_ms: int) -> Refusal | None:
        """``msg`` of the delivery ``e`` to the group's dead letters, the delivery held in flight while the store
        waits (``_HELD``: no receive delivers it again or stores it a second time, no forward of it runs). Stored,
        it is acked if still in flight (not acked, reset or forgotten since); refused, its deadline is
        ``refused_ms`` unless it was given a new duration meanwhile, and the refusal is returned."""
        e.deadline_ms = _HELD
        refused = await self.retries.dead_letter(group, msg, e.attempts)
        if refused is not None:
            if e.deadline_ms == _HELD:
                e.deadline_ms = refused_ms
            return refused
        topic, q, offset = where
        if self.states.get((group, topic, q)) is st and st.inflight.get(offset) is e:
            self._ack_offset(group, topic, q, st, offset)
        return None

    def _read_new(self, group: str, topic: str, q: int, st: QueueState, now: int, room: int, invisible_ms: int,
                  filt: MessageFilter, out: list[Delivery]) -> None:
        room = min(room, MAX_SPAN - (st.next - st.committed))
        if room <= 0:
            return
        lo = self.store.get_min_offset_in_queue(topic, q)
        if st.next < lo:  # retention removed what the group never read
            st.next = lo
            for off in [o for o in st.inflight if o < lo]:
                self._drop_inflight(st, off)
            st.acked = {o for o in st.acked if o >= lo}
            if st.committed < lo:
                st.committed = lo
                self.offsets.commit(group, topic, q, lo)
        start = st.next
        got = self.pulls.read(group, topic, q, start, room, filt, counted=False)
        if got.status == GetMessageStatus.FOUND:
            stop = got.next_begin_offset
            for raw, offset in zip(got.messages, got.queue_offsets, strict=True):
                msg = decode_message(raw)[0]
                mgroup = msg.properties.get(MessageConst.SHARDING_KEY)
                # an earlier message of its group is in flight, delivered before or in this batch (a PushConsumer
                # consumes a batch concurrently)
                if mgroup and mgroup in st.groups:
                    stop = offset
                    break
                e = Inflight(now + invisible_ms, 1, next(_tokens), msg.commit_log_offset, mgroup, msg.msg_id)
                st.inflight[offset] = e
                if mgroup:
                    st.groups[mgroup] += 1
                out.append(Delivery(msg, ReceiptHandle(topic, q, offset, e.commit_log_offset, e.token), 1,
                                    invisible_ms))
            taken = sum(1 for o in got.queue_offsets if o < stop)
            delivered = set(got.queue_offsets)
            for offset in range(start, stop):  # entries the filter passed over: consumed for this group
                if offset not in delivered:
                    self._ack_offset(group, topic, q, st, offset)
            st.next = max(st.next, stop)
            self.pulls.count(group, topic, q, got.messages[:taken], st.next)
        elif got.status in (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING) \
                and got.next_begin_offset > start:
            st.next = got.next_begin_offset
            for offset in range(start, got.next_begin_offset):
                self._ack_offset(group, topic, q, st, offset)

    # --- ack and change invisible duration --------------------------------------------------------------

    def _entry(self, group: str, handle: ReceiptHandle, msg_id: str = "") -> tuple[QueueState, Inflight] | None:
        """The delivery ``handle`` names, None when it was acked already (also when its state was dropped since:
        the committed offset is past it). ``msg_id``, when given (a gRPC request names the message it means), must
        be the delivered message's: a handle of another message is refused, not taken for the one named."""
        st = self.states.get((group, handle.topic, handle.queue_id))
        if st is None:
            if 0 <= handle.queue_offset < self.offsets.query(group, handle.topic, handle.queue_id):
                return None
            raise Refusal(Kind.INVALID_HANDLE, f"receipt handle names nothing group {group} received from "
                          f"{handle.topic}")
        if handle.queue_offset < st.committed or handle.queue_offset in st.acked:
            return None
        e = st.inflight.get(handle.queue_offset)
        if e is None or e.token != handle.token:
            raise Refusal(Kind.INVALID_HANDLE, "receipt handle expired: the message was delivered again since")
        if msg_id and msg_id != e.msg_id:
            raise Refusal(Kind.INVALID_HANDLE, f"receipt handle is of another message than {msg_id[:64]!r}")
        return st, e

    def ack(self, group: str, handle: ReceiptHandle, msg_id: str = "") -> None:
        """Raises ``Refusal`` INVALID_HANDLE (also when ``msg_id`` is not the handle's message's); acking twice is
        harmless."""
        found = self._entry(group, handle, msg_id)
        if found is not None:
            self._ack_offset(group, handle.topic, handle.queue_id, found[0], handle.queue_offset)

    def change_invisible(self, group: str, handle: ReceiptHandle, invisible_ms: int,
                         msg_id: str = "") -> ReceiptHandle:
        found = self._entry(group, handle, msg_id)
        if found is None:
            raise Refusal(Kind.INVALID_HANDLE, "the message was already acked")
        e = found[1]
        e.deadline_ms = _now_ms() + invisible_ms
        e.token = next(_tokens)
        self._on_arrival(handle.topic, handle.queue_id, 0)  # a receive waiting for this deadline re-plans
        return ReceiptHandle(handle.topic, handle.queue_id, handle.queue_offset, e.commit_log_offset, e.token)

    def attempts(self, group: str, handle: ReceiptHandle) -> int:
        st = self.states.get((group, handle.topic, handle.queue_id))
        e = st.inflight.get(handle.queue_offset) if st else None
        return e.attempts if e else 0

    def _drop_inflight(self, st: QueueState, offset: int) -> None:
        e = st.inflight.pop(offset, None)
        if e is not None and e.message_group:
            st.groups[e.message_group] -= 1
            if st.groups[e.message_group] <= 0:
                del st.groups[e.message_group]

    def _ack_offset(self, group: str, topic: str, q: int, st: QueueState, offset: int) -> None:
        self._drop_inflight(st, offset)
        self._mark((group, topic, q), st)
        if offset != st.committed:
            if offset > st.committed:
                st.acked.add(offset)
            return
        c = offset + 1
        while c in st.acked:
            st.acked.discard(c)
            c += 1
        st.committed = c
        self.offsets.commit(group, topic, q, c)

    # --- dead letters -----------------------------------------------------------------------------------

    async def forward_to_dead_letter(self, group: str, handle: ReceiptHandle, msg_id: str = "") -> None:
        """The consumer gives up on a delivery: its message to the group's dead letters, now. It is held in flight
        while its store waits (for the disk, for its topic's creation), so that a receive neither delivers it again
        nor stores it in the dead letters a second time; refused, it is in flight as it was. BUSY while another
        forward of it waits; NO_PERMISSION by a broker that does not write (a send-back, as RocketMQ's proxy sends
        it)."""
        refused = self.retries.write_refusal()
        if refused is not None:
            raise refused
        found = self._entry(group, handle, msg_id)
        if found is None:
            return
        st, e = found
        if e.deadline_ms == _HELD:
            raise Refusal(Kind.BUSY, "the message is being forwarded to the dead letters: forward again later")
        try:
            msg = self.store.look_message_by_offset(e.commit_log_offset)
        except (StoreError, InvalidMessageError) as exc:
            raise Refusal(Kind.MESSAGE_GONE, f"message is gone from the log: {exc}") from None
        refused = await self._held_dead_letter(group, (handle.topic, handle.queue_id, handle.queue_offset), st, e,
                                               msg, e.deadline_ms)
        if refused is not None:
            raise refused

    def reset(self, group: str, topic: str, queue_id: int) -> None:
        """Forget what ``group`` has in flight from a queue whose consumer offset was just set: it reads on from
        there."""
        self._forget([(group, topic, queue_id)])

    def forget_topic(self, topic: str) -> None:
        """Forget every group's states of a deleted topic: created again, its queues start at 0, below the offsets
        the states read on from."""
        self._forget([key for key in self.states if key[1] == topic])

    def forget_group(self, group: str) -> None:
        """Forget the states of a group deleted with its offsets: it starts again as a new group, and no ack of a
        state writes back an offset that went with it."""
        self._forget([key for key in self.states if key[0] == group])

    def _forget(self, keys: list[tuple[str, str, int]]) -> None:
        for key in keys:
            self.states.pop(key, None)
            self._idle.pop(key, None)
            self._unkept.pop(key, None)
            self._busy.pop(key, None)
