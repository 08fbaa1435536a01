"""A broker group in controller mode with real processes: etcd, a controller, three replicas (SYNC_MASTER +
SYNC_FLUSH when master), each with its own store and ports. Used by tests/e2e/test_failover*.py and by
bench/faults.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from tests.e2e.cluster import Cluster
from tests.e2e.ha_group import SEGMENT, ha_status, request
from tests.e2e.tcp_proxy import TcpProxy
from txmq.controller.etcd_launch import EtcdProcess
from txmq.controller.status import controller_status
from txmq.launch import ServerProcess, free_port
from txmq.message import MessageExt, decode_message
from txmq.remoting.codes import RequestCode
from txmq.remoting.transport import RemotingConnectError, RemotingTimeoutError
from txmq.store.record import BLANK_MAGIC_CODE, read_prefix, to_wire


class FailoverGroup:
    def __init__(self, cluster: Cluster, name: str = "broker-a", replicas: int = 3,
                 conf: dict[str, object] | None = None, controllers: int = 1, grpc: bool = False) -> None:
        """With several ``controllers`` the replicas list them all (no controller proxies, no partition);
        ``grpc``: each replica serves RocketMQ 5's gRPC API on a free port."""
        self.cluster = cluster
        self.name = name
        self.etcd = EtcdProcess(cluster.root / "etcd", cluster.root / "etcd.log")
        self.controller_ports = [free_port() for _ in range(controllers)]
        self.controller_port = self.controller_ports[0]  # the one status is asked from
        self.controllers: list[ServerProcess] = []
        # RocketMQ 5 producers make one attempt per message, as the campaign's other producers
        self.conf = {"brokerName": name, "mappedFileSizeCommitLog": SEGMENT, "grpcClientProducerMaxAttempts": 1,
                     "haSendHeartbeatInterval": 1000, "slaveSynchronizeInterval": 1000,
                     "brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH", "enableControllerMode": "true",
                     **(conf or {})}
        self.ids = list(range(1, replicas + 1))
        self.members: dict[int, ServerProcess] = {}
        self.ports: dict[int, int] = {}
        self.grpc = grpc
        self.grpc_ports: dict[int, int] = {}
        # Each replica reaches the controller through its own proxy, and its slaves reach its HA port and its
        # master/slave link (epoch table, metadata copy: its listenPort) through two more, listening on a
        # loopback address of its own (brokerIP2): cutting the three is a partition that leaves its clients'
        # path (brokerIP1) alone.
        self.controller_proxies: dict[int, TcpProxy] = {}
        self.ha_proxies: dict[int, TcpProxy] = {}
        self.link_proxies: dict[int, TcpProxy] = {}

    @property
    def controller_addr(self) -> str:
        return f"127.0.0.1:{self.controller_port}"

    def start(self) -> FailoverGroup:
        self.etcd.start()
        for i, port in enumerate(self.controller_ports):
            proc = ServerProcess([*_cmd("controller", "--etcd", self.etcd.endpoint, "--port", str(port))],
                                 self.cluster.root / f"controller-{i}.log", self.cluster.env).start()
            self.controllers.append(proc)
            self.cluster.procs.append(proc)
        for rid in self.ids:
            self.ports[rid] = free_port()
            ha = free_port()
            self.ha_proxies[rid] = TcpProxy(("127.0.0.1", ha), listen=(f"127.0.0.{rid + 1}", ha))
            self.link_proxies[rid] = TcpProxy(("127.0.0.1", self.ports[rid]),
                                              listen=(f"127.0.0.{rid + 1}", self.ports[rid]))
            if len(self.controller_ports) == 1:
                self.controller_proxies[rid] = TcpProxy(("127.0.0.1", self.controller_port))
                controller_addr = self.controller_proxies[rid].addr
            else:
                controller_addr = ";".join(f"127.0.0.1:{p}" for p in self.controller_ports)
            if self.grpc:
                self.grpc_ports[rid] = free_port()
            p = self.cluster.broker(f"{self.name}-{rid}", {
                **self.conf, "brokerId": rid, "haListenPort": ha, "brokerIP2": self.ha_proxies[rid].host,
                "controllerAddr": controller_addr, "grpcPort": self.grpc_ports.get(rid, -1)}, port=self.ports[rid])
            self.members[rid] = p
            p.start()
        return self

    def close(self) -> None:
        for proxy in [*self.controller_proxies.values(), *self.ha_proxies.values(), *self.link_proxies.values()]:
            proxy.close()
        self.etcd.stop()

    def partition(self, rid: int) -> None:
        """Cut replica ``rid`` off from the controller and from the other replicas (its HA port and link, and
        their connections to them); its clients still reach it on brokerIP1."""
        for proxies in (self.controller_proxies, self.ha_proxies, self.link_proxies):
            proxies[rid].cut()

    def heal(self, rid: int) -> None:
        for proxies in (self.controller_proxies, self.ha_proxies, self.link_proxies):
            proxies[rid].heal()

    @property
    def grpc_endpoints(self) -> str:
        """Every replica's gRPC endpoint, as a RocketMQ 5 client's ``endpoints`` (``host:port;host:port``)."""
        return ";".join(f"127.0.0.1:{self.grpc_ports[r]}" for r in self.ids)

    def store(self, rid: int) -> Path:
        return self.cluster.root / f"{self.name}-{rid}"

    def addr(self, rid: int) -> str:
        return f"127.0.0.1:{self.ports[rid]}"

    def state(self) -> dict[str, Any]:
        """The group's state from the acting controller, asked through the first controller that answers."""
        for i, port in enumerate(self.controller_ports):
            if self.controllers and not self.controllers[i].alive:
                continue
            return dict(controller_status(f"127.0.0.1:{port}")["groups"].get(self.name) or {})
        return {}

    def master(self) -> int:
        """The replica the controller names master (-1: none)."""
        try:
            return int(self.state().get("master_id", -1))
        except Exception:
            return -1

    def wait_topic_copied(self, topic: str, timeout: float = 30.0) -> None:
        """Wait until every live replica has ``topic`` in its own topic configs (a slave copies its master's at its
        slaveSynchronizeInterval): a new master without it would refuse the topic's sends and checks."""
        deadline = time.monotonic() + timeout
        while True:
            lacking = [r for r in self.ids if self.members[r].alive and topic not in _topics(self.addr(r))]
            if not lacking:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"replicas {lacking} have not copied topic {topic} in {timeout}s")
            time.sleep(0.1)

    def wait_master(self, timeout: float = 30.0, not_id: int | None = None, full_set: bool = False) -> int:
        """Wait until a master (other than ``not_id``) acts: the controller names it and it says it is master
        with a valid lease (and, with ``full_set``, every replica is in its SyncStateSet)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.master()
            if m > 0 and m != not_id and self.members[m].alive:
                try:
                    c = ha_status(self.addr(m)).get("controller", {})
                except Exception:
                    c = {}
                if c.get("leaseValid") and (not full_set or len(c.get("syncStateSet", [])) == len(self.ids)):
                    return m
            time.sleep(0.1)
        raise TimeoutError(f"no master acting in {timeout}s: {self.state()}")


def _topics(addr: str) -> set[str]:
    """A replica's own topics (GET_ALL_TOPIC_CONFIG); none while it does not answer (starting, or just killed)."""
    try:
        return set(orjson.loads(request(addr, RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"])
    except (RemotingConnectError, RemotingTimeoutError):
        return set()


def _cmd(*args: str) -> list[str]:
    from txmq.launch import txmq_command

    return txmq_command(*args)


def log_messages(store: Path, end: int) -> list[MessageExt]:
    """Every message record of a replica's commit log below ``end``, read from its files."""
    out = []
    for seg in sorted((store / "commitlog").iterdir()):
        start = int(seg.name)
        if start >= end:
            break
        data = seg.read_bytes()[: end - start]
        pos = 0
        while pos + 8 <= len(data):
            size, magic = read_prefix(data, pos)
            if magic == BLANK_MAGIC_CODE or size <= 0:
                break
            out.append(decode_message(to_wire(data[pos:pos + size]))[0])
            pos += size
    return out
