"""What each request code needs (RocketMQ's ``PlainAccessValidator.parse``), plus txmq's rules for transactions
and the name server. A code not listed needs only a valid signature.

RocketMQ's table: sends need PUB on the topic (a retry topic ``%RETRY%G``: SUB on group G), pulls, offsets and
consumer lists SUB on the topic and the group, heartbeats SUB on each consumer group and its topics, topic and
subscription-group changes ``admin``. Beyond RocketMQ: a half (transactional) send needs PUB on the group that
will own the half (its ``PGROUP`` property); END_TRANSACTION (and a check answer, which is one), a producer
heartbeat and unregistration need PUB on the producer group, queue locks SUB on the consumer group;
``tx list|show|resume`` need ``admin`` or a ``group`` field the account may publish for; the broker's stats,
reset-offset and the name server's route writes need ``admin``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from txmq.acl import model
from txmq.acl.config import PUB, SUB
from txmq.acl.model import Action, Resource, ResourceType
from txmq.errors import RemoteProtocolError
from txmq.message import MessageConst, decode_batch, string_to_properties
from txmq.remoting.codes import RequestCode
from txmq.remoting.command import RemotingCommand
from txmq.topic import RETRY_GROUP_TOPIC_PREFIX

_HALF_MARK = MessageConst.TRANSACTION_PREPARED + "\x01true"
# The account that stored a half message, set by the broker (txmq.acl.validator) and refused from senders.
HALF_ACCOUNT = "TXMQ_HALF_ACCOUNT"
_HALF_ACCOUNT_MARK = HALF_ACCOUNT + "\x01"


@dataclass(slots=True)
class Needs:
    """Resources a request touches and the permission each needs. ``admin``: Update on the cluster; ``cluster``:
    that action on the cluster instead (Get for the user and ACL reads)."""

    admin: bool = False
    topics: list[tuple[str, int]] = field(default_factory=list)
    groups: list[tuple[str, int]] = field(default_factory=list)
    half_properties: str | None = None  # a single half send: the ext field holding its properties
    cluster: Action | None = None

    def topic(self, topic: str, perm: int) -> Needs:
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):  # a retry topic is its group's resource
            self.groups.append((topic[len(RETRY_GROUP_TOPIC_PREFIX):], SUB))
        elif topic:
            self.topics.append((topic, perm))
        return self

    def group(self, group: str, perm: int) -> Needs:
        if group:
            self.groups.append((group, perm))
        return self

    def as_model(self) -> model.Needs:
        """The same in ACL 2.0's terms (``txmq.acl.model``): PUB is Pub, SUB Sub (both bits: both actions).
        ``topic`` already made a retry topic its group's resource."""
        wants = []
        if self.admin or self.cluster is not None:
            wants.append((Resource.cluster(), _ONE[self.cluster or Action.UPDATE]))
        for topic, perm in self.topics:
            wants += [(Resource(ResourceType.TOPIC, topic), actions) for actions in _ACTIONS[perm]]
        for group, perm in self.groups:
            wants += [(Resource(ResourceType.GROUP, group), actions) for actions in _ACTIONS[perm]]
        return model.Needs(wants)


_ONE = {action: frozenset({action}) for action in Action}
# A 1.0 permission as the actions it needs, each one of them a want (PUB|SUB needs both).
_ACTIONS = {perm: tuple(_ONE[a] for bit, a in ((PUB, Action.PUB), (SUB, Action.SUB)) if perm & bit)
            for perm in range(8)}


class RequestNotReadable(ValueError):
    """No account may make this request: its resources cannot be read (a body that is not what its code
    carries), or it sets what only the broker may set."""


def _json_body(cmd: RemotingCommand) -> Any:
    try:
        return orjson.loads(cmd.body or b"{}")
    except orjson.JSONDecodeError as exc:
        raise RequestNotReadable(f"body is not JSON: {exc}") from None


