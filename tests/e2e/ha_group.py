"""A broker group in real processes: one master and its slaves under one brokerName, each with its own store,
port and HA port; helpers to read a member's HA status and compare commit logs byte for byte."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from tests.e2e.cluster import Cluster
from tests.e2e.helpers import wait_until
from txmq.launch import ServerProcess, free_port
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient

SEGMENT = 256 * 1024  # small commit-log segments: replication crosses segment ends (BLANK markers) often


class Group:
    def __init__(self, cluster: Cluster, name: str = "broker-a", conf: dict[str, object] | None = None) -> None:
        self.cluster = cluster
        self.name = name
        self.conf = {"brokerName": name, "mappedFileSizeCommitLog": SEGMENT, "grpcPort": -1,
                     "haSendHeartbeatInterval": 1000, **(conf or {})}
        self.members: dict[int, ServerProcess] = {}
        self.ha_ports: dict[int, int] = {}

    def member(self, broker_id: int, role: str, conf: dict[str, object] | None = None) -> ServerProcess:
        """Member ``broker_id`` (not started); its store is ``<root>/<name>-<id>``."""
        self.ha_ports[broker_id] = free_port()
        settings = {**self.conf, "brokerId": broker_id, "brokerRole": role,
                    "haListenPort": self.ha_ports[broker_id], **(conf or {})}
        p = self.cluster.broker(f"{self.name}-{broker_id}", settings)
        self.members[broker_id] = p
        return p

    def store(self, broker_id: int) -> Path:
        return self.cluster.root / f"{self.name}-{broker_id}"

    def addr(self, broker_id: int) -> str:
        return self.members[broker_id].addrs["broker"]


def request(addr: str, code: int, ext: dict[str, str] | None = None, timeout: float = 5.0) -> RemotingCommand:
    async def go() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(addr, RemotingCommand.request(code, ext or {}), timeout)
        finally:
            await client.close()

    return asyncio.run(go())


def ha_status(addr: str) -> dict[str, Any]:
    resp = request(addr, RequestCode.GET_BROKER_HA_STATUS)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return dict(orjson.loads(resp.body))


def max_offset(addr: str) -> int:
    return int(ha_status(addr)["maxOffset"])


def wait_caught_up(master: str, slaves: list[str], timeout: float = 30.0) -> int:
    """Wait until every slave's log ends where the master's does; return that offset."""
    end = max_offset(master)
    assert wait_until(lambda: all(max_offset(s) == end for s in slaves), timeout), \
        (end, [max_offset(s) for s in slaves])
    return end


def commit_log_bytes(store: Path, end: int) -> bytes:
    """The commit log's bytes [first segment, end) as one string (segments are named by their offset)."""
    parts = []
    for seg in sorted((store / "commitlog").iterdir()):
        start = int(seg.name)
        if start >= end:
            break
        parts.append(seg.read_bytes()[: end - start])
    return b"".join(parts)
