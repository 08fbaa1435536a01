"""Retries and dead letters, one path for every protocol (RocketMQ 5's ``consumerSendMsgBack`` and
``handleRetryAndDLQ``): a message a consumer gives back is stored again in its group's ``%RETRY%`` topic with a
delay, until it has been consumed ``maxReconsumeTimes`` times (the sender's, else its group's ``retryMaxTimes``) or
delivered ``max_delivery_attempts`` times by pop; then it goes to the group's ``%DLQ%`` topic, created read-write and
counted (``rocketmq_send_to_dlq_messages``) whichever protocol sent it there."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from txmq.broker.core.refusal import Kind, Refusal
from txmq.broker.visibility import RecordAt, servable
from txmq.message import MessageConst, MessageExt
from txmq.refusals import RefusalLog
from txmq.topic import RMQ_SYS_SCHEDULE_TOPIC, retry_topic

if TYPE_CHECKING:
    from txmq.broker.client_manager import ConsumerManager
    from txmq.broker.core.topics import TopicService
    from txmq.broker.schedule import ScheduleMessageService
    from txmq.broker.stats import BrokerStats
    from txmq.broker.subscription_group_manager import SubscriptionGroupManager
    from txmq.store import DefaultMessageStore

log = logging.getLogger("txmq.broker")
# A line per group and origin topic and LOG_EVERY_S, with the count since the last: a consumer may send back with a
# negative delay level at will, so a line per message would let a client write the broker's log.
_DEAD_LETTERS = RefusalLog(log, "dead letters", logging.INFO)

DEFAULT_MAX_RECONSUME_TIMES = 16
FIRST_RETRY_LEVEL = 3  # RocketMQ: a send-back without a delay level waits 3 + reconsumeTimes levels (10 s first)


class RetryService:
    def __init__(self, store: DefaultMessageStore, topics: TopicService, stats: BrokerStats,
                 schedule: ScheduleMessageService, consumers: ConsumerManager, store_host: tuple[str, int], *,
                 groups: SubscriptionGroupManager) -> None:
        self.store = store
        self.groups = groups
        self.topics = topics
        self.stats = stats
        self.schedule = schedule
        self.consumers = consumers
        self.store_host = store_host
        self.writeable = True  # the broker's permission as it serves it has write (BrokerCore.set_permission)

    def to_dead_letters(self, msg: MessageExt, group: str) -> Refusal | None:
        """Rewrite ``msg`` in place to be stored in ``group``'s dead-letter topic (created read-write). Every dead
        letter passes here; its caller counts it once stored (``count_dead_letter``): a put the store refuses
        reached no dead letters. BUSY, ``msg`` left as it is, when that topic does not exist and the broker may
        create no more topics now."""
        dlq = self.topics.dead_letters_of(group)
        if isinstance(dlq, Refusal):
            return dlq
        msg.properties.setdefault(MessageConst.RETRY_TOPIC, msg.topic)
        msg.topic = dlq.topic_name
        msg.queue_id = 0
        msg.properties.pop(MessageConst.DELAY_TIME_LEVEL, None)
        return None

    def count_dead_letter(self, msg: MessageExt, group: str) -> None:
        """A stored dead letter of ``group`` counted under the topic it was first sent to."""
        origin = msg.properties[MessageConst.RETRY_TOPIC]
        self.stats.to_dlq(origin, group)
        _DEAD_LETTERS.refused(f"group {group}", f"messages of {origin} stored in {msg.topic}")

    async def _stored_dead_letter(self, msg: MessageExt, group: str, what: str) -> Refusal | None:
        """``msg`` stored in ``group``'s dead letters (``to_dead_letters``), counted once it is stored."""
        refused = self.to_dead_letters(msg, group) or await self._put(msg, what)
        if refused is None:
            self.count_dead_letter(msg, group)
        return refused

    def _again(self, origin: MessageExt, topic: str, reconsume_times: int, origin_msg_id: str) -> MessageExt:
        """A copy of a stored message to store again (a retry or a dead letter): it keeps its body, flags, born
        time and host, and names where it came from."""
        props = dict(origin.properties)
        props.setdefault(MessageConst.RETRY_TOPIC, origin.topic)
        props.setdefault(MessageConst.ORIGIN_MESSAGE_ID, origin_msg_id or origin.msg_id)
        props.pop(MessageConst.DELAY_TIME_LEVEL, None)
        return MessageExt(topic, origin.body, props, flag=origin.flag, queue_id=0, sys_flag=origin.sys_flag,
                          born_timestamp=origin.born_timestamp, born_host=origin.born_host,
                          store_host=self.store_host, reconsume_times=reconsume_times)

    def send_back_refusal(self, group: str, offset: int, origin_msg_id: str | None,
                          origin: MessageExt) -> Refusal | None:
        """Why the record at ``offset`` may not be sent back by ``group``, or None. A send-back copies a record
        into a topic the group reads, so it takes only a visible message of a topic the group consumes (its retry
        topic, or one its consumers subscribe to by heartbeat), and the message ``origin_msg_id`` names."""
        if not servable(origin):
            return Refusal(Kind.NO_PERMISSION, f"the record at offset {offset} is not a visible message")
        consumers = self.consumers.get(group)
        if origin.topic != retry_topic(group) and (consumers is None or origin.topic not in consumers.subscriptions):
            return Refusal(Kind.NO_PERMISSION,
                           f"group {group} does not consume topic {origin.topic} of the message at offset {offset}")
        ids = (origin.msg_id, origin.offset_msg_id, origin.properties.get(MessageConst.ORIGIN_MESSAGE_ID))
        if origin_msg_id and origin_msg_id not in ids:
            return Refusal(Kind.NO_PERMISSION, f"the message at offset {offset} is not {origin_msg_id}")
        return None

    async def send_back(self, group: str, record: RecordAt, origin_msg_id: str | None, delay_level: int,
                        max_times: int | None) -> Refusal | None:
        """A consumer gives back the message ``record`` holds (read, and authorized, by the request's parse):
        stored again in the group's retry topic, ``delay_level`` later (0: by how often it was consumed; at most
        the last level), or in its dead-letter topic once it was consumed ``max_times`` times or when
        ``delay_level`` is negative. Only the topic it is stored in is created: BUSY, nothing stored, when the
        broker may create no more topics now. A refusal is the adapter's to log (per host: a consumer may repeat
        one). Refused NO_PERMISSION by a broker that does not write, as RocketMQ refuses it (its Java consumer then
        sends the message to its retry topic through a producer, which routes to a broker that writes)."""
        refused = self.write_refusal()
        if refused is not None:
            return refused
        origin = record.msg
        if origin is None:
            return Refusal(Kind.MESSAGE_GONE, f"look message by offset {record.offset} failed: {record.why}")
        refused = self.send_back_refusal(group, record.offset, origin_msg_id, origin)
        if refused is not None:
            return refused
        msg = self._again(origin, retry_topic(group), origin.reconsume_times + 1, origin_msg_id or "")
        if origin.reconsume_times >= self.max_reconsume_times_of(group, max_times) or delay_level < 0:
            return await self._stored_dead_letter(msg, group, "send back")
        return (self._to_retry(msg, group, delay_level or FIRST_RETRY_LEVEL + origin.reconsume_times)
                or await self._put(msg, "send back"))

    def max_reconsume_times_of(self, group: str, given: int | None) -> int:
        """The sender's ``maxReconsumeTimes``, else the group's ``retryMaxTimes`` (``updateSubGroup``), as
        RocketMQ's ``consumerSendMsgBack`` and ``handleRetryAndDLQ`` read them: the C++ client and Java clients before
        3.4.9 send none."""
        if given is not None:
            return given
        config = self.groups.get(group)
        return DEFAULT_MAX_RECONSUME_TIMES if config is None else config.retry_max_times

    def write_refusal(self) -> Refusal | None:
        """Why this broker refuses a send or a message a consumer gives back (RocketMQ's ``consumerSendMsgBack``,
        which its proxy's forward to the dead letters sends too) for want of write (``not_writeable``), else None."""
        return None if self.writeable else self.not_writeable()

    def not_writeable(self) -> Refusal:
        """The refusal of a broker that does not write: its store lost durability (SERVICE_NOT_AVAILABLE saying so,
        as the store's own refusal does), or ``brokerPermission`` lacks write (RocketMQ's NO_PERMISSION)."""
        durability = self.store.durability
        if durability.lost:
            return Refusal(Kind.NOT_AVAILABLE, f"service not available now: {durability.remark}")
        return Refusal(Kind.NO_PERMISSION, f"the broker[{self.store_host[0]}] sending message is forbidden")

    def _to_retry(self, msg: MessageExt, group: str, level: int) -> Refusal | None:
        """``msg`` diverted to wait ``level`` (at most the last level) before it enters the group's retry topic,
        created when absent (BUSY, ``msg`` left as it is, when the broker may create no more topics now)."""
        retry = self.topics.retry_of(group)
        if isinstance(retry, Refusal):
            return retry
        msg.properties[MessageConst.DELAY_TIME_LEVEL] = str(min(level, self.schedule.max_level))
        self.schedule.divert(msg)
        return None

    async def dead_letter(self, group: str, origin: MessageExt, attempts: int) -> Refusal | None:
        """``origin``, delivered ``attempts`` times to ``group`` by pop, to the group's dead-letter topic."""
        msg = self._again(origin, origin.topic, attempts, "")
        return await self._stored_dead_letter(msg, group, "storing the dead letter")

    async def _put(self, msg: MessageExt, what: str) -> Refusal | None:
        """``msg`` stored once its topic is durable (a retry or dead-letter topic just created, also when the
        message waits in the schedule topic for it); STORE_FAILED when that creation failed (undone), as when the
        store refuses: a pop's dead letter then stays in flight instead of failing the whole receive."""
        topic = msg.properties[MessageConst.REAL_TOPIC] if msg.topic == RMQ_SYS_SCHEDULE_TOPIC else msg.topic
        try:
            await self.topics.manager.durable(topic)
        except OSError as exc:
            return Refusal(Kind.STORE_FAILED, f"{what} failed: topic {topic} not stored: {exc}")
        result = await self.store.put_message(msg)
        if not result.stored:
            return Refusal(Kind.STORE_FAILED, f"{what} failed: {result.status.name} {result.remark}".rstrip())
        return None
