"""``txmq controller``: the controller process (RocketMQ 5's ControllerManager). Several may run over one etcd;
the one holding the leader key acts, the others answer with its address. Requests (JSON bodies):

- ``BROKER_HEARTBEAT`` (904) and ``CONTROLLER_REGISTER_BROKER`` (1003): clusterName, brokerName, brokerId (the
  replica id, > 0), brokerAddr, haAddr, maxOffset, epoch, heartbeatTimeoutMillis, bootId (one per broker
  process: the master's changing is a restart) -> the group's state;
- ``CONTROLLER_ALTER_SYNC_STATE_SET`` (1001): brokerName, masterId, masterEpoch, syncStateSet,
  syncStateSetEpoch -> the group's state;
- ``CONTROLLER_ELECT_MASTER`` (1002): brokerName -> the group's state (an election if its master is gone);
- ``CONTROLLER_GET_REPLICA_INFO`` (1004): brokerName, or nothing for every group -> states with liveness;
- ``CONTROLLER_GET_METADATA_INFO`` (1005) -> this controller, the leader, whether it acts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from txmq.acl.model import cluster_get, cluster_update
from txmq.acl.validator import AccessValidator
from txmq.cancel import cancel_and_wait
from txmq.controller.dcs import DCS, DCSError
from txmq.controller.replicas_info import ControllerError, GroupState, ReplicasInfoManager
from txmq.remoting.body import json_object
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import RequestDispatcher, RequestSpec, RequestTable, no_header
from txmq.remoting.server import RemotingServer
from txmq.remoting.transport import Connection

log = logging.getLogger("txmq.controller")

DEFAULT_PORT = 9878


class ControllerManager:
    """The remoting server, the leadership loop and the scan for masters whose heartbeats stopped."""

    def __init__(self, dcs: DCS, host: str = "127.0.0.1", port: int = DEFAULT_PORT, *, lease_ttl_s: int = 2,
                 scan_interval_s: float = 1.0, acl: AccessValidator | None = None) -> None:
        self.dcs = dcs
        self.host = host
        self.lease_ttl_s = lease_ttl_s  # the leader key's lease (etcd's TTL granularity is a second)
        self.scan_interval_s = scan_interval_s  # RocketMQ's scanNotActiveBrokerInterval
        self.request_table = RequestTable("the controller")
        self.request_table.register(self)
        self.server = RemotingServer(RequestDispatcher(self.request_table, acl), host=host, port=port)
        self.manager: ReplicasInfoManager | None = None
        self.leader_addr: str | None = None
        self._leader_until = 0.0  # monotonic end of the lease as renewed (from the renewal's start)
        self._lock = asyncio.Lock()  # one DCS change at a time
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.server.port}"

    @property
    def acting(self) -> bool:
        return self.manager is not None and time.monotonic() < self._leader_until

    async def start(self) -> None:
        await self.server.start()
        self.manager = None
        self._tasks = [asyncio.create_task(self._leadership(), name="controller leadership"),
                       asyncio.create_task(self._scan(), name="controller scan")]
        log.info("controller listening on %s", self.addr)

    async def close(self) -> None:
        await cancel_and_wait(*self._tasks)
        if self.manager is not None:
            with contextlib.suppress(DCSError):
                await asyncio.to_thread(self.dcs.release_leadership)
        await self.server.close()
        log.info("controller stopped")

    async def _leadership(self) -> None:
        period = self.lease_ttl_s / 3
        while True:
            started = time.monotonic()
            try:
                held = await asyncio.to_thread(self.dcs.hold_leadership, self.addr, self.lease_ttl_s)
                leader = self.addr if held else await asyncio.to_thread(self.dcs.leader)
            except DCSError as exc:
                held, leader = False, None
                if self.manager is not None:
                    log.warning("controller %s lost etcd: %s", self.addr, exc)
            if held:
                self._leader_until = started + self.lease_ttl_s
                if self.manager is None:
                    async with self._lock:
                        manager = ReplicasInfoManager(self.dcs, self.addr)
                        await asyncio.to_thread(manager.load)
                        self.manager = manager
                    log.warning("controller %s is now the leader (%d groups)", self.addr, len(manager.groups))
            elif self.manager is not None:
                self.manager = None
                self._leader_until = 0.0
                log.warning("controller %s is no longer the leader (now %s)", self.addr, leader)
            self.leader_addr = leader
            await asyncio.sleep(max(0.05, period - (time.monotonic() - started)))

    async def _scan(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval_s)
            manager = self.manager
            if manager is None or not self.acting:
                continue
            try:
                async with self._lock:
                    await asyncio.to_thread(manager.scan_not_active)
            except (ControllerError, DCSError) as exc:
                log.warning("scan for inactive masters: %s", exc)

    # --- requests -------------------------------------------------------------------------------------

    def requests(self) -> list[RequestSpec[Any]]:
        """Every request changes or reads the cluster's replicas: the brokers' own (super) accounts, and tools."""
        def change(fn: Handler) -> Callable[[Connection, RemotingCommand, dict[str, Any]], Any]:
            return lambda conn, cmd, req: self._answer(cmd, fn, req)

        return [
            RequestSpec(RequestCode.BROKER_HEARTBEAT, _json, cluster_update, change(_heartbeat)),
            RequestSpec(RequestCode.CONTROLLER_REGISTER_BROKER, _json, cluster_update, change(_heartbeat)),
            RequestSpec(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, _json, cluster_update, change(_alter)),
            RequestSpec(RequestCode.CONTROLLER_ELECT_MASTER, _json, cluster_update, change(_elect)),
            RequestSpec(RequestCode.CONTROLLER_GET_REPLICA_INFO, _json, cluster_get, change(_replica_info)),
            RequestSpec(RequestCode.CONTROLLER_GET_METADATA_INFO, no_header, cluster_get, self._metadata),
        ]

    def _metadata(self, conn: Connection, cmd: RemotingCommand, _: None) -> RemotingCommand:
        body = {"controller": self.addr, "leader": self.leader_addr, "isLeader": self.acting}
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=orjson.dumps(body))

    async def _answer(self, cmd: RemotingCommand, handler: Handler, req: dict[str, Any]) -> RemotingCommand:
        manager = self.manager
        if manager is None or not self.acting:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark="not the leader controller",
                                               ext_fields={"leaderAddr": self.leader_addr or ""})
        try:
            async with self._lock:
                result = await asyncio.to_thread(handler, manager, req)
        except (ControllerError, DCSError, ValueError, KeyError, TypeError) as exc:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=str(exc)[:500])
        if not self.acting:  # the lease ran out meanwhile: what this controller saw may be stale
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark="not the leader controller",
                                               ext_fields={"leaderAddr": ""})
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=orjson.dumps(result))


Handler = Callable[[ReplicasInfoManager, dict[str, Any]], Any]


def _json(cmd: RemotingCommand) -> dict[str, Any]:
    return json_object(cmd.body)


def _view(manager: ReplicasInfoManager, state: GroupState | None) -> dict[str, Any]:
    if state is None:
        return {}
    out = state.to_json()
    out["alive"] = sorted(int(r) for r in state.replicas if manager.alive(state.broker_name, int(r)))
    return out


def _heartbeat(manager: ReplicasInfoManager, req: dict[str, Any]) -> dict[str, Any]:
    state = manager.heartbeat(str(req["clusterName"]), str(req["brokerName"]), int(req["brokerId"]),
                              str(req["brokerAddr"]), str(req["haAddr"]), int(req.get("maxOffset", 0)),
                              int(req.get("epoch", 0)), int(req.get("heartbeatTimeoutMillis", 10_000)) / 1000,
                              str(req.get("bootId", "")))
    return _view(manager, state)


def _alter(manager: ReplicasInfoManager, req: dict[str, Any]) -> dict[str, Any]:
    state = manager.alter_sync_state_set(str(req["brokerName"]), int(req["masterId"]), int(req["masterEpoch"]),
                                         [int(x) for x in req["syncStateSet"]], int(req["syncStateSetEpoch"]))
    return _view(manager, state)


def _elect(manager: ReplicasInfoManager, req: dict[str, Any]) -> dict[str, Any]:
    return _view(manager, manager.elect(str(req["brokerName"])) or manager.state(str(req["brokerName"])))


def _replica_info(manager: ReplicasInfoManager, req: dict[str, Any]) -> dict[str, Any]:
    name = req.get("brokerName")
    names = [str(name)] if name else sorted(manager.groups)
    return {n: _view(manager, manager.state(n)) for n in names}