def _send(cmd: RemotingCommand) -> Needs:
    ext = cmd.ext_fields
    v2 = cmd.code != RequestCode.SEND_MESSAGE
    props_field = "i" if v2 else "properties"
    topic, group, props = (ext.get("b", ""), ext.get("a", ""), ext.get(props_field, "")) if v2 else \
        (ext.get("topic", ""), ext.get("producerGroup", ""), ext.get(props_field, ""))
    batch = cmd.code == RequestCode.SEND_BATCH_MESSAGE or ext.get("m" if v2 else "batch") in ("true", "1")
    if _HALF_ACCOUNT_MARK in props or (batch and _HALF_ACCOUNT_MARK.encode() in cmd.body):
        raise RequestNotReadable(f"property {HALF_ACCOUNT} is set by the broker only")
    needs = Needs().topic(topic, PUB)
    if _HALF_MARK in props:
        needs.group(string_to_properties(props).get(MessageConst.PRODUCER_GROUP, group), PUB)
        if not batch:
            needs.half_properties = props_field
    if batch and _HALF_MARK.encode() in cmd.body:
        try:
            items = decode_batch(cmd.body)
        except RemoteProtocolError as exc:
            raise RequestNotReadable(f"batch body: {exc}") from None
        for _flag, _body, item_props in items:
            if item_props.get(MessageConst.TRANSACTION_PREPARED) == "true":
                needs.group(item_props.get(MessageConst.PRODUCER_GROUP, group), PUB)
    return needs


def _send_back(cmd: RemotingCommand) -> Needs:
    return Needs().topic(cmd.ext_fields.get("originTopic", ""), PUB).group(cmd.ext_fields.get("group", ""), SUB)


def _topic_and_group(cmd: RemotingCommand) -> Needs:
    ext = cmd.ext_fields
    return Needs().topic(ext.get("topic", ""), SUB).group(ext.get("consumerGroup", ""), SUB)


def _heartbeat(cmd: RemotingCommand) -> Needs:
    data = _json_body(cmd)
    if not isinstance(data, dict):
        raise RequestNotReadable("heartbeat body is not an object")
    needs = Needs()
    for producer in data.get("producerDataSet") or []:
        needs.group(str(producer.get("groupName", "")) if isinstance(producer, dict) else "", PUB)
    for consumer in data.get("consumerDataSet") or []:
        if not isinstance(consumer, dict):
            raise RequestNotReadable("consumerDataSet entries must be objects")
        needs.group(str(consumer.get("groupName", "")), SUB)
        for sub in consumer.get("subscriptionDataSet") or []:
            needs.topic(str(sub.get("topic", "")) if isinstance(sub, dict) else "", SUB)
    return needs


def _unregister(cmd: RemotingCommand) -> Needs:
    ext = cmd.ext_fields
    return Needs().group(ext.get("producerGroup", ""), PUB).group(ext.get("consumerGroup", ""), SUB)


def _queue_lock(cmd: RemotingCommand) -> Needs:
    data = _json_body(cmd)
    group = data.get("consumerGroup") if isinstance(data, dict) else None
    if not isinstance(group, str):
        raise RequestNotReadable("the body needs consumerGroup")
    return Needs().group(group, SUB)


def _end_transaction(cmd: RemotingCommand) -> Needs:
    # The transaction service refuses a decision whose producerGroup is not the half's own (PGROUP), so PUB on
    # the named group is PUB on the half's group.
    return Needs().group(cmd.ext_fields.get("producerGroup", ""), PUB)


def _end_transaction_batch(cmd: RemotingCommand) -> Needs:
    data = _json_body(cmd)
    group = data.get("producerGroup") if isinstance(data, dict) else None
    if not isinstance(group, str):
        raise RequestNotReadable("the body needs producerGroup")
    return Needs().group(group, PUB)


def _tx_admin(cmd: RemotingCommand) -> Needs:
    group = cmd.ext_fields.get("group", "")
    return Needs().group(group, PUB) if group else Needs(admin=True)


def _admin(cmd: RemotingCommand) -> Needs:
    return Needs(admin=True)


