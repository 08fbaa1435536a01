"""Which topic a request means, and the topics the broker creates itself: one auto-created for a send or a route
from TBW102 (``autoCreateTopicEnable``), a consumer group's ``%RETRY%`` topic, and its ``%DLQ%`` topic — read-write,
as in RocketMQ 5: operators read dead letters (the console, ``printMsg``) before resending them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from txmq.broker.core.refusal import Kind, Refusal
from txmq.broker.visibility import internal_refusal
from txmq.errors import InvalidMessageError
from txmq.topic import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    RETRY_GROUP_TOPIC_PREFIX,
    PermName,
    TopicConfig,
    check_topic,
    dlq_topic,
    retry_topic,
)

if TYPE_CHECKING:
    from txmq.broker.config import BrokerConfig
    from txmq.broker.topic_config_manager import TopicConfigManager

RETRY_QUEUE_NUMS = 1  # RocketMQ's retryQueueNums (a subscription group's default)
DLQ_QUEUE_NUMS = 1  # RocketMQ's DLQ_NUMS_PER_GROUP
# Topics the broker may create for clients' requests while the records of others are not durable yet: each, and
# each request waiting for it, is held in memory (a client naming ever new topics or groups faster than the disk
# stores them). Every such creation passes ``TopicService.creation_room``: beyond the bound a send, a send-back or a
# dead letter that would create one more is refused BUSY, and a heartbeat registers no more consumer groups whose
# retry topic does not exist yet than there is room for.
MAX_PENDING_CREATIONS = 4096


def name_refusal(topic: str) -> Refusal | None:
    """ILLEGAL_TOPIC for a name TopicValidator refuses, else None."""
    try:
        check_topic(topic)
    except InvalidMessageError as exc:
        return Refusal(Kind.ILLEGAL_TOPIC, str(exc))
    return None


class TopicService:
    """Finds or creates the topic a request names, over the broker's ``TopicConfigManager`` (which persists each
    change and re-registers with the name servers)."""

    def __init__(self, manager: TopicConfigManager, config: BrokerConfig) -> None:
        self.manager = manager
        self.config = config

    def find(self, topic: str, *, create: bool = False, planned: bool = False,
             default_topic: str = AUTO_CREATE_TOPIC_KEY_TOPIC, queue_nums: int | None = None) -> TopicConfig | Refusal:
        """The config of ``topic``. ``create``: one that does not exist is created, as a send creates it: a retry
        topic with its queue, any other from ``default_topic`` when that one lets topics inherit from it and the
        broker auto-creates topics (a slave creates none: its topics are its master's). ``planned``: the config
        such a send would create it with, not stored (a route lookup, which Sub or Get allow, creates nothing)."""
        refused = name_refusal(topic)
        if refused is not None:
            return refused
        internal = internal_refusal(topic)
        if internal is not None:
            return Refusal(Kind.NO_PERMISSION, internal)
        cfg: TopicConfig | Refusal | None = self.manager.get(topic)
        if cfg is None and (create or planned) and not self.config.is_slave:
            nums = self.config.default_topic_queue_nums if queue_nums is None else queue_nums
            if planned:
                if self.config.auto_create_topic_enable:
                    cfg = self.manager.inherited(topic, default_topic, nums)
            elif topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                cfg = self._owned(topic, RETRY_QUEUE_NUMS)
            elif self.config.auto_create_topic_enable:
                if self.creation_room():
                    cfg = self.manager.create_in_send(topic, default_topic, nums)
                elif self.manager.inherited(topic, default_topic, nums) is not None:
                    cfg = self._busy()  # BUSY only for a send that would create the topic: else TOPIC_NOT_EXIST
        if isinstance(cfg, Refusal):
            return cfg
        if cfg is None:
            return Refusal(Kind.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please! "
                           f"(autoCreateTopicEnable is {str(self.config.auto_create_topic_enable).lower()})")
        return cfg

    def creation_room(self) -> int:
        """How many more topics the broker may create now for clients' requests (``MAX_PENDING_CREATIONS``): the
        one check of every such creation, as each creation waiting for the disk is held in memory."""
        return max(0, MAX_PENDING_CREATIONS - len(self.manager.pending))

    def retry_of(self, group: str) -> TopicConfig | Refusal:
        """The group's retry topic, created read-write when absent; BUSY when there is no room to create it."""
        return self._owned(retry_topic(group), RETRY_QUEUE_NUMS)

    def dead_letters_of(self, group: str) -> TopicConfig | Refusal:
        """The group's dead-letter topic, created read-write when absent; BUSY when there is no room to create
        it."""
        return self._owned(dlq_topic(group), DLQ_QUEUE_NUMS)

    def _owned(self, topic: str, queue_nums: int) -> TopicConfig | Refusal:
        cfg = self.manager.get(topic)
        if cfg is not None:
            return cfg
        if not self.creation_room():
            return self._busy()
        return self.manager.create_if_absent(topic, queue_nums, PermName.READ_WRITE)

    def _busy(self) -> Refusal:
        return Refusal(Kind.BUSY, f"{len(self.manager.pending)} topics being created: send again later")
