"""The requests of RocketMQ's operators' tools (mqadmin, the dashboard) that txmq answers beyond the ones its
clients need: topic and consume stats (202, 208), connections (203, 204), offset resets (222), broker config
(25, 26), subscription groups (200, 201, 207), who consumes a topic (300) and stats data (315). Bodies are
RocketMQ's, with ``MessageQueue``-keyed tables written as fastjson writes them (``txmq.remoting.fastjson``)."""

from __future__ import annotations

import logging
import shutil
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from txmq.acl.model import Action, Needs, cluster_get, cluster_update
from txmq.broker.config import RUNTIME_KEYS, config_properties
from txmq.broker.consumer_offset_manager import TOPIC_GROUP_SEPARATOR
from txmq.broker.subscription_group_manager import SubscriptionGroupConfig
from txmq.broker.visibility import INTERNAL_TOPICS
from txmq.conf import parse_properties
from txmq.errors import RemoteProtocolError, StoreError
from txmq.gctune import collector_time
from txmq.message import decode_message
from txmq.remoting import fastjson
from txmq.remoting.admin_headers import (
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    ResetOffsetRequestHeader,
    TopicRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from txmq.remoting.body import read_body
from txmq.remoting.codes import RequestCode, ResponseCode, language_from_code, language_from_name
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import RequestSpec, header, no_header
from txmq.remoting.transport import Connection
from txmq.topic import RETRY_GROUP_TOPIC_PREFIX
from txmq.version import VERSION

if TYPE_CHECKING:
    from txmq.broker.client_manager import ClientChannelInfo
    from txmq.broker.controller import BrokerController

log = logging.getLogger("txmq.broker")
# The reset timestamp that asks for the end (RocketMQ's, as ``skipAccumulatedMessage`` sends it): -1 alone, as any
# other time before 1970 is one a broker's clock may have stamped records with.
SKIP_TO_END = -1


def _answer(cmd: RemotingCommand, body: Any = None, code: int = ResponseCode.SUCCESS,
            remark: str | None = None) -> RemotingCommand:
    raw = b"" if body is None else body if isinstance(body, bytes) else fastjson.dumps(body)
    return RemotingCommand.response_to(cmd, code, remark=remark, body=raw)


def _connection(info: ClientChannelInfo) -> dict[str, Any]:
    lang = str(info.language)  # a name from JSON headers, a number from ROCKETMQ binary ones
    language = language_from_code(int(lang)) if lang.isdigit() else language_from_name(lang)
    return {"clientId": info.client_id, "clientAddr": info.conn.remote_address, "language": language.name,
            "version": info.version}


def topic_read(h: TopicRequestHeader) -> Needs:
    """Sub or Get on the topic (a consumer reads its topic's offsets)."""
    return Needs().topic(h.topic, Action.SUB, Action.GET)


def topic_get(h: TopicRequestHeader) -> Needs:
    """Get on the topic."""
    return Needs().topic(h.topic, Action.GET)


def consume_stats_needs(h: GetConsumeStatsRequestHeader) -> Needs:
    """Sub or Get on the consumer group (and on the topic when it names one): a consumer may see its own lag."""
    return Needs().group(h.consumer_group, Action.SUB, Action.GET).topic(h.topic, Action.SUB, Action.GET)


def consumer_connections_needs(h: GetConsumerConnectionListRequestHeader) -> Needs:
    """Get on the consumer group."""
    return Needs().group(h.consumer_group, Action.GET)


def producer_connections_needs(h: GetProducerConnectionListRequestHeader) -> Needs:
    """Get on the producer group."""
    return Needs().group(h.producer_group, Action.GET)


def reset_needs(h: ResetOffsetRequestHeader) -> Needs:
    """Update on the consumer group, and Sub or Update on the topic."""
    return Needs().group(h.group, Action.UPDATE).topic(h.topic, Action.SUB, Action.UPDATE)


class GroupChange(NamedTuple):
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP as read once: the config, and whether this broker knows the group already
    (its config, stored or waiting for the disk, consumers online or committed offsets)."""

    config: SubscriptionGroupConfig
    exists: bool


def group_write_needs(change: GroupChange) -> Needs:
    """Create on the subscription group; Update when this broker knows it already (a config for a group in use, such
    as ``consumeEnable=false``, changes it: Create on a pattern must not stop another team's consumers)."""
    return Needs().group(change.config.group_name, Action.UPDATE if change.exists else Action.CREATE)


def group_delete_needs(h: DeleteSubscriptionGroupRequestHeader) -> Needs:
    """Delete on the subscription group."""
    return Needs().group(h.group_name, Action.DELETE)


def parse_config_update(cmd: RemotingCommand) -> dict[str, str]:
    try:
        return dict(parse_properties(cmd.body.decode()))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RemoteProtocolError(f"the body is not broker.conf properties: {exc}") from None




class OpsProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.config_version = 0  # bumped by each updateBrokerConfig (GET_BROKER_CONFIG's "version")

    def requests(self) -> list[RequestSpec[Any]]:
        return [
            RequestSpec(RequestCode.GET_TOPIC_STATS_INFO, header(TopicRequestHeader), topic_read, self._topic_stats),
            RequestSpec(RequestCode.GET_CONSUME_STATS, header(GetConsumeStatsRequestHeader), consume_stats_needs,
                        self._consume_stats),
            RequestSpec(RequestCode.GET_CONSUMER_CONNECTION_LIST, header(GetConsumerConnectionListRequestHeader),
                        consumer_connections_needs, self._consumer_connections),
            RequestSpec(RequestCode.GET_PRODUCER_CONNECTION_LIST, header(GetProducerConnectionListRequestHeader),
                        producer_connections_needs, self._producer_connections),
            RequestSpec(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header(ResetOffsetRequestHeader), reset_needs,
                        self._reset_offset),
            RequestSpec(RequestCode.GET_BROKER_CONFIG, no_header, cluster_get, self._get_config),
            RequestSpec(RequestCode.UPDATE_BROKER_CONFIG, parse_config_update, cluster_update, self._update_config),
            RequestSpec(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self._read_group_change, group_write_needs,
                        self._update_group),
            RequestSpec(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, no_header, cluster_get, self._all_groups),
            RequestSpec(RequestCode.DELETE_SUBSCRIPTIONGROUP, header(DeleteSubscriptionGroupRequestHeader),
                        group_delete_needs, self._delete_group),
            RequestSpec(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, header(TopicRequestHeader), topic_get,
                        self._consumed_by),
            RequestSpec(RequestCode.VIEW_BROKER_STATS_DATA, header(ViewBrokerStatsDataRequestHeader), cluster_get,
                        self._stats_data),
        ]

    def _mq(self, topic: str, queue_id: int) -> dict[str, Any]:
        return {"brokerName": self.broker.config.broker_name, "queueId": queue_id, "topic": topic}

    def _store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store timestamp of the message at ``offset``, 0 when there is none."""
        if offset < 0:
            return 0
        try:
            got = self.broker.store.get_message(topic, queue_id, offset, 1)
        except StoreError:
            return 0
        return decode_message(got.messages[0])[0].store_timestamp if got.messages else 0

    def _queues(self, topic: str) -> range | None:
        cfg = self.broker.topic_config_manager.get(topic)
        return None if cfg is None else range(max(cfg.read_queue_nums, cfg.write_queue_nums))

    def _no_topic(self, cmd: RemotingCommand, topic: str) -> RemotingCommand:
        return _answer(cmd, code=ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist on broker "
                       f"{self.broker.config.broker_name}")

    # --- topics and consumption -----------------------------------------------------------------------

    def _topic_stats(self, conn: Connection, cmd: RemotingCommand, h: TopicRequestHeader) -> RemotingCommand:
        topic = h.topic
        queues = self._queues(topic)
        if queues is None or topic in INTERNAL_TOPICS:
            return self._no_topic(cmd, topic)
        store = self.broker.store
        table = []
        for q in queues:
            lo, hi = store.get_min_offset_in_queue(topic, q), store.get_max_offset_in_queue(topic, q)
            table.append((self._mq(topic, q), {"minOffset": lo, "maxOffset": hi,
                                               "lastUpdateTimestamp": self._store_time(topic, q, hi - 1)}))
        return _answer(cmd, {"offsetTable": fastjson.ObjectMap(table)})

    def _consume_stats(self, conn: Connection, cmd: RemotingCommand,
                       h: GetConsumeStatsRequestHeader) -> RemotingCommand:
        broker = self.broker
        offsets = broker.consumer_offset_manager
        online = broker.consumer_manager.get(h.consumer_group)
        topics = [h.topic] if h.topic else sorted(
            {k.split(TOPIC_GROUP_SEPARATOR, 1)[0] for k in offsets.table
             if k.split(TOPIC_GROUP_SEPARATOR, 1)[1] == h.consumer_group}
            | {t for t in (online.subscriptions if online else ()) if not t.startswith(RETRY_GROUP_TOPIC_PREFIX)})
        table = []
        tps = 0.0
        for topic in topics:
            queues = self._queues(topic)
            if queues is None:
                if h.topic:
                    return self._no_topic(cmd, topic)
                continue
            committed = offsets.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{h.consumer_group}", {})
            for q in queues:
                consumer = committed.get(q, -1)
                pulled = broker.stats_manager.pulled.get((h.consumer_group, topic, q), max(consumer, 0))
                table.append((self._mq(topic, q), {
                    "brokerOffset": broker.store.get_max_offset_in_queue(topic, q, confirmed=True),
                    "consumerOffset": consumer,
                    "pullOffset": pulled, "lastTimestamp": self._store_time(topic, q, consumer - 1)}))
            tps += broker.stats_manager.window("GROUP_GET_NUMS", f"{topic}@{h.consumer_group}", 60)[1]
        return _answer(cmd, {"offsetTable": fastjson.ObjectMap(table), "consumeTps": tps})

    def _consumed_by(self, conn: Connection, cmd: RemotingCommand, h: TopicRequestHeader) -> RemotingCommand:
        topic = h.topic
        groups = {k.split(TOPIC_GROUP_SEPARATOR, 1)[1] for k in self.broker.consumer_offset_manager.table
                  if k.split(TOPIC_GROUP_SEPARATOR, 1)[0] == topic}
        groups |= {g.group for g in self.broker.consumer_manager.groups.values() if topic in g.subscriptions}
        return _answer(cmd, {"groupList": sorted(groups)})

    def _reset_offset(self, conn: Connection, cmd: RemotingCommand, h: ResetOffsetRequestHeader) -> RemotingCommand:
        """Offsets of ``group`` on ``topic`` to the first message stored at or after ``timestamp``, or to the end
        (``SKIP_TO_END``); without ``isForce`` an offset only moves back. Online consumers are told
        (RESET_CONSUMER_CLIENT_OFFSET) and start again from the new offsets; gRPC receives read on from them
        (``PopService.reset``: the group's pop state would read on from where it was, and its next ack write its
        own offset over the new one)."""
        queues = self._queues(h.topic)
        if queues is None or h.topic in INTERNAL_TOPICS:
            return self._no_topic(cmd, h.topic)
        store, offsets = self.broker.store, self.broker.consumer_offset_manager
        table = []
        for q in queues:
            target = (store.get_max_offset_in_queue(h.topic, q, confirmed=True) if h.timestamp == SKIP_TO_END
                      else store.get_offset_in_queue_by_time(h.topic, q, h.timestamp, confirmed=True))
            current = offsets.query(h.group, h.topic, q)
            if not h.is_force and 0 <= current < target:
                target = current
            if offsets.commit(h.group, h.topic, q, target):
                self.broker.core.pop.reset(h.group, h.topic, q)
            table.append((self._mq(h.topic, q), target))
        body = fastjson.dumps({"offsetTable": fastjson.ObjectMap(table)})
        group = self.broker.consumer_manager.get(h.group)
        for info in group.channels.values() if group else ():
            if not info.conn.closed:
                info.conn.send(RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, h.to_ext(),
                                                       body=body, oneway=True))
        log.info("offsets of group %s on topic %s reset to %s by an operator (timestamp %d)", h.group, h.topic,
                 [o for _, o in table], h.timestamp)
        return _answer(cmd, body)

    # --- connections ----------------------------------------------------------------------------------

    def _consumer_connections(self, conn: Connection, cmd: RemotingCommand,
                              h: GetConsumerConnectionListRequestHeader) -> RemotingCommand:
        name = h.consumer_group
        group = self.broker.consumer_manager.get(name)
        if group is None or not group.channels:
            return _answer(cmd, code=ResponseCode.CONSUMER_NOT_ONLINE, remark=f"the consumer group[{name}] not online")
        return _answer(cmd, {
            "connectionSet": [_connection(c) for c in group.channels.values()],
            "subscriptionTable": {t: s.to_json() for t, s in group.subscriptions.items()},
            "consumeType": group.consume_type, "messageModel": group.message_model,
            "consumeFromWhere": group.consume_from_where})

    def _producer_connections(self, conn: Connection, cmd: RemotingCommand,
                              h: GetProducerConnectionListRequestHeader) -> RemotingCommand:
        name = h.producer_group
        chans = self.broker.producer_manager.groups.get(name)
        if not chans:
            return _answer(cmd, code=ResponseCode.SYSTEM_ERROR, remark=f"the producer group[{name}] not exist")
        return _answer(cmd, {"connectionSet": [_connection(c) for c in chans.values()]})

    # --- broker config --------------------------------------------------------------------------------

    def _get_config(self, conn: Connection, cmd: RemotingCommand, _: None) -> RemotingCommand:
        text = "".join(f"{k}={v}\n" for k, v in sorted(config_properties(self.broker.config).items()))
        version = orjson.dumps({"timestamp": 0, "counter": self.config_version})
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, ext_fields={"version": version.decode()},
                                           body=text.encode())

    def _update_config(self, conn: Connection, cmd: RemotingCommand, values: dict[str, str]) -> RemotingCommand:
        refused = sorted(set(values) - set(RUNTIME_KEYS))
        if refused:
            return _answer(cmd, code=ResponseCode.NO_PERMISSION,
                           remark=f"cannot change {', '.join(refused)} while the broker runs "
                                  f"(these can: {', '.join(RUNTIME_KEYS)}); set it in broker.conf and restart")
        broker = self.broker
        broker.config.update(values)
        broker.check_service.check_max = broker.config.transaction_check_max
        broker.check_service.check_interval_ms = broker.config.transaction_check_interval
        broker.apply_permission()
        self.config_version += 1
        log.info("broker config updated by an operator: %s", values)
        return _answer(cmd)

    # --- subscription groups --------------------------------------------------------------------------

    def _read_group_change(self, cmd: RemotingCommand) -> GroupChange:
        cfg = read_body(cmd.body, SubscriptionGroupConfig.from_json, "a subscription group config")
        name, broker = cfg.group_name, self.broker
        suffix = TOPIC_GROUP_SEPARATOR + name
        known = (broker.subscription_group_manager.named(name)
                 or broker.consumer_manager.get(name) is not None
                 or any(key.endswith(suffix) for key in broker.consumer_offset_manager.table))
        return GroupChange(cfg, known)

    def _busy(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """SYSTEM_BUSY when the group changes waiting for the disk reach the bound (``ConfigJournal.busy``): a
        deletion too, since the group stays stored, and deletable again, until its deletion is durable."""
        busy = self.broker.subscription_group_manager.journal.busy()
        return None if busy is None else _answer(cmd, code=ResponseCode.SYSTEM_BUSY, remark=busy)

    async def _update_group(self, conn: Connection, cmd: RemotingCommand, change: GroupChange) -> RemotingCommand:
        cfg = change.config
        if (busy := self._busy(cmd)) is not None:
            return busy
        await self.broker.subscription_group_manager.update(cfg)
        log.info("subscription group %s updated: %s", cfg.group_name, cfg)
        return _answer(cmd)

    def _all_groups(self, conn: Connection, cmd: RemotingCommand, _: None) -> RemotingCommand:
        manager = self.broker.subscription_group_manager
        return _answer(cmd, {**manager.served(), "dataVersion": {"timestamp": 0, "counter": len(manager.table)}})

    async def _delete_group(self, conn: Connection, cmd: RemotingCommand,
                            h: DeleteSubscriptionGroupRequestHeader) -> RemotingCommand:
        # the offsets cleaned once the deletion is durable, even when a broker's stop cancelled this handler
        cleaned = partial(self._clean_offsets, h.group_name) if h.clean_offset else None
        if (busy := self._busy(cmd)) is not None:
            return busy
        if not await self.broker.subscription_group_manager.delete(h.group_name, cleaned):
            return _answer(cmd, code=ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                           remark=f"subscription group {h.group_name} does not exist on this broker")
        return _answer(cmd)

    def _clean_offsets(self, group: str) -> None:
        """A deleted group's offsets go, and its pop states with them: kept, a state read on from where it was and
        its next ack wrote back an offset that went."""
        self.broker.consumer_offset_manager.remove_group(group)
        self.broker.core.pop.forget_group(group)

    # --- stats ----------------------------------------------------------------------------------------

    def _stats_data(self, conn: Connection, cmd: RemotingCommand,
                    h: ViewBrokerStatsDataRequestHeader) -> RemotingCommand:
        stats = self.broker.stats_manager
        if (h.stats_name, h.stats_key) not in stats.totals():
            return _answer(cmd, code=ResponseCode.SYSTEM_ERROR,
                           remark=f"The stats <{h.stats_name}> <{h.stats_key}> not exist")
        out = {}
        for field, seconds in (("statsMinute", 60), ("statsHour", 3600), ("statsDay", 86400)):
            count, tps = stats.window(h.stats_name, h.stats_key, seconds)
            out[field] = {"sum": count, "tps": tps, "avgpt": 0.0}
        return _answer(cmd, out)


def runtime_info(broker: BrokerController) -> dict[str, str]:
    """GET_BROKER_RUNTIME_INFO's table under RocketMQ's keys (clusterList and brokerStatus read these) beside
    the store's own figures and the collector's (``txmq.gctune.CollectorTime``)."""
    stats = broker.stats_manager
    store = broker.store
    put = [stats.window("BROKER_PUT_NUMS", "", s)[1] for s in (60, 3600, 86400)]
    get = [stats.window("BROKER_GET_NUMS", "", s)[1] for s in (60, 3600, 86400)]
    totals = stats.totals()
    disk = shutil.disk_usage(broker.root)
    table: dict[str, Any] = {
        "brokerVersionDesc": f"txmq {VERSION}", "brokerVersion": VERSION,
        "brokerRole": broker.config.broker_role,
        "brokerPermission": broker.core.permission,  # as served: without write once durability is lost
        "putTps": " ".join(f"{v:.2f}" for v in put), "getTransferedTps": " ".join(f"{v:.2f}" for v in get),
        "msgPutTotalTodayNow": totals[("BROKER_PUT_NUMS", "")], "msgGetTotalTodayNow": totals[("BROKER_GET_NUMS", "")],
        "commitLogMaxOffset": store.max_phy_offset, "commitLogMinOffset": store.min_phy_offset,
        "commitLogDiskRatio": f"{disk.used / disk.total:.4f}",
        **store.runtime_info(),
        **broker.timer_service.runtime_info(),
        **collector_time.runtime_info(),
    }
    if broker.grpc is not None:  # a slave routes RocketMQ 5 clients to its master's gRPC endpoint
        table["grpcEndpoint"] = broker.grpc.addr
    return {k: str(v) for k, v in table.items()}
