"""What every producer and consumer shares (RocketMQ's ``MQClientInstance``): the remoting client, topic
routes from the name server, broker addresses, and heartbeats to every broker a route names."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from txmq.cancel import cancel_and_wait
from txmq.errors import BrokerError, ClientError, InvalidMessageError
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import Connection, RemotingClient, RPCHook
from txmq.topic import PermName, check_queue_nums

log = logging.getLogger("txmq.client")

MASTER = 0
MASTER_ID = str(MASTER)  # as brokerAddrs keys it in JSON
DOWN_S = 5.0  # a broker address that failed a request is passed over for reads this long


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, object]:
        return {"topic": self.topic, "brokerName": self.broker_name, "queueId": self.queue_id}


@dataclass(slots=True)
class TopicRoute:
    publish_queues: list[MessageQueue]
    subscribe_queues: list[MessageQueue]
    broker_addrs: dict[str, str]  # broker name -> master address
    members: dict[str, dict[int, str]]  # broker name -> broker id -> address (master 0 and slaves)


def parse_route(topic: str, data: dict[str, Any]) -> TopicRoute:
    """A group whose master is gone keeps its queues for reading (from its slaves), not for sending. A group whose
    queue numbers are out of bounds is left out (a name server that does not check them, another implementation's:
    a route of 10^9 queues would hold this client in the loops below)."""
    members: dict[str, dict[int, str]] = {}
    for bd in data.get("brokerDatas") or []:
        members[str(bd["brokerName"])] = {int(k): str(v) for k, v in (bd.get("brokerAddrs") or {}).items()}
    addrs = {name: m[MASTER] for name, m in members.items() if MASTER in m}
    pub: list[MessageQueue] = []
    sub: list[MessageQueue] = []
    for qd in sorted(data.get("queueDatas") or [], key=lambda q: str(q["brokerName"])):
        name = str(qd["brokerName"])
        try:
            check_queue_nums(int(qd["readQueueNums"]), int(qd["writeQueueNums"]))
        except InvalidMessageError as exc:
            log.warning("route of %s: broker %s left out: %s", topic, name, exc)
            continue
        perm = int(qd.get("perm", PermName.READ_WRITE))
        if PermName.is_writeable(perm) and name in addrs:
            pub.extend(MessageQueue(topic, name, i) for i in range(int(qd["writeQueueNums"])))
        if PermName.is_readable(perm) and members.get(name):
            sub.extend(MessageQueue(topic, name, i) for i in range(int(qd["readQueueNums"])))
    return TopicRoute(pub, sub, addrs, members)


def master_addrs(cluster_info: bytes) -> dict[str, str]:
    """Broker name → master address, from the body of a GET_BROKER_CLUSTER_INFO answer."""
    table = orjson.loads(cluster_info).get("brokerAddrTable") or {}
    return {name: bd["brokerAddrs"][MASTER_ID] for name, bd in table.items()
            if MASTER_ID in (bd.get("brokerAddrs") or {})}


def local_ip() -> str:
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing interface
        return str(s.getsockname()[0])
    return "127.0.0.1"


class MQClientInstance:
    """Lives on the client's loop: every method here is a coroutine or a loop-thread callback."""

    def __init__(self, namesrv: str, instance_name: str,
                 request_handler: Callable[[Connection, RemotingCommand], Any] | None = None, *,
                 rpc_hook: RPCHook | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        self.namesrv_addrs = [a.strip() for a in namesrv.split(";") if a.strip()]
        if not self.namesrv_addrs:
            raise ClientError("no name server address: pass namesrv= or set NAMESRV_ADDR")
        self.client_id = f"{local_ip()}@{instance_name}@{os.getpid()}"
        self.remoting = RemotingClient(request_handler, on_connect=self._on_connect, rpc_hook=rpc_hook,
                                       ssl_context=ssl_context)
        self.routes: dict[str, TopicRoute] = {}
        self.broker_addrs: dict[str, str] = {}  # masters
        self.members: dict[str, dict[int, str]] = {}  # every member of each group, by broker id
        self.pull_from: dict[MessageQueue, int] = {}  # the broker id the last pull answer suggested
        self._down_until: dict[str, float] = {}
        self.heartbeat_data: Callable[[], dict[str, Any]] = dict
        self._tasks: list[asyncio.Task[None]] = []
        self._heartbeats: set[asyncio.Task[None]] = set()
        self._namesrv_index = 0

    async def start(self, poll_interval_s: float = 30.0, heartbeat_interval_s: float = 30.0) -> None:
        self._tasks.append(asyncio.create_task(self._every(poll_interval_s, self.update_all_routes)))
        self._tasks.append(asyncio.create_task(self._every(heartbeat_interval_s, self.send_heartbeat_to_all)))

    async def close(self) -> None:
        await cancel_and_wait(*self._tasks, *self._heartbeats)
        await self.remoting.close()

    async def _every(self, period: float, fn: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(period)
            try:
                await fn()
            except ClientError as exc:
                log.warning("periodic %s failed: %s", getattr(fn, "__name__", fn), exc)

    # --- name server ----------------------------------------------------------------------------------

    async def invoke_namesrv(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        last: Exception | None = None
        for i in range(len(self.namesrv_addrs)):
            addr = self.namesrv_addrs[(self._namesrv_index + i) % len(self.namesrv_addrs)]
            try:
                resp = await self.remoting.invoke(addr, cmd, timeout)
                self._namesrv_index = (self._namesrv_index + i) % len(self.namesrv_addrs)
                return resp
            except ClientError as exc:
                last = exc
                cmd = RemotingCommand.request(cmd.code, cmd.ext_fields, cmd.body)
        raise ClientError(f"no name server answered: {last}")

    async def update_route(self, topic: str) -> TopicRoute | None:
        resp = await self.invoke_namesrv(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark)
        route = parse_route(topic, orjson.loads(resp.body))
        self.routes[topic] = route
        new = {n: a for n, a in route.broker_addrs.items() if self.broker_addrs.get(n) != a}
        known = {a for m in self.members.values() for a in m.values()}
        new.update((f"{n}:{bid}", a) for n, m in route.members.items() for bid, a in m.items() if a not in known)
        self.broker_addrs.update(route.broker_addrs)
        for name, members in route.members.items():
            self.members[name] = members
            if MASTER not in members:
                self.broker_addrs.pop(name, None)  # the name server dropped the master: reads go to slaves
        if new:
            # A broker we never told about ourselves: it needs our groups now (check-back, rebalancing).
            await self.send_heartbeat_to_all(new)
        return route

    async def update_all_routes(self) -> None:
        for topic in list(self.routes):
            with contextlib.suppress(BrokerError):
                await self.update_route(topic)

    async def route(self, topic: str) -> TopicRoute | None:
        return self.routes.get(topic) or await self.update_route(topic)

    # --- brokers --------------------------------------------------------------------------------------

    async def find_broker(self, mq: MessageQueue) -> None:
        """Know where ``mq``'s broker group is, asking the name server for its topic's route when it is not known
        yet (RocketMQ's findBrokerAddressInPublish/Subscribe, then updateTopicRouteInfoFromNameServer): a queue the
        application names itself, before this client looked its topic up."""
        if mq.broker_name not in self.broker_addrs and not self.members.get(mq.broker_name):
            await self.update_route(mq.topic)

    def broker_addr(self, broker_name: str) -> str:
        """The group's master; without one, a slave (RocketMQ findBrokerAddressInAdmin): offsets and queries."""
        addr = self.broker_addrs.get(broker_name)
        if addr is None:
            members = self.members.get(broker_name)
            if not members:
                raise ClientError(f"no address known for broker {broker_name}")
            addr = members[min(members)]
        return addr

    def pull_addr(self, mq: MessageQueue) -> str:
        """Where to pull ``mq`` from (RocketMQ findBrokerAddressInSubscribe): the member the last answer
        suggested, else the master, else any slave; members that just failed come last."""
        members = self.members.get(mq.broker_name) or {}
        if not members:
            return self.broker_addr(mq.broker_name)
        now = asyncio.get_running_loop().time()
        wanted = self.pull_from.get(mq, MASTER)
        return members[min(members, key=lambda bid: (self._down_until.get(members[bid], 0) > now, bid != wanted,
                                                     bid != MASTER, bid))]

    def suggest(self, mq: MessageQueue, broker_id: int) -> None:
        self.pull_from[mq] = broker_id

    def sent_back(self, mq: MessageQueue, addr: str) -> bool:
        """The member at ``addr`` suggested another for ``mq``, and yet the next pull would go to ``addr``: the
        suggested member is not in the route (a master that stopped) or just failed."""
        wanted = (self.members.get(mq.broker_name) or {}).get(self.pull_from.get(mq, MASTER))
        return wanted != addr and self.pull_addr(mq) == addr

    def failed(self, addr: str) -> None:
        """A request to ``addr`` failed: read elsewhere for a while and ask the name server for fresh routes."""
        loop = asyncio.get_running_loop()
        if self._down_until.get(addr, 0) <= loop.time():
            task = loop.create_task(self.update_all_routes())
            self._heartbeats.add(task)
            task.add_done_callback(self._heartbeats.discard)
        self._down_until[addr] = loop.time() + DOWN_S

    async def invoke_broker(self, broker_name: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        return await self.remoting.invoke(self.broker_addr(broker_name), cmd, timeout)

    def _on_connect(self, addr: str, conn: Connection) -> None:
        """A new connection to a broker (first, or after the broker restarted) carries no registration:
        heartbeat on it now, so that check-backs and rebalancing do not wait for the next period."""
        names = {n: a for n, a in self.broker_addrs.items() if a == addr}
        if names and self.heartbeat_data():
            task = asyncio.get_running_loop().create_task(self.send_heartbeat_to_all(names))
            self._heartbeats.add(task)
            task.add_done_callback(self._heartbeats.discard)

    async def discover_brokers(self) -> None:
        """Learn every master broker from the name server and heartbeat the new ones (a transactional
        producer must be reachable by brokers holding its half messages before it sends anything)."""
        resp = await self.invoke_namesrv(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            raise BrokerError(resp.code, resp.remark)
        found = master_addrs(resp.body)
        new = {n: a for n, a in found.items() if self.broker_addrs.get(n) != a}
        self.broker_addrs.update(found)
        if new:
            await self.send_heartbeat_to_all(new)

    async def send_heartbeat_to_all(self, brokers: dict[str, str] | None = None) -> None:
        """To every master and slave (a consumer may read from slaves), or to ``brokers`` (name -> address); none
        while the client has nothing to tell (``heartbeat_data`` empty)."""
        data = self.heartbeat_data()
        if not data:
            return
        body = orjson.dumps({"clientID": self.client_id, **data})
        if brokers is None:
            brokers = dict(self.broker_addrs)
            brokers.update((f"{n}:{bid}", a) for n, m in self.members.items() for bid, a in m.items() if bid != MASTER)
        for name, addr in list(brokers.items()):
            try:
                resp = await self.remoting.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=body), 3.0)
                if resp.code != ResponseCode.SUCCESS:
                    log.warning("heartbeat to %s refused: %s", name, resp.remark)
            except ClientError as exc:
                log.warning("heartbeat to %s (%s) failed: %s", name, addr, exc)

    async def unregister(self, producer_group: str = "", consumer_group: str = "") -> None:
        ext = {"clientID": self.client_id, "producerGroup": producer_group, "consumerGroup": consumer_group}
        for addr in list(self.broker_addrs.values()):
            with contextlib.suppress(ClientError):
                await self.remoting.invoke(addr, RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, ext), 3.0)
