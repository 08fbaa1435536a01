"""Heartbeats, unregistration, consumer lists, queue locks and subscription checks (codes 34, 35, 38, 41, 42,
46): RocketMQ's ``ClientManageProcessor`` and ``RebalanceLockManager``.

A subscription the broker cannot filter by (a SQL92 expression that does not parse, or SQL92 with
``enablePropertyFilter=false``) is refused when it is announced: CHECK_CLIENT_CONFIG (what RocketMQ's clients ask
before they subscribe with SQL92) and a heartbeat naming it are answered SUBSCRIPTION_PARSE_FAILED, or
SYSTEM_ERROR when SQL92 is off, as RocketMQ answers, and the heartbeat registers nothing."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import orjson

from txmq.acl.model import Action, Needs
from txmq.broker.client_manager import ClientChannelInfo, ConsumerGroupInfo, SubscriptionData, joined
from txmq.filter import ExpressionType, FilterRefused, build_filter
from txmq.remoting.body import read_body
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import RequestSpec, header
from txmq.remoting.request_headers import GetConsumerListByGroupRequestHeader, UnregisterClientRequestHeader
from txmq.remoting.transport import Connection
from txmq.topic import check_consumer_group, check_group, check_topic, retry_topic

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

log = logging.getLogger("txmq.broker")

REBALANCE_LOCK_MAX_LIVE_S = 60.0
REBALANCE_LOCK_MAX_ENTRIES = 100_000  # a hostile client's locks must not grow the table without bound
# Groups one heartbeat may name: one client's producers and consumers (a RocketMQ client instance has a few). Each
# new consumer group costs a retry topic, a registration and its notices: one request must not make thousands.
MAX_HEARTBEAT_GROUPS = 1024
# A client id is ``ip@instanceName`` (gRPC clients add a pid and a counter): a few dozen characters. It is logged at
# each join and kept per connection and per lock, so a peer's must not be megabytes.
MAX_CLIENT_ID_CHARS = 1024

MessageQueueKey = tuple[str, str, str, int]  # (group, topic, brokerName, queueId)


class RebalanceLockManager:
    """Orderly consumers lock the queues they consume so that one client at a time owns a queue. The caller passes
    only queues this broker serves; the table holds at most ``max_entries`` locks (expired ones are dropped to make
    room, and a lock that finds no room is not granted)."""

    def __init__(self, max_entries: int = REBALANCE_LOCK_MAX_ENTRIES) -> None:
        self.locks: dict[MessageQueueKey, tuple[str, float]] = {}
        self.max_entries = max_entries

    def try_lock(self, group: str, mqs: list[dict[str, Any]], client_id: str) -> list[dict[str, Any]]:
        now = time.monotonic()
        ok = []
        for mq in mqs:
            key = _key(group, mq)
            owner = self.locks.get(key)
            if owner is None and not self._room(now):
                continue
            if owner is None or owner[0] == client_id or now - owner[1] > REBALANCE_LOCK_MAX_LIVE_S:
                self.locks[key] = (client_id, now)
                ok.append(mq)
        return ok

    def unlock(self, group: str, mqs: list[dict[str, Any]], client_id: str) -> None:
        for mq in mqs:
            key = _key(group, mq)
            if self.locks.get(key, ("",))[0] == client_id:
                del self.locks[key]

    def _room(self, now: float) -> bool:
        if len(self.locks) < self.max_entries:
            return True
        for key in [k for k, (_, at) in self.locks.items() if now - at > REBALANCE_LOCK_MAX_LIVE_S]:
            del self.locks[key]
        return len(self.locks) < self.max_entries


def _key(group: str, mq: dict[str, Any]) -> MessageQueueKey:
    return group, str(mq["topic"]), str(mq.get("brokerName", "")), int(mq["queueId"])


class ClientManageProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.locks = RebalanceLockManager()
        self._watched: set[int] = set()

    def requests(self) -> list[RequestSpec[Any]]:
        return [
            RequestSpec(RequestCode.HEART_BEAT, parse_heartbeat, heartbeat_needs, self.heartbeat),
            RequestSpec(RequestCode.UNREGISTER_CLIENT, header(UnregisterClientRequestHeader), unregister_needs,
                        self.unregister),
            RequestSpec(RequestCode.GET_CONSUMER_LIST_BY_GROUP, header(GetConsumerListByGroupRequestHeader),
                        consumer_list_needs, self.consumer_list),
            RequestSpec(RequestCode.LOCK_BATCH_MQ, parse_lock, lock_needs, self.lock),
            RequestSpec(RequestCode.UNLOCK_BATCH_MQ, parse_lock, lock_needs, self.unlock),
            RequestSpec(RequestCode.CHECK_CLIENT_CONFIG, parse_check_client, check_client_needs, self.check_client),
        ]

    def _refusal(self, cmd: RemotingCommand, subs: list[SubscriptionData]) -> RemotingCommand | None:
        """The answer to subscriptions the broker cannot filter by, or None when it can filter by them all."""
        for sub in subs:
            try:
                build_filter(sub.expression_type, sub.sub_string,
                             sql_enabled=self.broker.config.enable_property_filter)
            except FilterRefused as exc:
                code = ResponseCode.SYSTEM_ERROR if exc.disabled else ResponseCode.SUBSCRIPTION_PARSE_FAILED
                return RemotingCommand.response_to(cmd, code, remark=f"topic {sub.topic}: {exc}")
        return None

    def check_client(self, conn: Connection, cmd: RemotingCommand, check: ClientCheck) -> RemotingCommand:
        return self._refusal(cmd, [check[2]]) or RemotingCommand.response_to(cmd, ResponseCode.SUCCESS)

    def unregister(self, conn: Connection, cmd: RemotingCommand, h: UnregisterClientRequestHeader) -> RemotingCommand:
        if h.producer_group:
            self.broker.producer_manager.unregister(h.producer_group, conn)
        if h.consumer_group:
            self.broker.consumer_manager.unregister(h.consumer_group, conn)
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS)

    def consumer_list(self, conn: Connection, cmd: RemotingCommand,
                      h: GetConsumerListByGroupRequestHeader) -> RemotingCommand:
        group = self.broker.consumer_manager.get(h.consumer_group)
        if group is None:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark="no consumer for this group")
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS,
                                           body=orjson.dumps({"consumerIdList": group.client_ids()}))

    def lock(self, conn: Connection, cmd: RemotingCommand, req: LockRequest) -> RemotingCommand:
        name, client_id, mqs = req
        ok = self.locks.try_lock(name, [mq for mq in mqs if self._serves(mq)], client_id)
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=orjson.dumps({"lockOKMQSet": ok}))

    def unlock(self, conn: Connection, cmd: RemotingCommand, req: LockRequest) -> RemotingCommand:
        name, client_id, mqs = req
        self.locks.unlock(name, mqs, client_id)
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS)

    def _serves(self, mq: dict[str, Any]) -> bool:
        """A queue of a topic this broker holds (by this broker's name, when the client names one): only those are
        locked, so the lock table is bounded by the broker's own queues per group."""
        topic = self.broker.topic_config_manager.get(str(mq["topic"]))
        if topic is None or mq.get("brokerName", "") not in ("", self.broker.config.broker_name):
            return False
        return 0 <= int(mq["queueId"]) < max(topic.read_queue_nums, topic.write_queue_nums)

    def heartbeat(self, conn: Connection, cmd: RemotingCommand,
                  beat: Heartbeat) -> RemotingCommand | Awaitable[RemotingCommand | None]:
        subs = [sub for info in beat[2] for sub in info.subscriptions.values()]
        if sum(_is_sql(sub) for sub in subs) > 1:
            return self._heartbeat_stepwise(conn, cmd, beat, subs)
        return self._refusal(cmd, subs) or self._register(conn, cmd, beat)

    async def _heartbeat_stepwise(self, conn: Connection, cmd: RemotingCommand, beat: Heartbeat,
                                  subs: list[SubscriptionData]) -> RemotingCommand | None:
        """A heartbeat naming several SQL92 subscriptions (a heartbeat may name a thousand groups): each is compiled
        in a loop step of its own, so that the heartbeat holds the loop no longer than one compile (bounded by
        ``MAX_TOKENS``) at a time. Not answered when its connection closed meanwhile: nothing to register."""
        for sub in subs:
            refused = self._refusal(cmd, [sub])
            if refused is not None:
                return refused
            if _is_sql(sub):
                await asyncio.sleep(0)
        if conn.closed:
            return None
        registered = self._register(conn, cmd, beat)
        return await registered if inspect.isawaitable(registered) else registered

    def _register(self, conn: Connection, cmd: RemotingCommand,
                  beat: Heartbeat) -> RemotingCommand | Awaitable[RemotingCommand]:
        """The heartbeat's groups registered, its subscriptions checked."""
        client_id, producers, consumers = beat
        broker = self.broker
        manager = broker.topic_config_manager
        remark = None
        deferred = self._deferred(consumers)
        if deferred:
            consumers = [info for info in consumers if info.group not in deferred]
            remark = (f"{len(manager.pending)} topics being created: consumer groups "
                      f"{', '.join(sorted(deferred)[:10])} not registered yet, heartbeat again later")
        retry_topics = [retry_topic(info.group) for info in consumers if info.message_model == "CLUSTERING"]
        self._watch(conn)
        chan = ClientChannelInfo(conn, client_id, str(cmd.language), int(cmd.version))
        joined("producer", chan, [g for g in producers if broker.producer_manager.register(g, chan)])
        created = manager.create_all_absent(retry_topics, 1)
        joined("consumer", chan, [info.group for info in consumers if broker.consumer_manager.register(info, chan)])
        ok = RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, remark=remark)
        pending = [topic for topic in retry_topics if topic in manager.pending] if manager.pending else []
        return self._after_register(ok, pending) if created or pending else ok

    def _deferred(self, consumers: list[ConsumerGroupInfo]) -> set[str]:
        """The new consumer groups (their retry topic does not exist yet) beyond the room the bound on creations
        leaves (``TopicService.creation_room``), as a send creating a topic meets it: not registered (their
        client, not listed, heartbeats again); the rest of the heartbeat is, so that the client's other groups stay
        alive meanwhile (an expired producer group loses its check-backs)."""
        table = self.broker.topic_config_manager.table
        new = list(dict.fromkeys(info.group for info in consumers
                                 if info.message_model == "CLUSTERING" and retry_topic(info.group) not in table))
        return set(new[self.broker.core.topics.creation_room():])

    async def _after_register(self, resp: RemotingCommand, pending: list[str]) -> RemotingCommand:
        """Answer once the new retry topics are durable and the name servers route them: the consumer's first
        rebalance needs them."""
        for topic in pending:
            await self.broker.topic_config_manager.durable(topic)
        await self.broker.register_all()
        return resp

    def _watch(self, conn: Connection) -> None:
        if id(conn) in self._watched:
            return
        self._watched.add(id(conn))

        def closed(c: Connection) -> None:
            self._watched.discard(id(c))
            self.broker.producer_manager.remove_connection(c)
            self.broker.consumer_manager.remove_connection(c)

        conn.on_close.append(closed)


