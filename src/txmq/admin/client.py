"""``MQAdminExt``: the admin requests of RocketMQ's ``DefaultMQAdminExt`` against a name server and its brokers,
each over RocketMQ's own request code, so that the CLI, the console and RocketMQ's tools see the same answers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from txmq.client.admin import Admin, check_topic_perm
from txmq.client.instance import MASTER_ID, MessageQueue
from txmq.conf import parse_properties
from txmq.errors import BrokerError, ClientError, TxmqError
from txmq.message import MessageConst, MessageExt, decode_messages, decode_offset_msg_id
from txmq.remoting import fastjson
from txmq.remoting.admin_headers import (
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    QueryConsumeQueueRequestHeader,
    ResetOffsetRequestHeader,
    TopicRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import CreateTopicRequestHeader, Header, QueryMessageRequestHeader
from txmq.remoting.transport import RemotingTimeoutError

T = TypeVar("T")
REQUEST_TIMEOUT_S = 10.0  # each admin request's; also what a broker's whole part may take in ``ask_each``


@dataclass(frozen=True, slots=True)
class QueueStat:
    """One queue of a table keyed by ``MessageQueue`` (topic stats, consume stats, reset results)."""

    mq: MessageQueue
    values: Any

    @property
    def lag(self) -> int:
        """A consume-stats queue's messages not consumed yet: broker offset less consumer offset (none yet: 0)."""
        return int(self.values["brokerOffset"] - max(self.values["consumerOffset"], 0))


def mq_table(pairs: Any) -> list[QueueStat]:
    """A fastjson ``MessageQueue``-keyed table as a sorted list (an empty table is ``{}``)."""
    if not pairs:
        return []
    out = [QueueStat(MessageQueue(k["topic"], k["brokerName"], int(k["queueId"])), v) for k, v in pairs]
    return sorted(out, key=lambda s: (s.mq.topic, s.mq.broker_name, s.mq.queue_id))