def _group_sub(cmd: RemotingCommand) -> Needs:
    return Needs().group(cmd.ext_fields.get("consumerGroup", ""), SUB)


def _topic_sub(cmd: RemotingCommand) -> Needs:
    return Needs().topic(cmd.ext_fields.get("topic", ""), SUB)


Table = dict[int, Callable[[RemotingCommand], Needs]]

BROKER_TABLE: Table = {
    RequestCode.SEND_MESSAGE: _send,
    RequestCode.SEND_MESSAGE_V2: _send,
    RequestCode.SEND_BATCH_MESSAGE: _send,
    RequestCode.CONSUMER_SEND_MSG_BACK: _send_back,
    RequestCode.PULL_MESSAGE: _topic_and_group,
    RequestCode.QUERY_CONSUMER_OFFSET: _topic_and_group,
    RequestCode.UPDATE_CONSUMER_OFFSET: _topic_and_group,
    RequestCode.QUERY_MESSAGE: _topic_sub,
    RequestCode.HEART_BEAT: _heartbeat,
    RequestCode.UNREGISTER_CLIENT: _unregister,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _group_sub,
    RequestCode.LOCK_BATCH_MQ: _queue_lock,
    RequestCode.UNLOCK_BATCH_MQ: _queue_lock,
    RequestCode.END_TRANSACTION: _end_transaction,
    RequestCode.TXMQ_END_TRANSACTION_BATCH: _end_transaction_batch,
    RequestCode.TXMQ_TX_LIST: _tx_admin,
    RequestCode.TXMQ_TX_SHOW: _tx_admin,
    RequestCode.TXMQ_TX_RESUME: _tx_admin,
    RequestCode.TXMQ_TX_DECIDE: _tx_admin,
    **{code: _admin for code in (
        RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.UPDATE_BROKER_CONFIG, RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, RequestCode.GET_ALL_CONSUMER_OFFSET, RequestCode.TXMQ_STATS)},
}

def _cluster_get(cmd: RemotingCommand) -> Needs:
    return Needs(cluster=Action.GET)


# RocketMQ's user and ACL administration: changes need Update on the cluster, reads Get (a Super user passes).
AUTH_TABLE: Table = {
    **{code: _admin for code in (
        RequestCode.AUTH_CREATE_USER, RequestCode.AUTH_UPDATE_USER, RequestCode.AUTH_DELETE_USER,
        RequestCode.AUTH_CREATE_ACL, RequestCode.AUTH_UPDATE_ACL, RequestCode.AUTH_DELETE_ACL)},
    **{code: _cluster_get for code in (
        RequestCode.AUTH_GET_USER, RequestCode.AUTH_LIST_USER, RequestCode.AUTH_GET_ACL, RequestCode.AUTH_LIST_ACL)},
}
BROKER_TABLE.update(AUTH_TABLE)

NAMESRV_TABLE: Table = {**AUTH_TABLE, **{code: _admin for code in (
    RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.DELETE_TOPIC_IN_NAMESRV)}}

# The controller's writes (heartbeats register replicas and may elect; the SyncStateSet) come from the cluster's
# brokers: an admin account. Reading its state (controller status) needs any account.
CONTROLLER_TABLE: Table = {code: _admin for code in (
    RequestCode.BROKER_HEARTBEAT, RequestCode.CONTROLLER_REGISTER_BROKER, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
    RequestCode.CONTROLLER_ELECT_MASTER)}


def needs_of(table: Table, cmd: RemotingCommand) -> Needs:
    """Raises ``RequestNotReadable`` for whatever a peer's malformed request makes the parsers trip on."""
    parse = table.get(cmd.code)
    if parse is None:
        return Needs()
    try:
        return parse(cmd)
    except (TypeError, AttributeError, ValueError) as exc:  # RequestNotReadable is a ValueError
        raise exc if isinstance(exc, RequestNotReadable) else RequestNotReadable(f"malformed: {exc}") from None
