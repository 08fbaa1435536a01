"""Topic names, rules and configs shared by broker, name server and client (RocketMQ ``TopicValidator``,
``MixAll``, ``PermName``, ``TopicConfig``). No IO."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from txmq.errors import InvalidMessageError

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
RMQ_SYS_SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RMQ_SYS_WHEEL_TIMER_TOPIC = "rmq_sys_wheel_timer"  # timer messages until due (RocketMQ TimerMessageStore.TIMER_TOPIC)
RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"  # RocketMQ TopicValidator.SYSTEM_TOPIC_PREFIX: every name it begins is a system topic
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        RMQ_SYS_SCHEDULE_TOPIC,
        RMQ_SYS_WHEEL_TIMER_TOPIC,
        RMQ_SYS_TRANS_HALF_TOPIC,
        RMQ_SYS_TRANS_OP_HALF_TOPIC,
        RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
    }
)
# Topics no client may send to directly: the broker writes them itself.
NOT_ALLOWED_SEND_TOPICS = SYSTEM_TOPICS - {AUTO_CREATE_TOPIC_KEY_TOPIC}

TOPIC_MAX_LENGTH = 127
MAX_QUEUE_NUMS = 1024  # read or write queues of one topic on one broker
GROUP_MAX_LENGTH = 255
# RocketMQ TopicValidator's pattern, matched against the whole name as Java's ``Pattern.matches`` does (``fullmatch``:
# ``match`` with ``$`` let a name end in a newline).
_VALID_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")


class PermName:
    """Queue permissions as RocketMQ encodes them."""

    PERM_PRIORITY = 0x8
    PERM_READ = 0x4
    PERM_WRITE = 0x2
    PERM_INHERIT = 0x1
    READ_WRITE = PERM_READ | PERM_WRITE

    @staticmethod
    def is_readable(perm: int) -> bool:
        return bool(perm & PermName.PERM_READ)

    @staticmethod
    def is_writeable(perm: int) -> bool:
        return bool(perm & PermName.PERM_WRITE)

    @staticmethod
    def cuts(broker_permission: int) -> bool:
        """Whether a broker serving ``broker_permission`` announces its topics' perms cut to it (RocketMQ's
        ``registerBrokerAll``): when it lacks read or write."""
        return broker_permission & PermName.READ_WRITE != PermName.READ_WRITE

    @staticmethod
    def within(perm: int, broker_permission: int) -> int:
        """A topic's ``perm`` as a broker serving ``broker_permission`` announces it (``cuts``)."""
        return perm & broker_permission if PermName.cuts(broker_permission) else perm

    @staticmethod
    def to_string(perm: int) -> str:
        return ("R" if perm & PermName.PERM_READ else "-") + ("W" if perm & PermName.PERM_WRITE else "-")


# Topic names that passed ``check_topic``: a send checks its topic every time, and a name's legality never changes,
# so a known name skips the regex. Bounded, so a peer sending ever new names grows it no further; past the bound
# names are checked in full as before.
_LEGAL_TOPICS: set[str] = set()
_LEGAL_TOPICS_MAX = 4096


def check_topic(topic: str) -> None:
    """Raise ``InvalidMessageError`` unless ``topic`` is a legal topic name."""
    if topic in _LEGAL_TOPICS:
        return
    _check_topic(topic)
    if len(_LEGAL_TOPICS) < _LEGAL_TOPICS_MAX and topic.__class__ is str:  # a subclass could compare unlike itself
        _LEGAL_TOPICS.add(topic)


def _check_topic(topic: str) -> None:
    if not topic or not topic.strip():
        raise InvalidMessageError("topic is blank")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidMessageError(f"topic is longer than {TOPIC_MAX_LENGTH} characters")
    if not _VALID_NAME.fullmatch(topic):
        raise InvalidMessageError(f"topic {topic!r} has illegal characters; allowed: ^[%|a-zA-Z0-9_-]+$")


def check_queue_nums(read: int, write: int) -> None:
    """Raise ``InvalidMessageError`` unless a topic's read and write queue numbers are both 1 to
    ``MAX_QUEUE_NUMS``: they size every loop over the topic's queues, a broker's registration and clients' routes."""
    if not (0 < read <= MAX_QUEUE_NUMS and 0 < write <= MAX_QUEUE_NUMS):
        raise InvalidMessageError(f"queue numbers must be between 1 and {MAX_QUEUE_NUMS} (read {read}, write {write})")


def out_of_bounds(configs: Iterable[TopicConfig]) -> dict[str, str]:
    """The topics among ``configs`` whose queue numbers ``check_queue_nums`` refuses, each with why: a peer's
    (a master's, a registering broker's) to be left out rather than adopted."""
    refused: dict[str, str] = {}
    for cfg in configs:
        try:
            check_queue_nums(cfg.read_queue_nums, cfg.write_queue_nums)
        except InvalidMessageError as exc:
            refused[cfg.topic_name] = str(exc)
    return refused


def check_group(group: str) -> None:
    """Raise ``InvalidMessageError`` unless ``group`` is a legal group name."""
    if not group or not group.strip():
        raise InvalidMessageError("group is blank")
    if len(group) > GROUP_MAX_LENGTH:
        raise InvalidMessageError(f"group is longer than {GROUP_MAX_LENGTH} characters")
    if not _VALID_NAME.fullmatch(group):
        raise InvalidMessageError(f"group {group!r} has illegal characters; allowed: ^[%|a-zA-Z0-9_-]+$")


def check_consumer_group(group: str) -> None:
    """``check_group`` for a group that consumes: it also names its ``%RETRY%`` and ``%DLQ%`` topics, which must
    be legal topics, so it is at most 120 characters."""
    check_group(group)
    if len(retry_topic(group)) > TOPIC_MAX_LENGTH:
        raise InvalidMessageError(f"consumer group is longer than {TOPIC_MAX_LENGTH - len(RETRY_GROUP_TOPIC_PREFIX)} "
                                  "characters: its retry topic would be longer than a topic may be")


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_system_topic(topic: str) -> bool:
    """RocketMQ's ``TopicValidator.isSystemTopic``: one of ``SYSTEM_TOPICS`` or a name under ``SYSTEM_TOPIC_PREFIX``
    (reserved for the broker's own topics, so an operator may neither create nor delete one)."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


@dataclass(slots=True)
class TopicConfig:
    """One topic on one broker: its queue counts and permission (RocketMQ ``TopicConfig``)."""

    topic_name: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = PermName.READ_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, object]:
        """RocketMQ's JSON field names. The fields read directly: every registration with the name servers encodes
        every topic, and ``dataclasses.asdict`` (a deep copy of each field) made that 0.07 s of CPU at 10,000."""
        return {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": self.topic_filter_type,
            "topicSysFlag": self.topic_sys_flag,
            "order": self.order,
        }

    @classmethod
    def from_json(cls, d: dict[str, object]) -> TopicConfig:
        return cls(
            topic_name=str(d["topicName"]),
            read_queue_nums=int(d.get("readQueueNums", 8)),  # type: ignore[call-overload]
            write_queue_nums=int(d.get("writeQueueNums", 8)),  # type: ignore[call-overload]
            perm=int(d.get("perm", PermName.READ_WRITE)),  # type: ignore[call-overload]
            topic_filter_type=str(d.get("topicFilterType", "SINGLE_TAG")),
            topic_sys_flag=int(d.get("topicSysFlag", 0)),  # type: ignore[call-overload]
            order=bool(d.get("order", False)),
        )