class MQAdminExt(Admin):
    async def _invoke(self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b"",
                      ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        assert self.instance is not None
        resp = await self.instance.remoting.invoke(addr, RemotingCommand.request(code, ext, body=body),
                                                   REQUEST_TIMEOUT_S)
        if resp.code not in ok:
            raise BrokerError(resp.code, f"{resp.remark or ''} (broker {addr})")
        return resp

    async def _namesrv(self, code: int, ext: dict[str, str] | None = None) -> RemotingCommand:
        assert self.instance is not None
        resp = await self.instance.invoke_namesrv(RemotingCommand.request(code, ext))
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark)
        return resp

    async def ask_each(self, addrs: list[str], ask: Callable[[str], Awaitable[T]]) -> list[T | TxmqError]:
        """``ask(addr)`` of every address at once, each within ``REQUEST_TIMEOUT_S`` in all: its answer, or why
        it gave none (``RemotingTimeoutError``, ``RemotingConnectError``, a refusal). A broker that hangs costs
        one timeout and keeps no other's answer from the caller, however many requests ``ask`` makes of it.
        Awaited from another loop (the console's), it runs on the client's and holds no thread meanwhile."""
        async def one(addr: str) -> T | TxmqError:
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    return await ask(addr)
            except TimeoutError:
                return RemotingTimeoutError(f"no answer from {addr} within {REQUEST_TIMEOUT_S:g} s")
            except TxmqError as exc:
                return exc

        async def each() -> list[T | TxmqError]:
            return list(await asyncio.gather(*(one(addr) for addr in addrs)))
        return await self._call_async(each())

    def answer_code(self, addr: str, code: int) -> int:
        """The response code ``addr`` answers a bare request ``code`` with, whatever it is (the console's login
        asks whether a server refuses a wrong signature). ``ClientError`` when it cannot be reached."""
        assert self.instance is not None
        return int(self._call(self.instance.remoting.invoke(addr, RemotingCommand.request(code), 10)).code)

    # --- cluster and brokers ----------------------------------------------------------------------------

    def cluster_info(self) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_INFO: ``brokerAddrTable`` and ``clusterAddrTable``."""
        return orjson.loads(self._call(self._namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)).body)

    def broker_addrs(self, broker: str | None = None, cluster: str | None = None) -> dict[str, str]:
        """Master addresses by broker name: every broker, one (``broker`` a name or an address), or a cluster's."""
        info = self.cluster_info()
        table = info.get("brokerAddrTable") or {}
        addrs = {name: bd["brokerAddrs"][MASTER_ID] for name, bd in table.items()
                 if MASTER_ID in (bd.get("brokerAddrs") or {})}
        if broker:
            found = {n: a for n, a in addrs.items() if broker in (n, a)}
            if not found:
                raise ClientError(f"no broker {broker} (known: {', '.join(sorted(addrs)) or 'none'})")
            return found
        if cluster:
            names = (info.get("clusterAddrTable") or {}).get(cluster)
            if names is None:
                raise ClientError(f"no cluster {cluster} (known: {', '.join(info.get('clusterAddrTable') or {})})")
            return {n: addrs[n] for n in names if n in addrs}
        return addrs

    def runtime_info(self, addr: str) -> dict[str, str]:
        return self._call(self.runtime_info_at(addr))

    async def runtime_info_at(self, addr: str) -> dict[str, str]:
        resp = await self._invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return dict(orjson.loads(resp.body).get("table") or {})

    async def stats_at(self, addr: str) -> dict[str, Any]:
        """TXMQ_STATS: the broker's rates and transaction counts."""
        return dict(orjson.loads((await self._invoke(addr, RequestCode.TXMQ_STATS)).body))

    async def tx_list_at(self, addr: str, limit: int) -> dict[str, Any]:
        """TXMQ_TX_LIST: the broker's pending and discarded transactions."""
        return dict(orjson.loads((await self._invoke(addr, RequestCode.TXMQ_TX_LIST, {"limit": str(limit)})).body))

    def broker_config(self, addr: str) -> dict[str, str]:
        return parse_properties(self._call(self._invoke(addr, RequestCode.GET_BROKER_CONFIG)).body.decode())

    def update_broker_config(self, addr: str, values: dict[str, str]) -> None:
        body = "".join(f"{k}={v}\n" for k, v in values.items()).encode()
        self._call(self._invoke(addr, RequestCode.UPDATE_BROKER_CONFIG, body=body))

    def write_perm_of_broker(self, code: int, broker_name: str) -> list[tuple[str, int | TxmqError]]:
        """WIPE_WRITE_PERM_OF_BROKER or ADD_WRITE_PERM_OF_BROKER on every name server, as mqadmin sends it: each
        name server's address and how many of the broker's topics it changed, or why it did not answer so. One
        that fails does not stop the others: each keeps its routes apart."""
        field = "wipeTopicCount" if code == RequestCode.WIPE_WRITE_PERM_OF_BROKER else "addTopicCount"

        async def one(addr: str) -> int | TxmqError:
            try:
                resp = await self._invoke(addr, code, {"brokerName": broker_name})
            except TxmqError as exc:
                return exc
            return int(resp.ext_fields.get(field) or 0)

        async def each() -> list[tuple[str, int | TxmqError]]:
            return [(addr, await one(addr)) for addr in (a.strip() for a in self.namesrv.split(";")) if addr]

        return self._call(each())

    # --- topics -------------------------------------------------------------------------------------------

    def route(self, topic: str) -> dict[str, Any]:
        """GET_ROUTEINFO_BY_TOPIC's ``TopicRouteData``."""
        return orjson.loads(self._call(self._namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})).body)

    def topic_stats(self, topic: str) -> list[QueueStat]:
        """GET_TOPIC_STATS_INFO from each broker the topic is routed to."""
        out: list[QueueStat] = []
        for addr in self._route_addrs(topic):
            out += self._call(self.topic_stats_at(addr, topic))
        return out

    async def topic_stats_at(self, addr: str, topic: str) -> list[QueueStat]:
        resp = await self._invoke(addr, RequestCode.GET_TOPIC_STATS_INFO, TopicRequestHeader(topic).to_ext())
        return mq_table(fastjson.loads(resp.body).get("offsetTable"))

    def _route_addrs(self, topic: str) -> list[str]:
        return sorted(self.route_masters(topic).values())

    def route_masters(self, topic: str) -> dict[str, str]:
        """Master addresses by broker name of the brokers the topic is routed to."""
        return {str(bd["brokerName"]): str(bd["brokerAddrs"][MASTER_ID]) for bd in self.route(topic).get("brokerDatas")
                or [] if MASTER_ID in (bd.get("brokerAddrs") or {})}

    def topic_configs(self, addr: str) -> dict[str, dict[str, Any]]:
        """GET_ALL_TOPIC_CONFIG: the broker's own topic configs (current at once; routes follow a registration)."""
        return self._call(self.topic_configs_at(addr))

    async def topic_configs_at(self, addr: str) -> dict[str, dict[str, Any]]:
        resp = await self._invoke(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        return dict(orjson.loads(resp.body).get("topicConfigTable") or {})

    def topic_config(self, addr: str, topic: str) -> dict[str, Any] | None:
        return self.topic_configs(addr).get(topic)

    def update_topic(self, addr: str, header: CreateTopicRequestHeader) -> None:
        check_topic_perm(header.perm)
        self._call(self._invoke(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext()))

    def update_topic_perm(self, topic: str, perm: int, addrs: list[str]) -> list[tuple[str, int]]:
        """The topic's permission on those of ``addrs`` that have it; each (address, former permission). A topic
        none of them has is an error."""
        changed = [(addr, former) for addr in addrs
                   if (former := self.update_topic_perm_in(addr, topic, perm)) is not None]
        if not changed:
            raise ClientError(f"topic {topic} does not exist on the brokers asked")
        return changed

    def update_topic_perm_in(self, addr: str, topic: str, perm: int) -> int | None:
        """The topic's permission on the broker at ``addr``, its queues kept (UPDATE_AND_CREATE_TOPIC): its former
        permission, or None when that broker has not the topic."""
        cfg = self.topic_config(addr, topic)
        if cfg is None:
            return None
        self.update_topic(addr, CreateTopicRequestHeader(
            topic=topic, read_queue_nums=cfg["readQueueNums"], write_queue_nums=cfg["writeQueueNums"], perm=perm,
            order=bool(cfg.get("order"))))
        return int(cfg["perm"])

    def delete_topic_in_broker(self, addr: str, topic: str) -> bool:
        """DELETE_TOPIC_IN_BROKER: whether the broker at ``addr`` had the topic."""
        resp = self._call(self._invoke(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic},
                                       ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST)))
        return resp.code == ResponseCode.SUCCESS

    def delete_topic_in_namesrv(self, topic: str) -> None:
        """DELETE_TOPIC_IN_NAMESRV: the name server drops the topic's routes (to ask once no broker has the topic:
        a broker that still has it keeps serving it unrouted)."""
        self._call(self._namesrv(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic}))

    def clean_unused_topic(self, addr: str) -> list[str]:
        """CLEAN_UNUSED_TOPIC: the broker drops the consume queues of topics its table does not hold; the topics
        it dropped."""
        resp = self._call(self._invoke(addr, RequestCode.CLEAN_UNUSED_TOPIC))
        return list(orjson.loads(resp.body).get("topics") or []) if resp.body else []

    # --- consumer groups ----------------------------------------------------------------------------------

    def consume_stats(self, group: str, topic: str = "") -> tuple[list[QueueStat], float]:
        """GET_CONSUME_STATS from every broker: per queue broker, consumer and pull offsets; and the group's TPS."""
        table: list[QueueStat] = []
        tps = 0.0
        for addr in self._route_addrs(topic) if topic else self.broker_addrs().values():
            queues, rate = self._call(self.consume_stats_at(addr, group, topic))
            table += queues
            tps += rate
        return table, tps

    async def consume_stats_at(self, addr: str, group: str, topic: str = "") -> tuple[list[QueueStat], float]:
        header = GetConsumeStatsRequestHeader(group, topic).to_ext()
        resp = await self._invoke(addr, RequestCode.GET_CONSUME_STATS, header)
        data = fastjson.loads(resp.body)
        return mq_table(data.get("offsetTable")), float(data.get("consumeTps") or 0)

    def consumer_connection(self, group: str) -> dict[str, Any]:
        """GET_CONSUMER_CONNECTION_LIST from the first broker that knows the group online."""
        return self._first_online(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                  GetConsumerConnectionListRequestHeader(group).to_ext(),
                                  f"consumer group {group} is not online")

    def producer_connection(self, group: str, topic: str | None = None) -> dict[str, Any]:
        return self._first_online(RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                  GetProducerConnectionListRequestHeader(group).to_ext(),
                                  f"producer group {group} is not online", topic)

    def _first_online(self, code: int, ext: dict[str, str], missing: str, topic: str | None = None) -> dict[str, Any]:
        addrs = self._route_addrs(topic) if topic else list(self.broker_addrs().values())
        for addr in addrs:
            found = self._call(self._online_at(addr, code, ext))
            if found is not None:
                return found
        raise ClientError(missing)

    async def consumer_connection_at(self, addr: str, group: str) -> dict[str, Any] | None:
        """The group's connections on this broker, None when none is online there."""
        return await self._online_at(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                     GetConsumerConnectionListRequestHeader(group).to_ext())

    async def _online_at(self, addr: str, code: int, ext: dict[str, str]) -> dict[str, Any] | None:
        resp = await self._invoke(addr, code, ext, ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE,
                                                       ResponseCode.SYSTEM_ERROR))
        return orjson.loads(resp.body) if resp.code == ResponseCode.SUCCESS else None

    def consumed_by(self, topic: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO on every broker of the topic."""
        groups: set[str] = set()
        for addr in self._route_addrs(topic):
            groups.update(self._call(self.consumed_by_at(addr, topic)))
        return sorted(groups)

    async def consumed_by_at(self, addr: str, topic: str) -> list[str]:
        resp = await self._invoke(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, TopicRequestHeader(topic).to_ext())
        return sorted(orjson.loads(resp.body).get("groupList") or [])

    def reset_offset(self, group: str, topic: str, timestamp_ms: int, force: bool = True) -> list[QueueStat]:
        """INVOKE_BROKER_TO_RESET_OFFSET on every broker of the topic; -1: to the end (skip the backlog)."""
        out: list[QueueStat] = []
        header = ResetOffsetRequestHeader(topic, group, timestamp_ms, force).to_ext()
        for addr in self._route_addrs(topic):
            resp = self._call(self._invoke(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header))
            out += mq_table(fastjson.loads(resp.body).get("offsetTable"))
        return out

    def set_offsets(self, group: str, topic: str, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET: every queue of the topic to ``offset``, held within the queue's messages."""
        async def go() -> None:
            assert self.instance is not None
            route = await self.instance.update_route(topic)
            if route is None:
                raise ClientError(f"topic {topic} does not exist")
            for mq in route.subscribe_queues:
                ext = {"topic": topic, "queueId": str(mq.queue_id)}
                addr = route.broker_addrs[mq.broker_name]
                lo = int((await self._invoke(addr, RequestCode.GET_MIN_OFFSET, ext)).ext_fields["offset"])
                hi = int((await self._invoke(addr, RequestCode.GET_MAX_OFFSET, ext)).ext_fields["offset"])
                await self._invoke(addr, RequestCode.UPDATE_CONSUMER_OFFSET, {
                    **ext, "consumerGroup": group, "commitOffset": str(min(max(offset, lo), hi))})
        self._call(go())

    def update_sub_group(self, addr: str, config: dict[str, Any]) -> None:
        self._call(self._invoke(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(config)))

    def sub_groups(self, addr: str) -> dict[str, Any]:
        resp = self._call(self._invoke(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        return dict(orjson.loads(resp.body).get("subscriptionGroupTable") or {})

    def delete_sub_group(self, addr: str, group: str, clean_offset: bool = False) -> None:
        self._call(self._invoke(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                               DeleteSubscriptionGroupRequestHeader(group, clean_offset).to_ext()))

    def stats_data(self, addr: str, name: str, key: str) -> dict[str, Any] | None:
        """VIEW_BROKER_STATS_DATA (``statsMinute``/``statsHour``/``statsDay``), None when nothing was counted."""
        resp = self._call(self._invoke(addr, RequestCode.VIEW_BROKER_STATS_DATA,
                                      ViewBrokerStatsDataRequestHeader(name, key).to_ext(),
                                      ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR)))
        return orjson.loads(resp.body) if resp.code == ResponseCode.SUCCESS else None

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: the queue's first offset stored at or after ``timestamp_ms``."""
        addr = self.broker_addrs(mq.broker_name)[mq.broker_name]
        resp = self._call(self._invoke(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {
            "topic": mq.topic, "queueId": str(mq.queue_id), "timestamp": str(timestamp_ms)}))
        return int(resp.ext_fields.get("offset", "0"))

    def query_consume_queue(self, addr: str, header: QueryConsumeQueueRequestHeader) -> tuple[dict[str, Any], str]:
        """QUERY_CONSUME_QUEUE (mqadmin's ``queryCq``): the broker's answer (RocketMQ's
        ``QueryConsumeQueueResponseBody``) and its remark (why no entries came, when none did)."""
        resp = self._call(self._invoke(addr, RequestCode.QUERY_CONSUME_QUEUE, header.to_ext()))
        return orjson.loads(resp.body), resp.remark or ""

    # --- messages -----------------------------------------------------------------------------------------

    def view_message(self, offset_msg_id: str) -> MessageExt:
        """VIEW_MESSAGE_BY_ID: the broker's address and the commit-log offset are in the id."""
        (host, port), offset = decode_offset_msg_id(offset_msg_id)
        if not 0 < port < 65536 or offset < 0:
            raise ClientError(f"{offset_msg_id} is not an offset message id (broker address and commit-log "
                              "offset); for a message id use queryMsgByUniqueKey -t TOPIC -i ID")
        resp = self._call(self._invoke(f"{host}:{port}", RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}))
        return decode_messages(resp.body)[0]

    def query_message(self, topic: str, key: str, max_num: int = 64, begin_ms: int = 0, end_ms: int = 2**63 - 1,
                      unique: bool = False) -> list[MessageExt]:
        """QUERY_MESSAGE on every broker of the topic: messages whose KEYS (or, ``unique``, UNIQ_KEY) is ``key``."""
        ext = QueryMessageRequestHeader(topic, key, max_num, begin_ms, end_ms).to_ext()
        if unique:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        found: list[MessageExt] = []
        for addr in self._route_addrs(topic):
            resp = self._call(self._invoke(addr, RequestCode.QUERY_MESSAGE, ext,
                                          ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)))
            if resp.code == ResponseCode.SUCCESS:
                found += decode_messages(resp.body)
        if unique:
            return [m for m in found if m.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == key]
        return [m for m in found if key in (m.keys or "").split(MessageConst.KEY_SEPARATOR)]

    # --- users and ACLs (RocketMQ 5.3's ACL 2.0) ------------------------------------------------------------

    def auth_targets(self, broker: str | None = None, cluster: str | None = None) -> list[tuple[str, str]]:
        """Where a user or ACL command goes, as (what, address) pairs: ``broker`` alone (an address: that
        server; a name: its master and slaves); else every broker of ``cluster`` (default: of every cluster),
        masters and slaves, then each name server given (each keeps its own users and ACLs)."""
        if broker and ":" in broker:
            return [("broker", broker)]
        info = self.cluster_info()
        replicas = [(name, str(addr)) for name, bd in sorted((info.get("brokerAddrTable") or {}).items())
                    for _, addr in sorted((bd.get("brokerAddrs") or {}).items(), key=lambda kv: int(kv[0]))]
        if broker:
            found = [(f"broker {name}", addr) for name, addr in replicas if name == broker]
            if not found:
                known = ", ".join(sorted({n for n, _ in replicas})) or "none"
                raise ClientError(f"no broker {broker} (known: {known})")
            return found
        names = None
        if cluster:
            names = (info.get("clusterAddrTable") or {}).get(cluster)
            if names is None:
                raise ClientError(f"no cluster {cluster} (known: {', '.join(info.get('clusterAddrTable') or {})})")
        targets = [(f"broker {name}", addr) for name, addr in replicas if names is None or name in names]
        return targets + [("namesrv", addr.strip()) for addr in self.namesrv.split(";") if addr.strip()]

    def auth_request(self, addr: str, code: int, header: Header, body: Any = None) -> Any:
        """One AUTH_* request (a JSON ``body``) to a broker or a name server; the answer's JSON body, None when it
        has none. A refusal raises ``BrokerError`` with the server's code and remark."""
        assert self.instance is not None
        request = RemotingCommand.request(code, header.to_ext(), b"" if body is None else orjson.dumps(body))
        resp = self._call(self.instance.remoting.invoke(addr, request, 10))
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark)
        return orjson.loads(resp.body) if resp.body else None
