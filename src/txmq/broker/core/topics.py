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
# Topics a send may create while the records of others are not durable yet: each, and each send waiting for it,
# is held in memory; beyond it a send that would create one more is refused BUSY (a client naming ever new topics
# faster than the disk stores them); a heartbeat then registers no consumer group whose retry topic does not exist yet.
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
        cfg = self.manager.get(topic)
        if cfg is None and create and len(self.manager.pending) >= MAX_PENDING_CREATIONS:
            return Refusal(Kind.BUSY, f"{len(self.manager.pending)} topics being created: send again later")
        if cfg is None and (create or planned) and not self.config.is_slave:
            nums = self.config.default_topic_queue_nums if queue_nums is None else queue_nums
            if planned:
                if self.config.auto_create_topic_enable:
                    cfg = self.manager.inherited(topic, default_topic, nums)
            elif topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                cfg = self.manager.create_if_absent(topic, RETRY_QUEUE_NUMS)
            elif self.config.auto_create_topic_enable:
                cfg = self.manager.create_in_send(topic, default_topic, nums)
        if cfg is None:
            return Refusal(Kind.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please! "
                           f"(autoCreateTopicEnable is {str(self.config.auto_create_topic_enable).lower()})")
        return cfg

    def retry_of(self, group: str) -> TopicConfig:
        """The group's retry topic, created read-write when absent."""
        return self.manager.create_if_absent(retry_topic(group), RETRY_QUEUE_NUMS, PermName.READ_WRITE)

    def dead_letters_of(self, group: str) -> TopicConfig:
        """The group's dead-letter topic, created read-write when absent."""
        return self.manager.create_if_absent(dlq_topic(group), DLQ_QUEUE_NUMS, PermName.READ_WRITE)
