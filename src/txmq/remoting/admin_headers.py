"""The headers of RocketMQ's admin requests that mqadmin and the dashboard send (topic and consume stats,
connections, offset resets, subscription groups, stats data)."""

from __future__ import annotations

import dataclasses

from txmq.remoting.request_headers import Header


@dataclasses.dataclass(slots=True)
class TopicRequestHeader(Header):
    """GET_TOPIC_STATS_INFO (202) and QUERY_TOPIC_CONSUME_BY_WHO (300)."""

    topic: str


@dataclasses.dataclass(slots=True)
class GetConsumeStatsRequestHeader(Header):
    consumer_group: str
    topic: str = ""  # empty: every topic the group has offsets on


@dataclasses.dataclass(slots=True)
class GetConsumerConnectionListRequestHeader(Header):
    consumer_group: str


@dataclasses.dataclass(slots=True)
class GetProducerConnectionListRequestHeader(Header):
    producer_group: str


@dataclasses.dataclass(slots=True)
class ResetOffsetRequestHeader(Header):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) and, broker to consumer, RESET_CONSUMER_CLIENT_OFFSET (220).
    ``timestamp`` -1 means the end of each queue (skipAccumulatedMessage)."""

    topic: str
    group: str
    timestamp: int
    is_force: bool = True


@dataclasses.dataclass(slots=True)
class DeleteSubscriptionGroupRequestHeader(Header):
    group_name: str
    clean_offset: bool = False


@dataclasses.dataclass(slots=True)
class ViewBrokerStatsDataRequestHeader(Header):
    stats_name: str
    stats_key: str
