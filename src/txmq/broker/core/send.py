"""Sends in no protocol's terms (RocketMQ's ``SendMessageProcessor`` rules): the checks every send passes, the
topic it resolves or auto-creates, the queue it goes to, a retry past its reconsume times turned into a dead
letter, a timer message's delivery time (to the timer topic, or refused beyond ``timerMaxDelaySec``), and the put
by kind — a half message through the transaction service, a delayed one through the schedule topic, plain messages
and batches as they are. The remoting processor and the gRPC servicer translate their
requests into these calls and answer a ``Refusal`` in their own codes.

Compiled (setup.py, send.pxd): the service is an extension type whose steps are C methods to the remoting send
path, which calls ``topic_of``, ``queue_of``, ``route_retry``, ``accept`` and ``put`` once per send.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import cython

from txmq.broker.core.refusal import Kind, Refusal
from txmq.broker.stats import BrokerStats
from txmq.broker.timer import BROKER_ONLY as TIMER_BROKER_ONLY
from txmq.broker.timer import TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS, is_timer_message
from txmq.broker.transaction.service import HALF_BATCH, OP_PROPERTY
from txmq.errors import InvalidMessageError
from txmq.message import (
    BORN_TIMESTAMP_MAX,
    BORN_TIMESTAMP_MIN,
    MessageConst,
    MessageExt,
    MessageSysFlag,
    check_born_timestamp,
    properties_to_string,
)
from txmq.store.results import PutMessageResult, is_stored
from txmq.topic import (
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    PermName,
    TopicConfig,
    check_topic,
)

if TYPE_CHECKING:
    from txmq.broker.config import BrokerConfig
    from txmq.broker.core.retry import RetryService
    from txmq.broker.core.topics import TopicService
    from txmq.broker.schedule import ScheduleMessageService
    from txmq.broker.timer import TimerMessageStore
    from txmq.broker.transaction.service import TransactionalMessageService
    from txmq.store import DefaultMessageStore

# Read per send: a module constant is one dict lookup, a class attribute (or a static method's call) more.
_TRAN_MSG = MessageConst.TRANSACTION_PREPARED
_DELAY = MessageConst.DELAY_TIME_LEVEL
_UNIQ_KEY = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_PERM_WRITE = PermName.PERM_WRITE
_COMPRESSED = MessageSysFlag.COMPRESSED
_TRANSACTION_MASK = MessageSysFlag.TRANSACTION_MASK
_COMMIT_TYPE, _ROLLBACK_TYPE = MessageSysFlag.TRANSACTION_COMMIT_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE

# Properties only the broker sets, refused in any send: the account that stored a half (``tx show``, and carried
# into the committed message), a half's batch count, a transaction op's kind, a timer record's own (timer.py).
BROKER_PROPERTIES = (MessageConst.HALF_ACCOUNT, HALF_BATCH, OP_PROPERTY, *sorted(TIMER_BROKER_ONLY))

MAX_PROPERTIES_SIZE = 32767  # the layout's 2-byte properties length (txmq.message)
_LINK_PROPERTIES_MAX = 192  # what COMMIT adds to a half batch's message: two properties, their names and values
_RECORD_OVERHEAD_MAX = 512  # header, topic and the store's trailer around body and properties


class CreateFrom(Protocol):
    """What a send names to create its topic from when this broker does not have it yet (RocketMQ's
    ``defaultTopic`` and ``defaultTopicQueueNums``; None: the broker's ``defaultTopicQueueNums``). Read only then:
    a remoting send passes its header as it is."""

    @property
    def default_topic(self) -> str: ...

    @property
    def default_topic_queue_nums(self) -> int | None: ...


def is_half(properties: Mapping[str, str]) -> bool:
    """A half (transactional) message, marked as RocketMQ marks it: by its ``TRAN_MSG`` property. Compiled, this
    and ``message_kind`` are C functions to the send path (send.pxd): a send asks each once or more."""
    return properties.get(_TRAN_MSG) == "true"


def is_timed(properties: Mapping[str, str]) -> bool:
    """A timer message as sent (a delivery time or a delay), whether or not ``accept`` diverted it since."""
    return TIMER_DELIVER_MS in properties or TIMER_DELAY_SEC in properties or TIMER_DELAY_MS in properties


def message_kind(half: bool, delay_level: int, order: bool, timer: bool = False) -> str:
    """RocketMQ 5's message_type label of a send: transaction, delay (a delay level or a timer), fifo or normal."""
    if half:
        return "transaction"
    if delay_level > 0 or timer:
        return "delay"
    return "fifo" if order else "normal"


def reserved_refusal(props: Mapping[str, str]) -> Refusal | None:
    """RESERVED_PROPERTY when a sender set a property only the broker sets."""
    for key in BROKER_PROPERTIES:
        if key in props:
            return Refusal(Kind.RESERVED_PROPERTY, f"property {key} is set by the broker only")
    return None


def decision_refusal(sys_flag: int) -> Refusal | None:
    """MESSAGE_ILLEGAL when a sent message's sysFlag carries a transaction decision (COMMIT or ROLLBACK type): those
    are the records END_TRANSACTION writes, and a COMMIT-type record with a half's UNIQ_KEY and commit-log offset
    (its PREPAREDTRANSACTIONOFFSET, 0 for a sent message) is taken for that half's commit after a restart. A
    producer sends plain or prepared (half) messages only."""
    if (sys_flag & _TRANSACTION_MASK) in (_COMMIT_TYPE, _ROLLBACK_TYPE):
        return Refusal(Kind.MESSAGE_ILLEGAL, "sysFlag: a sent message carries no transaction decision (COMMIT or "
                                             "ROLLBACK type); END_TRANSACTION decides")
    return None


def inflate_refusal(body: bytes, limit: int) -> Refusal | None:
    """A compressed body (zlib, as RocketMQ's clients compress one) is refused unless it inflates whole to at most
    ``limit`` bytes (maxMessageSize, which RocketMQ's clients check before they compress): the broker inflates it for
    gRPC consumers and every consumer does, so a few MB that inflate to gigabytes must not be stored. Bounded: the
    inflating stops past ``limit``."""
    inflater = zlib.decompressobj()
    try:
        size = len(inflater.decompress(body, limit + 1))
    except zlib.error as exc:
        return Refusal(Kind.MESSAGE_ILLEGAL, f"the compressed message body does not inflate: {exc}")
    if size > limit:
        return Refusal(Kind.BODY_TOO_LARGE, f"the message body size over max value, MAX: {limit} (maxMessageSize; "
                       "this compressed body inflates to more)")
    if not inflater.eof:
        return Refusal(Kind.MESSAGE_ILLEGAL, "the compressed message body is cut short")
    return None


def born_refusal(born_timestamp: int) -> Refusal | None:
    """MESSAGE_ILLEGAL for a born timestamp outside the years 2000 to 2199 (``check_born_timestamp``)."""
    if BORN_TIMESTAMP_MIN <= born_timestamp < BORN_TIMESTAMP_MAX:
        return None
    try:
        check_born_timestamp(born_timestamp)
    except InvalidMessageError as exc:
        return Refusal(Kind.MESSAGE_ILLEGAL, str(exc))
    return None


class _Counted:
    """The answer of a put whose sender awaits its result (a gRPC send): a stored message is counted under its
    topic and message type, as the remoting send's answer counts it."""

    __slots__ = ("kind", "size", "stats", "topic")

    def __init__(self, stats: BrokerStats, topic: str, kind: str, size: int) -> None:
        self.stats = stats
        self.topic = topic
        self.kind = kind
        self.size = size

    def __call__(self, result: PutMessageResult) -> PutMessageResult:
        if is_stored(result):
            self.stats.put(self.topic, self.kind, self.size)
        return result


@cython.cclass
class SendService:
    """Compiled, an extension type whose per-send steps are C methods (send.pxd)."""

    def __init__(self, config: BrokerConfig, store: DefaultMessageStore, topics: TopicService, stats: BrokerStats,
                 transactions: TransactionalMessageService, schedule: ScheduleMessageService,
                 timers: TimerMessageStore, retries: RetryService) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.manager = topics.manager
        self.stats = stats
        self.transactions = transactions
        self.schedule = schedule
        self.timers = timers
        self.retries = retries
        self.writeable = True  # the broker's permission as it serves it has write (BrokerCore.set_permission)

    # --- checks ------------------------------------------------------------------------------------------

    def topic_of(self, topic: str, size: int, batch: bool, create_from: CreateFrom) -> TopicConfig | Refusal:
        """The config of the topic a send of ``size`` bytes names (a batch counts whole, as RocketMQ counts it),
        created as ``create_from`` says when it may be (``TopicService.find``); or why the send is refused."""
        config = self.config
        if config.is_slave:  # RocketMQ's store in slave mode: nothing stored
            return Refusal(Kind.NOT_AVAILABLE, "service not available now: broker is a slave, putMessage is forbidden")
        if not self.writeable:
            return self.retries.not_writeable()
        # The table itself, no call per send. A name in it was checked where it entered (TopicConfigManager): the
        # pattern runs only for names it lacks, so no cache of legal names is missed however many topics sends
        # are spread over.
        cfg = self.manager.table.get(topic)
        if cfg is None:
            try:
                check_topic(topic)
            except InvalidMessageError as exc:
                return Refusal(Kind.ILLEGAL_TOPIC, str(exc))
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return Refusal(Kind.NO_PERMISSION, f"topic {topic} is a system topic; sending to it is forbidden")
        if batch and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # route_retry judges one message, as RocketMQ's
            return Refusal(Kind.MESSAGE_ILLEGAL, f"batch request does not support retry group {topic}")
        limit = config.store.max_message_size
        if size > limit:
            return Refusal(Kind.BODY_TOO_LARGE, f"the message body size over max value, MAX: {limit} (maxMessageSize; "
                           f"this {'batch' if batch else 'message'} has {size} bytes)")
        if cfg is None:
            found = self.topics.find(topic, create=True, default_topic=create_from.default_topic,
                                     queue_nums=create_from.default_topic_queue_nums)
            if isinstance(found, Refusal):
                return found
            cfg = found
        if not cfg.perm & _PERM_WRITE:  # PermName.is_writeable
            return Refusal(Kind.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        return cfg

    def queue_of(self, cfg: TopicConfig, queue_id: int) -> int | Refusal:
        """The queue a send asks for, a random one of the topic's write queues when it asks for none (< 0)."""
        nums = cfg.write_queue_nums
        if queue_id < 0:
            return random.randrange(nums)
        if queue_id >= nums:
            return Refusal(Kind.ILLEGAL_QUEUE, f"queueId {queue_id} is illegal: topic {cfg.topic_name} has {nums} "
                           "write queues")
        return queue_id

    def accept(self, msg: MessageExt, half: bool, born_given: bool = True) -> Refusal | None:
        """The rules of one message as built to store: its born timestamp when the producer gave one (not the
        broker's own time, filled in for a producer that gave none: a broker whose clock is off must not blame the
        producer), a compressed body's inflating (``inflate_refusal``), a half message only where the broker takes
        transactions, and a timer message's delivery time (``_timer_refusal``)."""
        born = msg.born_timestamp
        if born_given and not BORN_TIMESTAMP_MIN <= born < BORN_TIMESTAMP_MAX:
            return born_refusal(born)
        if msg.sys_flag & _COMPRESSED:
            refused = inflate_refusal(msg.body, self.config.store.max_message_size)
            if refused is not None:
                return refused
        if half and self.config.reject_transaction_message:
            return self._rejected_transaction()
        if is_timer_message(msg.properties) and not msg.delay_time_level:
            return self._timer_refusal(msg, half)
        return None

    def _timer_refusal(self, msg: MessageExt, half: bool) -> Refusal | None:
        """A timer message diverted to the timer topic (unless due already); a half is only checked: it keeps its
        delivery time until COMMIT diverts its real message. ILLEGAL_DELIVERY_TIME when timers are off, the time
        is not a number or beyond ``timerMaxDelaySec``, or the topic is a retry topic."""
        try:
            if half:
                self.timers.checked_deliver_ms(msg.properties)
            else:
                self.timers.divert(msg)
        except InvalidMessageError as exc:
            return Refusal(Kind.ILLEGAL_DELIVERY_TIME, str(exc))
        return None

    def accept_batch(self, entries: list[tuple[int, bytes, dict[str, str]]], batch_props: dict[str, str],
                     born_timestamp: int, sys_flag: int) -> int | Refusal:
        """A batch's rules: not empty, each message within maxMessageSize and not delayed (and, the batch flagged
        compressed, which each message is stored with, inflating within it: ``inflate_refusal``), all of them half
        (transactional) messages or none, the born timestamp they share (0: the broker's time); halves only where
        the broker takes transactions; a half batch's own rules (``_half_batch_refusal``). Its count of halves."""
        if not entries:
            return Refusal(Kind.MESSAGE_ILLEGAL, "empty batch")
        if born_timestamp:
            refused = born_refusal(born_timestamp)
            if refused is not None:
                return refused
        limit = self.config.store.max_message_size
        halves = 0
        compressed = sys_flag & _COMPRESSED
        for _flag, data, props in entries:
            if len(data) > limit:
                return Refusal(Kind.MESSAGE_ILLEGAL, f"a batch message of {len(data)} bytes exceeds maxMessageSize")
            if compressed:
                refused = inflate_refusal(data, limit)
                if refused is not None:
                    return refused
            if props.get(_DELAY) or is_timer_message(props):
                return Refusal(Kind.MESSAGE_ILLEGAL, "batch messages cannot be delayed")
            halves += is_half(props)
        if halves not in (0, len(entries)):
            return Refusal(Kind.MESSAGE_ILLEGAL, "a batch is all half (transactional) messages or none")
        half_batch = is_half(batch_props)
        if (halves or half_batch) and self.config.reject_transaction_message:
            return self._rejected_transaction()
        if half_batch:
            refused = self._half_batch_refusal(entries, batch_props, halves)
            if refused is not None:
                return refused
        return halves

    def _half_batch_refusal(self, entries: list[tuple[int, bytes, dict[str, str]]], batch_props: dict[str, str],
                            halves: int) -> Refusal | None:
        """A batch whose own properties make it a half message: one transaction for all its messages, stored as
        one half whose body is the batch as sent (txmq beyond RocketMQ). Its messages need a ``UNIQ_KEY`` each:
        after a crash, that is how a commit cut short finds what it already stored."""
        if halves:
            return Refusal(Kind.MESSAGE_ILLEGAL, "a half batch carries plain messages, not half messages")
        limit = self.config.store.max_message_size
        for _, data, props in entries:
            # Refused now, not at COMMIT: each message must fit as it will be stored, with the link properties
            # (TRAN_PREPARED_QUEUE_OFFSET, __transactionId__) a COMMIT adds.
            size = len(properties_to_string(props).encode()) + _LINK_PROPERTIES_MAX
            if size > MAX_PROPERTIES_SIZE or len(data) + size + _RECORD_OVERHEAD_MAX > limit:
                return Refusal(Kind.MESSAGE_ILLEGAL,
                               f"a message of the half batch would not fit when committed: properties {size} bytes "
                               f"(at most {MAX_PROPERTIES_SIZE}), message {len(data) + size} bytes (maxMessageSize "
                               f"{limit})")
        if not all(props.get(_UNIQ_KEY) for _, _, props in entries):
            return Refusal(Kind.MESSAGE_ILLEGAL, f"each message of a half batch needs a {_UNIQ_KEY}")
        if not batch_props.get(_UNIQ_KEY):
            return Refusal(Kind.MESSAGE_ILLEGAL, f"a half batch needs its own {_UNIQ_KEY} (its transaction id)")
        return None

    def _rejected_transaction(self) -> Refusal:
        return Refusal(Kind.NO_PERMISSION, f"the broker[{self.config.broker_addr}] sending transaction message is "
                       "forbidden (rejectTransactionMessage=true)")

    # --- retries ---------------------------------------------------------------------------------------

    def route_retry(self, msg: MessageExt, max_times: int | None) -> str | Refusal | None:
        """A message sent to a group's retry topic after ``max_times`` reconsumes (else its group's
        ``retryMaxTimes``) goes to the group's dead letters instead (``RetryService.to_dead_letters``): the group,
        whose dead letter the sender counts once stored (``RetryService.count_dead_letter``); None when the message
        stays as it is. BUSY when the dead-letter topic does not exist and the broker may create no more topics now:
        the send is refused and stores nothing (in the retry topic, its consumer would get it once more), as
        RocketMQ refuses a send whose dead-letter topic it cannot have."""
        topic = msg.topic
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return None
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        if msg.reconsume_times < self.retries.max_reconsume_times_of(group, max_times):
            return None
        refused = self.retries.to_dead_letters(msg, group)
        return group if refused is None else refused

    # --- the put, by kind ------------------------------------------------------------------------------

    def put(self, msg: MessageExt, half: bool, delay_level: int,
            answer: Callable[[PutMessageResult], Any] | None = None, waiter: Any = None) -> Any:
        """Store one checked message by its kind: a half message through the transaction service, a delayed one
        through the schedule topic, the rest as it is; a future of the result, or of ``answer(result)``
        (``put_messages``), or the ``waiter`` given, resolved instead of a future."""
        if half:
            return self.transactions.prepare_message(msg, answer, waiter)
        if delay_level > 0 and not msg.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            self.schedule.divert(msg)
        return self.store.put_message(msg, answer, waiter)

    def put_counted(self, msg: MessageExt, half: bool, delay_level: int, kind: str) -> Any:
        """``put`` for a sender that awaits the result (gRPC): a future of it, the message counted once stored."""
        return self.put(msg, half, delay_level, _Counted(self.stats, msg.topic, kind, len(msg.body)), None)

    def put_batch(self, msgs: list[MessageExt], halves: int, answer: Callable[[PutMessageResult], Any],
                  waiter: Any) -> Any:
        """A checked batch with one write and one flush wait; a batch of halves (txmq beyond RocketMQ: the Spark
        sink's tasks) through the transaction service, answered once tracked."""
        if halves:
            return self.transactions.prepare_messages(msgs, answer=answer)
        return self.store.put_messages(msgs, answer, waiter)

    def put_half_batch(self, msg: MessageExt, count: int, answer: Callable[[PutMessageResult], Any]) -> Any:
        """A checked half batch of ``count`` messages, ``msg`` its body: one half message, one transaction."""
        return self.transactions.prepare_half_batch(msg, count, answer)