Heartbeat = tuple[str, list[str], list[ConsumerGroupInfo]]
LockRequest = tuple[str, str, list[dict[str, Any]]]
ClientCheck = tuple[str, str, SubscriptionData]  # (client id, consumer group, the subscription to check)


def parse_heartbeat(cmd: RemotingCommand) -> Heartbeat:
    return read_body(cmd.body, _heartbeat, "a heartbeat body holds clientID, producerDataSet and consumerDataSet")


def heartbeat_needs(beat: Heartbeat) -> Needs:
    """Pub on each producer group it names (so check-backs go only to the group's own accounts); Sub on each
    consumer group and each topic it subscribes to."""
    needs = Needs()
    for group in beat[1]:
        needs.group(group, Action.PUB)
    for info in beat[2]:
        needs.group(info.group, Action.SUB)
        for topic in info.subscriptions:
            needs.topic(topic, Action.SUB)
    return needs


def unregister_needs(h: UnregisterClientRequestHeader) -> Needs:
    """Pub on the producer group, Sub on the consumer group it names."""
    return Needs().group(h.producer_group, Action.PUB).group(h.consumer_group, Action.SUB)


def consumer_list_needs(h: GetConsumerListByGroupRequestHeader) -> Needs:
    """Sub or Get on the consumer group."""
    return Needs().group(h.consumer_group, Action.SUB, Action.GET)


