"""Which member of a broker group serves a RocketMQ 5 client, and with which permission. RocketMQ 5's proxy in
cluster mode fronts the whole group; here every member's gRPC endpoint answers routes from the name server's view
instead: the master's endpoint while the name server lists the group's master, the slave's own (readable only)
once it is gone. A client whose configured endpoints name both members then moves to the slave at its next route
refresh (and back to the master once the name server lists it again). The permission is the one the name server
routes the group's queues with, as the proxy's routes come from the name server: an operator's ``wipeWritePerm``
takes write off the gRPC routes too, as off the remoting clients' routes.

A master caches the name servers' answers per topic as RocketMQ's proxy caches its routes: asked again on the
first route query ``topicRouteServiceCacheRefreshSeconds`` after they were fetched, that query (and any other
meanwhile) answered from the one before, so that a client's QueryRoute and QueryAssignment cost no round trip to
the name servers, and a name server outage leaves routes as they last were rather than holding each query. A change
the broker registers of its own (its permission, a topic's) drops the answers it makes stale. A slave asks at every
query: its master's death must move clients to it at once."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from txmq.errors import ClientError
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

log = logging.getLogger("txmq.grpc")

GRPC_ENDPOINT_KEY = "grpcEndpoint"  # txmq's key in GET_BROKER_RUNTIME_INFO: the member's gRPC "host:port"
TIMEOUT_S = 1.0  # two of these stay within a client's QueryRoute timeout (the Python client: 3 s)


@dataclass
class _Cached:
    """A topic's answer from the name servers: broker id 0's address in it and the group's perm (``_master_addr``)."""

    answer: tuple[str | None, int]
    fetched: float  # time.monotonic() when a name server answered it
    used: float  # time.monotonic() of the last route query it answered
    refresh: asyncio.Task[None] | None = None  # the name servers being asked again


