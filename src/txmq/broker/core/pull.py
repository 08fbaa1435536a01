"""Pulls in no protocol's terms (RocketMQ's ``PullMessageProcessor`` rules and its ``PullRequestHoldService``):
which queue a group may read, reads within the confirm offset (what every in-sync replica has), tag filtering, the
pull counters (``rocketmq_messages_out``, the offset each group was last answered with), and long polling.

A pull that finds nothing new may be held until a message arrives in its queue (the store's arrival listener
wakes it) or its timeout passes; then it reads again and is answered, from the listener or the timer itself: no
task and no turn of the loop between a message's write and its held pull's answer. A queue of an existing topic
that was never written is held the same way, so an idle consumer does not spin. Held pulls are capped per owner (a
remoting connection) and in total (``maxHeldPullsPerConnection``, ``maxHeldPulls``): beyond a cap a pull is
refused BUSY at once. A held pull is dropped, unanswered, when its owner closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from txmq.broker.core.refusal import Kind, Refusal
from txmq.broker.visibility import internal_refusal
from txmq.filter import MessageFilter
from txmq.store import GetMessageResult, GetMessageStatus
from txmq.topic import PermName, TopicConfig

if TYPE_CHECKING:
    from txmq.broker.config import BrokerConfig
    from txmq.broker.stats import BrokerStats
    from txmq.broker.subscription_group_manager import SubscriptionGroupManager
    from txmq.broker.topic_config_manager import TopicConfigManager
    from txmq.store import DefaultMessageStore

log = logging.getLogger("txmq.broker")

MAX_PULL_BATCH = 256  # messages one read returns at most, whatever a consumer asks

# Nothing to read yet at the pull's offset: a held pull waits. A queue never written (no ConsumeQueue yet,
# NO_MATCHED_LOGIC_QUEUE) waits too; the topic exists, or ``refusal`` answered already.
_HOLD = (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.OFFSET_OVERFLOW_ONE,
         GetMessageStatus.NO_MATCHED_LOGIC_QUEUE)

class HoldOwner(Protocol):
    """What holds a pull (a remoting connection): held pulls are dropped when it closes."""

    closed: bool
    on_close: list[Callable[[Any], object]]
    remote_address: str


class HeldPull:
    """One held pull: ``wake(True)`` once a message past its offset arrives or its timeout passes (read again and
    answer), ``wake(False)`` when its owner closes (nobody to answer); called once, on the loop thread."""

    __slots__ = ("key", "offset", "on_owner", "timer", "wake")

    def __init__(self, key: tuple[str, int], offset: int, on_owner: set[HeldPull] | None,
                 wake: Callable[[bool], object]) -> None:
        self.key = key
        self.offset = offset
        self.on_owner = on_owner
        self.wake = wake
        self.timer: asyncio.TimerHandle | None = None


class PullRequestHoldService:
    """Held pulls per (topic, queue), woken by the store's arrival listener or their timer, and per owner, dropped
    when it closes: a peer that goes away leaves nothing behind (each held pull costs its request, its answer to
    come and a timer)."""

    def __init__(self, max_per_owner: int = 4096, max_total: int = 65536) -> None:
        self.waiters: dict[tuple[str, int], set[HeldPull]] = {}
        self._by_owner: dict[HoldOwner, set[HeldPull]] = {}
        self.max_per_owner = max_per_owner
        self.max_total = max_total
        self.held = 0
        self._full = False  # for one log line per episode of a full cap, not one per refused pull

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        waiting = self.waiters.get((topic, queue_id))
        if waiting:
            for pull in [pull for pull in waiting if max_offset > pull.offset]:
                self._wake(pull, True)

    def hold(self, topic: str, queue_id: int, offset: int, timeout_s: float, wake: Callable[[bool], object],
             owner: HoldOwner | None = None) -> HeldPull | None:
        """Register a pull to hold now (so caps count it at once) until ``wake`` is called (``HeldPull``), or None
        when a cap is full (logged once per episode). A gRPC pull has no owner: grpcio cancels a call whose client
        went away, and its caller ``release``s it."""
        if owner is not None and owner.closed:
            return None  # its on_close callbacks ran already: nothing would ever drop it
        on_owner = self._by_owner.get(owner) if owner is not None else None
        full = self.held >= self.max_total or (on_owner is not None and len(on_owner) >= self.max_per_owner)
        if full and not self._full:
            log.warning("held pulls at their cap (%d held, %d on %s; maxHeldPulls=%d, maxHeldPullsPerConnection=%d):"
                        " further long-polling pulls are refused busy", self.held, len(on_owner or ()),
                        owner.remote_address if owner else "-", self.max_total, self.max_per_owner)
        self._full = full
        if full:
            return None
        if owner is not None and on_owner is None:
            on_owner = self._by_owner[owner] = set()
            owner.on_close.append(self._drop_owner)
        pull = HeldPull((topic, queue_id), offset, on_owner, wake)
        pull.timer = asyncio.get_running_loop().call_later(max(0.0, timeout_s), self._wake, pull, True)
        self.waiters.setdefault(pull.key, set()).add(pull)
        if on_owner is not None:
            on_owner.add(pull)
        self.held += 1
        return pull

    def release(self, pull: HeldPull) -> bool:
        """Stop holding ``pull`` without waking it (its caller gave up); False when it was not held any more."""
        waiting = self.waiters.get(pull.key)
        if waiting is None or pull not in waiting:
            return False
        waiting.discard(pull)
        if not waiting:
            del self.waiters[pull.key]
        self.held -= 1
        if pull.on_owner is not None:
            pull.on_owner.discard(pull)
        if pull.timer is not None:
            pull.timer.cancel()
        return True

    def _wake(self, pull: HeldPull, answer: bool) -> None:
        if not self.release(pull):
            return
        try:
            pull.wake(answer)
        except Exception:  # from the store's write path or a timer: never theirs to handle
            log.exception("answering a held pull of %s/%d failed", *pull.key)

    def _drop_owner(self, owner: HoldOwner) -> None:
        for pull in list(self._by_owner.pop(owner, ())):
            self._wake(pull, False)


def _missing(cfg: TopicConfig | None, topic: str, queue_id: int | None) -> Refusal | None:
    """``PullService.queue_refusal`` given the topic's config (None: the broker has no such topic)."""
    if cfg is None:
        return Refusal(Kind.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
    if queue_id is not None and not 0 <= queue_id < max(cfg.read_queue_nums, cfg.write_queue_nums):
        return Refusal(Kind.ILLEGAL_QUEUE, f"queueId[{queue_id}] is illegal, topic {topic}")
    return None


class PullService:
    """Reads for consumers, whichever protocol asks: the same refusals, the same bound, the same counters."""

    def __init__(self, config: BrokerConfig, store: DefaultMessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, stats: BrokerStats) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.stats = stats
        self.readable = True  # the broker's permission as it serves it has read (BrokerCore.set_permission)
        self.hold_service = PullRequestHoldService(config.max_held_pulls_per_connection, config.max_held_pulls)
        store.add_arrival_listener(self.hold_service.notify_message_arriving)

    def queue_refusal(self, topic: str, queue_id: int | None) -> Refusal | None:
        """TOPIC_NOT_EXIST or ILLEGAL_QUEUE for a topic or queue (None: any) this broker does not have, else
        None."""
        return _missing(self.topics.get(topic), topic, queue_id)

    def refusal(self, group: str, topic: str, queue_id: int | None) -> Refusal | None:
        """Why ``group`` may not read ``topic`` (one queue of it; None: the whole topic, as a pop reads it), or
        None: a broker that does not read (``brokerPermission``), an internal topic, a topic or queue that does not
        exist, a group whose consumption is off, a topic that is not readable."""
        if not self.readable:
            return Refusal(Kind.NO_PERMISSION, f"the broker[{self.config.broker_ip1}] pulling message is forbidden")
        internal = internal_refusal(topic)
        if internal is not None:
            return Refusal(Kind.NO_PERMISSION, internal)
        cfg = self.topics.get(topic)  # once per pull: the existence check and the permission read the same config
        missing = _missing(cfg, topic, queue_id)
        if missing is not None:
            return missing
        sub = self.groups.get(group)
        if sub is not None and not sub.consume_enable:
            return Refusal(Kind.NO_PERMISSION, f"subscription group [{group}] does not have consume permission "
                           "(consumeEnable=false)")
        if cfg is not None and not PermName.is_readable(cfg.perm):
            return Refusal(Kind.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        return None

    def read(self, group: str, topic: str, queue_id: int, offset: int, max_nums: int,
             filt: MessageFilter, *, counted: bool = True) -> GetMessageResult:
        """Up to ``max_nums`` messages (at most ``MAX_PULL_BATCH``) from ``offset`` that every in-sync replica
        has (the confirm offset), those ``filt`` selects (tags by the consume queue, SQL92 by each record's
        properties); what it found is counted for ``group``, unless
        ``counted`` is False: then the caller counts what it takes of it (``count``)."""
        got = self.store.get_message(topic, queue_id, offset, min(max_nums, MAX_PULL_BATCH),
                                     tags_filter=filt.tags, confirmed=True, record_filter=filt.record)
        if counted and got.status == GetMessageStatus.FOUND:
            self.count(group, topic, queue_id, got.messages, got.next_begin_offset)
        return got

    def count(self, group: str, topic: str, queue_id: int, messages: list[bytes], next_offset: int) -> None:
        """``group`` took ``messages`` of a queue and reads on from ``next_offset``: the messages-out counters and
        the offset its in-flight messages are counted up to."""
        self.stats.get(topic, group, len(messages), sum(map(len, messages)))
        self.stats.pulled_to(group, topic, queue_id, next_offset)

    def hold(self, topic: str, queue_id: int, offset: int, timeout_s: float, wake: Callable[[bool], object],
             owner: HoldOwner | None = None) -> HeldPull | Refusal:
        """Hold a pull that found nothing new (``holds``) until a message arrives or ``timeout_s`` passes (then
        ``wake(True)``: answer it with ``read_woken``) or its owner closes (``wake(False)``: nobody to answer);
        BUSY when a cap is full."""
        pull = self.hold_service.hold(topic, queue_id, offset, timeout_s, wake, owner)
        if pull is None:
            return Refusal(Kind.BUSY, "too many held pulls: pull again later")
        return pull

    @staticmethod
    def holds(got: GetMessageResult, offset: int) -> bool:
        """Whether a read that found ``got`` at ``offset`` waits for new messages (when its consumer long-polls)."""
        return got.status in _HOLD and offset >= got.max_offset

    def read_woken(self, group: str, topic: str, queue_id: int, offset: int, max_nums: int,
                   filt: MessageFilter) -> GetMessageResult | Refusal:
        """A woken pull's answer: its read checked again first (``refusal``), as RocketMQ runs a woken pull's
        request again (the broker may have stopped reading meanwhile, ``brokerPermission``, or the topic or the
        group's consumption gone), then read again."""
        return self.refusal(group, topic, queue_id) or self.read(group, topic, queue_id, offset, max_nums, filt)

    async def read_held(self, timeout_s: float, group: str, topic: str, queue_id: int, offset: int, max_nums: int,
                        filt: MessageFilter) -> GetMessageResult | Refusal:
        """For a caller that awaits (gRPC: no owner): hold a pull until a message arrives or ``timeout_s`` passes,
        then ``read_woken``; BUSY when a cap is full. A cancelled caller's pull is released."""
        woken: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def wake(answer: bool) -> None:
            if not woken.done():
                woken.set_result(answer)

        pull = self.hold(topic, queue_id, offset, timeout_s, wake)
        if isinstance(pull, Refusal):
            return pull
        try:
            await woken
        finally:
            self.hold_service.release(pull)
        return self.read_woken(group, topic, queue_id, offset, max_nums, filt)