def parse_lock(cmd: RemotingCommand) -> LockRequest:
    return read_body(cmd.body, _lock_request, "a lock body holds consumerGroup, clientId and mqSet")


def lock_needs(req: LockRequest) -> Needs:
    """Sub on the consumer group and on each queue's topic (else anyone could hold a group's queues)."""
    needs = Needs().group(req[0], Action.SUB)
    for topic in {str(mq["topic"]) for mq in req[2]}:
        needs.topic(topic, Action.SUB)
    return needs


def _heartbeat(data: dict[str, Any]) -> Heartbeat:
    """(client id, producer groups, consumer groups) of a heartbeat body, every name checked before anything is
    registered (``InvalidMessageError``); at most ``MAX_HEARTBEAT_GROUPS`` groups."""
    producer_data, consumer_data = data.get("producerDataSet") or [], data.get("consumerDataSet") or []
    if len(producer_data) + len(consumer_data) > MAX_HEARTBEAT_GROUPS:
        raise ValueError(f"{len(producer_data) + len(consumer_data)} groups, more than one client has "
                         f"({MAX_HEARTBEAT_GROUPS} at most)")
    producers = [str(p["groupName"]) for p in producer_data]
    for group in producers:
        check_group(group)
    return _client_id(data.get("clientID", "")), producers, [_consumer(c) for c in consumer_data]


