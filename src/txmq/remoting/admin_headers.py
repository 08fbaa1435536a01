"""The headers of RocketMQ's admin requests that mqadmin and the dashboard send (topic and consume stats,
connections, offset resets, subscription groups, stats data, users and ACLs)."""

from __future__ import annotations

import dataclasses

from txmq.remoting.request_headers import Header, Int32


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


@dataclasses.dataclass(slots=True)
class DeleteTopicRequestHeader(Header):
    """DELETE_TOPIC_IN_BROKER (215) and DELETE_TOPIC_IN_NAMESRV (216)."""

    topic: str


@dataclasses.dataclass(slots=True)
class ViewMessageRequestHeader(Header):
    """VIEW_MESSAGE_BY_ID (33): the commit-log offset an offset message id names."""

    offset: int


@dataclasses.dataclass(slots=True)
class QueryConsumeQueueRequestHeader(Header):
    """QUERY_CONSUME_QUEUE (321), mqadmin's ``queryCq``: ``count`` entries of one consume queue from logical offset
    ``index``; with ``consumer_group``, that group's subscription to the topic as well."""

    topic: str
    queue_id: Int32
    index: int
    count: Int32 = 10
    consumer_group: str | None = None


@dataclasses.dataclass(slots=True)
class TxListRequestHeader(Header):
    """txmq's TXMQ_TX_LIST (9002); with ``group``, only that producer group's transactions."""

    limit: Int32 = 100
    group: str | None = None


@dataclasses.dataclass(slots=True)
class TxRequestHeader(Header):
    """txmq's TXMQ_TX_SHOW and TXMQ_TX_RESUME (9003, 9004): a transaction by half offset or transaction id;
    with ``group``, only one of that producer group."""

    id: str
    group: str | None = None


def half_offset_of(ident: str) -> int | None:
    """The half offset a transaction request's ``id`` names (digits, shorter than 20), or None: a transaction id.
    The broker reads ``id`` so, and the admin client asks which brokers by it (each numbers its halves from 0)."""
    return int(ident) if ident.isdigit() and len(ident) < 20 else None


@dataclasses.dataclass(slots=True)
class TxDecideRequestHeader(Header):
    """txmq's TXMQ_TX_DECIDE (9006): an operator's COMMIT or ROLLBACK."""

    id: str
    outcome: str
    group: str | None = None


@dataclasses.dataclass(slots=True)
class UserRequestHeader(Header):
    """AUTH_CREATE_USER (3001), AUTH_UPDATE_USER (3002), AUTH_DELETE_USER (3003), AUTH_GET_USER (3004): RocketMQ's
    Create/Update/Delete/GetUserRequestHeader, each the username alone (create and update carry a ``UserInfo``
    body)."""

    username: str


@dataclasses.dataclass(slots=True)
class ListUsersRequestHeader(Header):
    """AUTH_LIST_USER (3005): users whose name contains ``filter`` (every user when empty)."""

    filter: str = ""


@dataclasses.dataclass(slots=True)
class AclRequestHeader(Header):
    """AUTH_CREATE_ACL (3006), AUTH_UPDATE_ACL (3007), AUTH_GET_ACL (3009): RocketMQ's Create/Update/
    GetAclRequestHeader, each the subject alone (``User:NAME``; create and update carry an ``AclInfo`` body)."""

    subject: str


@dataclasses.dataclass(slots=True)
class DeleteAclRequestHeader(Header):
    """AUTH_DELETE_ACL (3008): the subject's whole ACL, or only its entry for ``resource`` in the ``policyType``
    policy (Custom when empty)."""

    subject: str
    policy_type: str = ""
    resource: str = ""


@dataclasses.dataclass(slots=True)
class ListAclsRequestHeader(Header):
    """AUTH_LIST_ACL (3010): ACLs whose subject contains ``subjectFilter``, entries whose resource contains
    ``resourceFilter``."""

    subject_filter: str = ""
    resource_filter: str = ""
