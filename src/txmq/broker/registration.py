"""The broker's registration with its name servers (RocketMQ's ``registerBrokerAll`` and
``unregisterBrokerAll``): its address, role, HA address and topics, every ``registerNameServerPeriod`` and at once
when a topic or the broker's permission changes. A slave learns its master from the answers. Every name server is
asked at once, as RocketMQ's ``BrokerOuterAPI`` does: one that does not answer holds a registration (and the
broker's start) for one timeout, not one per name server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import orjson

from txmq.acl.config import AclConfigError
from txmq.broker.config import BrokerConfig
from txmq.errors import ClientError
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient
from txmq.topic import PermName, TopicConfig

log = logging.getLogger("txmq.broker")

INCREMENTAL_REGISTER_MAX = 32  # more changed topics than this at once: one full registration instead
REGISTER_TIMEOUT_S = 3.0  # each name server's answer to a registration


class NamesrvRegistration:
    def __init__(self, config: BrokerConfig, client: RemotingClient, topics: Callable[[], dict[str, Any]],
                 ha_addr: Callable[[], str], on_answer: Callable[[dict[str, str]], None],
                 topic: Callable[[str], TopicConfig | None], permission: Callable[[], int],
                 on_registered: Callable[[list[str] | None], None]) -> None:
        """``topics``: the topic config wrapper to register; ``ha_addr``: where slaves reach this broker (it moves
        with the role); ``on_answer``: each name server's accepting answer (a slave's master is in it); ``topic``:
        one topic's config; ``permission``: the broker's permission as it serves it, which every topic's is
        registered within; ``on_registered``: a change was sent, of those topics (None: of all, ``schedule``d)."""
        self.config = config
        self.client = client
        self._topics = topics
        self._topic = topic
        self._permission = permission
        self._changed: set[str] = set()  # topics created or changed since the last registration
        self._full = False
        self._ha_addr = ha_addr
        self._on_answer = on_answer
        self._on_registered = on_registered
        self._now = asyncio.Event()
        self._registered: dict[str, bool] = {}
        self._stopped = False  # unregistered at the broker's stop: no registration is sent after it

    def schedule(self, topics: list[str] | None = None) -> None:
        """Tell the name servers about a topic change now rather than at the next period: of the ``topics`` created
        or changed alone, or of everything (None: a deletion, which only a full registration carries; or too many
        topics to send one by one)."""
        if topics is None or len(self._changed) + len(topics) > INCREMENTAL_REGISTER_MAX:
            self._full = True
        else:
            self._changed.update(topics)
        self._now.set()

    async def run(self) -> None:
        """Register every ``registerNameServerPeriod`` (everything), or at once when ``schedule``d (what changed)."""
        while True:
            woken = False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.register_name_server_period / 1000):
                    await self._now.wait()
                woken = True
            scheduled = self._now.is_set()  # woken, or scheduled as the period ran out: that wake lost the race
            self._now.clear()
            changed, self._changed = self._changed, set()
            if not woken or self._full:
                self._full = False
                await self.register_all()
                if scheduled:  # a deletion, the broker's permission, or what changed as the period ran out
                    self._on_registered(None)
            else:
                for topic in sorted(changed):
                    await self.register_topic(topic)

    async def register_topic(self, topic: str) -> None:
        """Tell the name servers about one created or changed topic (RocketMQ REGISTER_TOPIC_IN_NAMESRV): a cost
        that does not grow with the broker's other topics, where a full registration sends them all. A name server
        that refuses it (an older one, or one that has not seen this broker yet) gets a full registration."""
        if self._stopped:
            return
        cfg = self._topic(topic)
        # a slave's topics reach no route: a full registration, as when a name server refuses the topic's
        if cfg is None or self.config.broker_id != 0 or not await self._topic_accepted(cfg):
            await self.register_all()
        self._on_registered([topic])

    async def _topic_accepted(self, cfg: TopicConfig) -> bool:
        """REGISTER_TOPIC_IN_NAMESRV of ``cfg`` to every name server at once: whether each accepted it."""
        topic = cfg.topic_name
        queue_data = {"brokerName": self.config.broker_name, "readQueueNums": cfg.read_queue_nums,
                      "writeQueueNums": cfg.write_queue_nums, "perm": PermName.within(cfg.perm, self._permission()),
                      "topicSynFlag": cfg.topic_sys_flag}
        body = orjson.dumps({"queueDatas": [queue_data]})

        async def accepted(addr: str) -> bool:
            try:
                resp = await self.client.invoke(
                    addr, RemotingCommand.request(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": topic}, body=body),
                    REGISTER_TIMEOUT_S)
            except (ClientError, OSError):
                return False
            return resp.code == ResponseCode.SUCCESS

        return all(await asyncio.gather(*map(accepted, self.config.namesrv_addrs)))

    def _wrapper(self) -> dict[str, Any]:
        """The topic config wrapper, each topic's perm within the broker's (RocketMQ's ``registerBrokerAll``): a
        broker that does not write has every topic registered without write, so producers send elsewhere."""
        wrapper = self._topics()
        permission = self._permission()
        if not PermName.cuts(permission):  # every topic as it is: no copy of the table
            return wrapper
        table = {name: {**cfg, "perm": PermName.within(cfg["perm"], permission)}
                 for name, cfg in wrapper["topicConfigTable"].items()}
        return {**wrapper, "topicConfigTable": table}

    def _identity(self) -> dict[str, str]:
        c = self.config
        return {"brokerAddr": c.broker_addr, "brokerName": c.broker_name, "clusterName": c.broker_cluster_name,
                "brokerId": str(c.broker_id)}

    async def register_all(self, at_start: bool = False) -> None:
        """Register with every name server. ``at_start``: a name server refusing the broker's credentials
        (NO_PERMISSION) stops the start with ``AclConfigError``, rather than a broker serving unrouted; one that
        cannot be reached is tried again by ``run``."""
        if self._stopped:
            return
        body = orjson.dumps({"topicConfigSerializeWrapper": self._wrapper(), "filterServerList": []})
        ext = {**self._identity(), "haServerAddr": self._ha_addr(), "compressed": "false"}
        refusals = await asyncio.gather(*(self._register(addr, ext, body, at_start)
                                          for addr in self.config.namesrv_addrs))
        for refusal in refusals:
            if refusal is not None:
                raise refusal

    async def _register(self, addr: str, ext: dict[str, str], body: bytes, at_start: bool) -> AclConfigError | None:
        """REGISTER_BROKER at one name server; at start, its refusal of the broker's credentials is returned (raised
        by ``register_all`` once every name server was asked)."""
        refusal = None
        try:
            resp = await self.client.invoke(addr, RemotingCommand.request(RequestCode.REGISTER_BROKER, ext,
                                                                          body=body), REGISTER_TIMEOUT_S)
            ok = resp.code == ResponseCode.SUCCESS
            if at_start and resp.code == ResponseCode.NO_PERMISSION:
                refusal = AclConfigError(
                    f"namesrv {addr} refused the registration ({resp.remark}): set accessKey/secretKey in "
                    f"broker.conf to an account that name server accepts for REGISTER_BROKER (admin: true in "
                    f"its plain_acl.yml, or a Super user)" if self.config.access_key else
                    f"namesrv {addr} refused the registration ({resp.remark}): it has ACL on, and this broker "
                    f"signs with no account: set accessKey/secretKey in broker.conf")
            if not ok and self._registered.get(addr, True):  # e.g. NO_PERMISSION: accessKey/secretKey
                log.warning("namesrv %s refused the registration: code %d %s", addr, resp.code, resp.remark)
            if ok:
                self._on_answer(resp.ext_fields)
        except (ClientError, OSError) as exc:
            ok = False
            if self._registered.get(addr, True):
                log.warning("register to namesrv %s failed: %s", addr, exc)
        if ok and not self._registered.get(addr):
            log.info("registered to namesrv %s", addr)
        self._registered[addr] = ok
        return refusal

    async def unregister_all(self) -> None:
        """At the broker's stop: unregister from every name server, and send no registration after it (one the
        periodic task or a topic change would send meanwhile would route clients to a stopping broker)."""
        self._stopped = True

        async def unregister(addr: str) -> None:
            with contextlib.suppress(ClientError, OSError):
                await self.client.invoke(addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER,
                                                                       self._identity()), REGISTER_TIMEOUT_S)

        await asyncio.gather(*map(unregister, self.config.namesrv_addrs))