class GroupRoute:
    """A slave's answer to "where is this group served": its master's gRPC endpoint, or None (serve it here)."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        # master's remoting address -> its gRPC endpoint, and when the master said so (time.monotonic())
        self._grpc_of: dict[str, tuple[tuple[str, int], float]] = {}
        self._warned: set[str] = set()  # masters without a gRPC endpoint
        self._routes: dict[str, _Cached] = {}  # topic -> answer, the least recently fetched first

    def forget(self, topics: Iterable[str] | None = None) -> None:
        """Drop the cached answers of ``topics`` (None: all, as the endpoint stops), their refreshes under way
        cancelled: the broker registered a change of its own since they were fetched."""
        for topic in list(self._routes) if topics is None else topics:
            if topic in self._routes:
                self._drop(topic)

    async def routed_perm(self, topic: str) -> int | None:
        """The perm the first name server answering routes this group's queues of ``topic`` with; None when none
        answers within ``TIMEOUT_S`` or its route lacks the group (a topic not registered yet): the broker's own
        perm stands then."""
        master, perm = await self._master_addr(topic)
        return perm if master is not None else None

    async def master_endpoint(self, topic: str) -> tuple[tuple[str, int], int] | None:
        """The group master's gRPC endpoint while a name server lists it and it answers, and the perm that name
        server routes the group's queues of ``topic`` with (the master's permission, a wipe, not this slave's);
        None when it is gone (or no name server answers: a slave with slaveReadEnable serves reads rather than
        nobody)."""
        master, perm = await self._master_addr(topic, cached=False)  # a failover must reach the routes at once
        if not master:
            return None
        known = self._grpc_of.get(master)
        now = time.monotonic()
        if known is None or now - known[1] >= self.broker.config.topic_route_service_cache_refresh_seconds:
            endpoint = await self._ask_grpc_endpoint(master)  # again now and then: a master restarted on another port
            if endpoint is None:
                self._grpc_of.pop(master, None)
                return None
            known = self._grpc_of[master] = endpoint, now
        return known[0], perm

    async def _invoke(self, addr: str, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            return await self.broker.namesrv_client.invoke(addr, cmd, TIMEOUT_S)
        except (ClientError, OSError):
            return None

    async def _master_addr(self, topic: str, *, cached: bool = True) -> tuple[str | None, int]:
        """Broker id 0's remoting address in the topic's route ("" when the group is listed without one) and the
        perm of the group's queues there, as the first name server answering has them; (None, 0) when it does not
        route the group (or none answers). ``cached``: from the cache while it holds the topic (its answer asked
        again in the background once older than ``topicRouteServiceCacheRefreshSeconds``)."""
        cfg = self.broker.config
        now = time.monotonic()
        entry = self._routes.get(topic)
        if entry is not None and now - entry.used >= cfg.topic_route_service_cache_expired_seconds:
            self._drop(topic)
            entry = None
        if entry is None or not cached or cfg.topic_route_service_cache_refresh_seconds == 0:
            answer = await self._fetch(topic)
            if answer is not None:
                self._keep(topic, answer)
            return answer if answer is not None else (None, 0)
        entry.used = now
        if entry.refresh is None and now - entry.fetched >= cfg.topic_route_service_cache_refresh_seconds:
            entry.refresh = asyncio.create_task(self._refresh(topic, entry), name=f"gRPC route of {topic}")
        return entry.answer

    async def _refresh(self, topic: str, entry: _Cached) -> None:
        """Ask the name servers for ``topic`` again; no answer keeps the one before (asked again at the next
        query)."""
        try:
            answer = await self._fetch(topic)
        except Exception as exc:  # a name server's odd answer: the cached one stays (the next query tries again)
            log.warning("gRPC route of %s: the name servers' answer could not be read: %r", topic, exc)
            return
        finally:
            entry.refresh = None
        if answer is not None and self._routes.get(topic) is entry:  # not dropped meanwhile
            self._keep(topic, answer)

    def _keep(self, topic: str, answer: tuple[str | None, int]) -> None:
        """Cache ``answer`` as fetched now, dropping the least recently fetched topic past
        ``topicRouteServiceCacheMaxNum``."""
        now = time.monotonic()
        self._routes.pop(topic, None)  # the order of the dict is the order of fetching
        self._routes[topic] = _Cached(answer, now, now)
        while len(self._routes) > self.broker.config.topic_route_service_cache_max_num:
            self._drop(next(iter(self._routes)))

    def _drop(self, topic: str) -> None:
        entry = self._routes.pop(topic)
        if entry.refresh is not None:
            entry.refresh.cancel()

    async def _fetch(self, topic: str) -> tuple[str | None, int] | None:
        """``_master_addr``'s answer from the name servers; None when none answers."""
        resp = await self._first_route(topic)
        if resp is None:
            return None
        if resp.code != ResponseCode.SUCCESS:
            return None, 0
        name = self.broker.config.broker_name
        route = orjson.loads(resp.body)
        perm = next((qd.get("perm") for qd in route.get("queueDatas") or () if qd.get("brokerName") == name), None)
        for data in route.get("brokerDatas") or ():
            if data.get("brokerName") == name and isinstance(perm, int):
                return str((data.get("brokerAddrs") or {}).get("0", "")), perm
        return None, 0

    async def _first_route(self, topic: str) -> RemotingCommand | None:
        """The first answer to GET_ROUTEINFO_BY_TOPIC from the name servers, all asked at once and waited for
        ``TIMEOUT_S`` in all: one that hangs neither holds a route query past it nor hides the others' answers
        (an operator's wipe made there); None when none answers in time."""
        asks = [asyncio.ensure_future(self._invoke(addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                                                  {"topic": topic})))
                for addr in self.broker.config.namesrv_addrs]
        try:
            async with asyncio.timeout(TIMEOUT_S):
                for ask in asyncio.as_completed(asks):
                    resp = await ask
                    if resp is not None:
                        return resp
        except TimeoutError:
            pass
        finally:
            for ask in asks:
                ask.cancel()
        return None

    async def _ask_grpc_endpoint(self, master: str) -> tuple[str, int] | None:
        resp = await self._invoke(master, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return None
        host, _, port = str(orjson.loads(resp.body).get("table", {}).get(GRPC_ENDPOINT_KEY, "")).rpartition(":")
        if not port.isdigit():
            if master not in self._warned:  # once per master, not once per client's route refresh
                self._warned.add(master)
                log.warning("master %s serves no gRPC endpoint: this slave routes RocketMQ 5 clients to itself",
                            master)
            return None
        return host, int(port)