def parse_check_client(cmd: RemotingCommand) -> ClientCheck:
    return read_body(cmd.body, _check_client, "a client check body holds clientId, group and subscriptionData")


def check_client_needs(check: ClientCheck) -> Needs:
    """Sub on the consumer group and the topic, as subscribing needs."""
    return Needs().group(check[1], Action.SUB).topic(check[2].topic, Action.SUB)


def _check_client(data: dict[str, Any]) -> ClientCheck:
    group = str(data["group"])
    check_group(group)
    return _client_id(data.get("clientId", "")), group, _subscription(data["subscriptionData"])


def _subscription(s: dict[str, Any]) -> SubscriptionData:
    sd = SubscriptionData(str(s["topic"]), str(s.get("subString", "*")), list(s.get("tagsSet") or []),
                          list(s.get("codeSet") or []), int(s.get("subVersion", 0) or 0),
                          str(s.get("expressionType") or "TAG"))
    check_topic(sd.topic)
    return sd


def _consumer(c: dict[str, Any]) -> ConsumerGroupInfo:
    """One consumer group of a heartbeat, its names checked."""
    group = str(c["groupName"])
    check_group(group)
    subs = {}
    for s in c.get("subscriptionDataSet") or []:
        sd = _subscription(s)
        subs[sd.topic] = sd
    info = ConsumerGroupInfo(group, str(c.get("consumeType", "CONSUME_PASSIVELY")),
                             str(c.get("messageModel", "CLUSTERING")),
                             str(c.get("consumeFromWhere", "CONSUME_FROM_LAST_OFFSET")), subs)
    if info.message_model == "CLUSTERING":
        check_consumer_group(group)
    return info


def _lock_request(data: dict[str, Any]) -> LockRequest:
    """(group, client id, queues) of a lock or unlock body; each queue has a topic and an integer queue id."""
    mqs = list(data.get("mqSet") or [])
    if not all(isinstance(mq, dict) and "topic" in mq and str(mq.get("queueId", "")).lstrip("-").isdigit()
               for mq in mqs):
        raise ValueError("each entry of mqSet is an object with a topic and an integer queueId")
    return str(data["consumerGroup"]), _client_id(data["clientId"]), mqs


def _client_id(value: Any) -> str:
    """A body's client id; ``ValueError`` when longer than ``MAX_CLIENT_ID_CHARS``."""
    client_id = str(value)
    if len(client_id) > MAX_CLIENT_ID_CHARS:
        raise ValueError(f"client id of {len(client_id)} characters, longer than a client's "
                         f"({MAX_CLIENT_ID_CHARS} at most)")
    return client_id


def _is_sql(sub: SubscriptionData) -> bool:
    return (sub.expression_type or "").upper() == ExpressionType.SQL92
