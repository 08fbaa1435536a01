"""Routing state of the name server (RocketMQ ``RouteInfoManager``): which brokers serve which topics.

Brokers register every few seconds with their whole topic table; a broker that stops registering, or whose
connection closes, is dropped with its queues after ``broker_expired_s``. A master's registration whose data
version is the one recorded for it (``unchanged``) only refreshes its liveness (RocketMQ
``isBrokerTopicConfigChanged``): its topics are those the table holds already.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from txmq.data_version import DataVersion
from txmq.topic import PermName, TopicConfig

log = logging.getLogger("txmq.namesrv")

MASTER_ID = 0


@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "brokerName": self.broker_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicSynFlag": self.topic_sys_flag,
        }


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "cluster": self.cluster,
            "brokerName": self.broker_name,
            "brokerAddrs": {str(k): v for k, v in self.broker_addrs.items()},
        }


@dataclass(slots=True)
class BrokerLiveInfo:
    """What a broker address last registered as. ``data_version``: its topic table's, None when the routes may
    differ from that table (none sent, or a topic of it deleted or registered alone since)."""

    last_update: float
    data_version: DataVersion | None
    conn_id: int
    cluster: str
    broker_name: str
    broker_id: int
    ha_server_addr: str = ""


class RouteInfoManager:
    """Topic → queues per broker, broker name → addresses, cluster → broker names, and broker liveness."""

    def __init__(self, broker_expired_s: float = 120.0) -> None:
        self.broker_expired_s = broker_expired_s
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}

    def register_broker(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        topic_configs: list[TopicConfig],
        data_version: DataVersion | None,
        conn_id: int,
        ha_server_addr: str = "",
    ) -> bool:
        """Record a broker and its topics; returns True when it is new (first registration)."""
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
        bd = self.broker_addr_table.get(broker_name)
        if bd is None:
            bd = self.broker_addr_table[broker_name] = BrokerData(cluster, broker_name)
        # One address per broker id; an address that moved to another id is dropped first.
        for bid, addr in list(bd.broker_addrs.items()):
            if addr == broker_addr and bid != broker_id:
                del bd.broker_addrs[bid]
        first = broker_addr not in self.broker_live_table
        bd.broker_addrs[broker_id] = broker_addr
        if broker_id == MASTER_ID:
            names = {tc.topic_name for tc in topic_configs}
            for topic, queues in list(self.topic_queue_table.items()):
                if broker_name in queues and topic not in names:
                    self._remove_queue(topic, broker_name)
            for tc in topic_configs:
                self.topic_queue_table.setdefault(tc.topic_name, {})[broker_name] = QueueData(
                    broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag
                )
        self.broker_live_table[broker_addr] = BrokerLiveInfo(time.monotonic(), data_version, conn_id, cluster,
                                                             broker_name, broker_id, ha_server_addr)
        if first:
            log.info("broker registered: %s %s id=%d cluster=%s topics=%d",
                     broker_name, broker_addr, broker_id, cluster, len(topic_configs))
        return first

    def unchanged(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int,
                  data_version: DataVersion | None) -> bool:
        """Whether a registration would change nothing but liveness: a live master's, as recorded (same cluster,
        name and id, the address still that name's master), whose data version is the one recorded. A slave's
        registration is always read in full, as any other."""
        live = self.broker_live_table.get(broker_addr)
        if (live is None or data_version is None or broker_id != MASTER_ID or live.data_version != data_version
                or (live.cluster, live.broker_name, live.broker_id) != (cluster, broker_name, broker_id)
                or time.monotonic() - live.last_update > self.broker_expired_s):
            return False
        bd = self.broker_addr_table.get(broker_name)
        return (bd is not None and bd.broker_addrs.get(broker_id) == broker_addr
                and broker_name in self.cluster_addr_table.get(cluster, ()))

    def refresh(self, broker_addr: str, conn_id: int, ha_server_addr: str) -> None:
        """An ``unchanged`` registration: the broker is alive, on this connection, at this HA address. From another
        connection than the one that registered the recorded version, the version is forgotten: a peer may have
        registered the broker's address with the broker's version and a table of its own (anyone can with ACL off),
        and the broker's next registration puts its topics back, as it did before versions were compared."""
        live = self.broker_live_table[broker_addr]
        if live.conn_id != conn_id:
            live.data_version = None
        live.last_update = time.monotonic()
        live.conn_id = conn_id
        live.ha_server_addr = ha_server_addr

    def _forget_version(self, broker_name: str) -> None:
        """The routes of ``broker_name`` changed otherwise than by its master's registration: the next one is read
        in full, whatever its version, and puts them back as its topic table has them."""
        bd = self.broker_addr_table.get(broker_name)
        live = self.broker_live_table.get(bd.broker_addrs.get(MASTER_ID, "")) if bd is not None else None
        if live is not None:
            live.data_version = None

    def master_of(self, broker_name: str) -> tuple[str, str]:
        """(master address, master HA address) of a group, empty while its master is not registered: what the
        name server answers a registering slave (RocketMQ RegisterBrokerResult)."""
        bd = self.broker_addr_table.get(broker_name)
        master = bd.broker_addrs.get(MASTER_ID, "") if bd else ""
        live = self.broker_live_table.get(master)
        return master, live.ha_server_addr if live else ""

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        self.broker_live_table.pop(broker_addr, None)
        bd = self.broker_addr_table.get(broker_name)
        if bd is not None:
            if bd.broker_addrs.get(broker_id) == broker_addr:
                del bd.broker_addrs[broker_id]
            if not bd.broker_addrs:
                del self.broker_addr_table[broker_name]
                names = self.cluster_addr_table.get(cluster)
                if names is not None:
                    names.discard(broker_name)
                    if not names:
                        del self.cluster_addr_table[cluster]
                for topic in list(self.topic_queue_table):
                    self._remove_queue(topic, broker_name)
        log.info("broker unregistered: %s %s id=%d", broker_name, broker_addr, broker_id)

    def _remove_queue(self, topic: str, broker_name: str) -> None:
        queues = self.topic_queue_table.get(topic)
        if queues is not None:
            queues.pop(broker_name, None)
            if not queues:
                del self.topic_queue_table[topic]

    def on_connection_closed(self, conn_id: int) -> None:
        """A broker's connection went away: forget it now rather than after the expiry."""
        for addr, live in list(self.broker_live_table.items()):
            if live.conn_id == conn_id:
                self._drop_addr(addr, "connection closed")

    def scan_not_active_broker(self) -> int:
        now = time.monotonic()
        expired = [a for a, live in self.broker_live_table.items() if now - live.last_update > self.broker_expired_s]
        for addr in expired:
            self._drop_addr(addr, f"no registration for {self.broker_expired_s:.0f}s")
        return len(expired)

    def _drop_addr(self, addr: str, why: str) -> None:
        for name, bd in list(self.broker_addr_table.items()):
            for bid, a in list(bd.broker_addrs.items()):
                if a == addr:
                    log.warning("broker %s %s dropped: %s", name, addr, why)
                    self.unregister_broker(bd.cluster, addr, name, bid)
                    return
        self.broker_live_table.pop(addr, None)

    def pick_topic_route_data(self, topic: str) -> dict[str, object] | None:
        """TopicRouteData as JSON, or None when no live broker serves ``topic``."""
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        broker_datas = [self.broker_addr_table[n].to_json() for n in sorted(queues) if n in self.broker_addr_table]
        if not broker_datas:
            return None
        return {
            "orderTopicConf": None,
            "queueDatas": [queues[n].to_json() for n in sorted(queues)],
            "brokerDatas": broker_datas,
            "filterServerTable": {},
        }

    def register_topic(self, topic: str, queue_datas: list[QueueData]) -> bool:
        """Add or replace one topic's queues on registered brokers (RocketMQ registerTopic): what a broker sends
        when it creates a topic, instead of all its topics again. False, and nothing changed, when a queue names a
        broker that is not registered (its next full registration carries the topic)."""
        if not queue_datas or any(qd.broker_name not in self.broker_addr_table for qd in queue_datas):
            return False
        queues = self.topic_queue_table.setdefault(topic, {})
        for qd in queue_datas:
            queues[qd.broker_name] = qd
            self._forget_version(qd.broker_name)
        return True

    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        """Take write off every queue of ``broker_name`` (RocketMQ's ``wipeWritePermOfBrokerByLock``): producers
        stop sending to it at their next route poll. The number of its topics. It lasts until the broker's
        registration is read in full again (its topic table changed, or it is new to this name server), as in
        RocketMQ: the broker registers its own permissions then."""
        return self._set_perm_of_broker(broker_name, lambda perm: perm & ~PermName.PERM_WRITE)

    def add_write_perm_of_broker(self, broker_name: str) -> int:
        """Make every queue of ``broker_name`` readable and writable again (RocketMQ's
        ``addWritePermOfBrokerByLock``, which sets both). The number of its topics."""
        return self._set_perm_of_broker(broker_name, lambda perm: PermName.READ_WRITE)

    def _set_perm_of_broker(self, broker_name: str, perm_of: Callable[[int], int]) -> int:
        count = 0
        for queues in self.topic_queue_table.values():
            qd = queues.get(broker_name)
            if qd is not None:
                qd.perm = perm_of(qd.perm)
                count += 1
        return count

    def delete_topic(self, topic: str) -> None:
        for broker_name in self.topic_queue_table.pop(topic, {}):
            self._forget_version(broker_name)

    def topic_list(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def cluster_info(self) -> dict[str, object]:
        return {
            "brokerAddrTable": {n: bd.to_json() for n, bd in self.broker_addr_table.items()},
            "clusterAddrTable": {c: sorted(ns) for c, ns in self.cluster_addr_table.items()},
        }
