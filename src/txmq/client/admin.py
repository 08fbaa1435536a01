"""``Admin``: topics, stats and transactions across the brokers a name server knows (RocketMQ's
``DefaultMQAdminExt``, the part txmq's CLI needs)."""

from __future__ import annotations

from typing import Any

import orjson

from txmq.client.base import ClientBase
from txmq.client.instance import master_addrs
from txmq.errors import BrokerError, ClientError
from txmq.remoting.admin_headers import half_offset_of
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import CreateTopicRequestHeader
from txmq.topic import PermName, check_topic


def check_topic_perm(perm: int) -> None:
    """Refuse a topic perm outside 0 to 7 before any broker is asked, as RocketMQ's client does
    (``Validators.checkTopicConfig``): brokers store any number, and -1 would grant every bit."""
    if not 0 <= perm < PermName.PERM_PRIORITY:
        raise ClientError(f"topicPermission value: {perm} is invalid (0 to 7: 2 write, 4 read, 6 both)")


class Admin(ClientBase):
    def __init__(self, namesrv: str | None = None) -> None:
        super().__init__(namesrv, None, "admin")

    # --- cluster --------------------------------------------------------------------------------------

    async def _brokers(self) -> dict[str, str]:
        assert self.instance is not None
        resp = await self.instance.invoke_namesrv(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark)
        out = master_addrs(resp.body)
        self.instance.broker_addrs.update(out)
        return out

    def brokers(self) -> dict[str, str]:
        """Broker name → master address, as the name server has them."""
        return self._call(self._brokers())

    async def _each_broker(self, cmd_factory: Any, brokers: list[str] | None = None) -> dict[str, RemotingCommand]:
        assert self.instance is not None
        addrs = await self._brokers()
        out = {}
        for name in brokers or sorted(addrs):
            if name not in addrs:
                raise ClientError(f"no broker named {name}")
            out[name] = await self.instance.remoting.invoke(addrs[name], cmd_factory(), 10)
        return out

    @staticmethod
    def _check(resps: dict[str, RemotingCommand]) -> dict[str, RemotingCommand]:
        for resp in resps.values():
            if resp.code != ResponseCode.SUCCESS:
                raise BrokerError(resp.code, resp.remark)
        return resps

    async def _member_status(self, addr: str) -> dict[str, Any] | None:
        """A member's GET_BROKER_HA_STATUS answer, or None when it does not answer."""
        assert self.instance is not None
        try:
            resp = await self.instance.remoting.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS),
                                                       5)
        except (ClientError, OSError):
            return None
        return dict(orjson.loads(resp.body)) if resp.code == ResponseCode.SUCCESS else None

    async def _members(self) -> list[tuple[str, str, int, str, dict[str, Any] | None]]:
        """(cluster, broker name, broker id, address, its HA status) of every member the name server knows."""
        assert self.instance is not None
        resp = await self.instance.invoke_namesrv(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark)
        info = orjson.loads(resp.body)
        table = info.get("brokerAddrTable") or {}
        out = []
        for cluster, names in sorted((info.get("clusterAddrTable") or {}).items()):
            for name in sorted(names):
                addrs = (table.get(name) or {}).get("brokerAddrs") or {}
                for bid, addr in sorted(addrs.items(), key=lambda kv: int(kv[0])):
                    out.append((cluster, name, int(bid), addr, await self._member_status(addr)))
        return out

    def cluster_list(self) -> list[dict[str, Any]]:
        """Every member of every broker group the name server knows (mqadmin clusterList): cluster, group,
        broker id, address, and role and log end as the member itself reports them."""
        async def go() -> list[dict[str, Any]]:
            return [{"cluster": cluster, "brokerName": name, "brokerId": bid, "addr": addr,
                     "role": st["role"] if st else "unreachable", "haAddr": st["haAddr"] if st else "",
                     "maxOffset": st["maxOffset"] if st else -1}
                    for cluster, name, bid, addr, st in await self._members()]
        return self._call(go())

    def ha_status(self) -> dict[str, dict[str, Any]]:
        """Each group's replication (mqadmin haStatus): its master's view (slaves, acknowledged offsets, lag)
        and each slave's view of its master, by broker id."""
        async def go() -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            for _, name, bid, addr, st in await self._members():
                out.setdefault(name, {})[str(bid)] = st or {"addr": addr, "role": "unreachable"}
            return out
        return self._call(go())

    # --- topics ---------------------------------------------------------------------------------------

    def create_topic(self, topic: str, queue_nums: int = 8, brokers: list[str] | None = None,
                     perm: int = PermName.READ_WRITE, order: bool = False) -> None:
        check_topic(topic)
        check_topic_perm(perm)
        header = CreateTopicRequestHeader(topic=topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums,
                                          perm=perm, order=order)
        self._check(self._call(self._each_broker(
            lambda: RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext()), brokers)))

    def delete_topic(self, topic: str) -> None:
        """Delete the topic from every broker and the name servers; a topic no broker has is an error."""
        async def go() -> None:
            assert self.instance is not None
            resps = await self._each_broker(lambda: RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER,
                                                                            {"topic": topic}))
            if all(r.code == ResponseCode.TOPIC_NOT_EXIST for r in resps.values()):
                raise ClientError(f"topic {topic} does not exist")
            for r in resps.values():
                if r.code not in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST):
                    raise BrokerError(r.code, r.remark)
            await self.instance.invoke_namesrv(RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV,
                                                                       {"topic": topic}))
        self._call(go())

    def list_topics(self) -> list[str]:
        async def go() -> list[str]:
            assert self.instance is not None
            resp = await self.instance.invoke_namesrv(
                RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
            if resp.code != ResponseCode.SUCCESS:  # refused (ACL): its body is no list
                raise BrokerError(resp.code, resp.remark)
            return sorted(orjson.loads(resp.body).get("topicList") or [])
        return self._call(go())

    # --- stats and transactions -----------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        resps = self._check(self._call(self._each_broker(lambda: RemotingCommand.request(RequestCode.TXMQ_STATS))))
        return {name: orjson.loads(r.body) for name, r in resps.items()}

    def tx_list(self, limit: int = 100, group: str = "") -> dict[str, Any]:
        """Pending and discarded transactions per broker; only ``group``'s when given (what a non-admin account
        may see under ACL: the groups it may publish for)."""
        ext = {"limit": str(limit), **({"group": group} if group else {})}
        resps = self._check(self._call(self._each_broker(lambda: RemotingCommand.request(RequestCode.TXMQ_TX_LIST,
                                                                                         dict(ext)))))
        return {name: orjson.loads(r.body) for name, r in resps.items()}

    def _tx_each(self, code: int, ident: str, group: str, extra: dict[str, str] | None = None, broker: str = ""
                 ) -> dict[str, RemotingCommand]:
        """The request asked of ``broker``, or of each broker. A half offset names a half of one broker (each numbers
        its halves from 0): with several brokers it is asked of the one ``broker`` names, never of each (each would
        show, resume or decide whatever half it holds there)."""
        ext = {"id": ident, **({"group": group} if group else {}), **(extra or {})}

        async def go() -> dict[str, RemotingCommand]:
            if not broker and half_offset_of(ident) is not None:
                brokers = sorted(await self._brokers())
                if len(brokers) > 1:
                    raise ClientError(f"half offset {ident} names a half of one broker: choose the broker (--broker "
                                      f"{' or '.join(brokers)})")
            return await self._each_broker(lambda: RemotingCommand.request(code, dict(ext)),
                                           [broker] if broker else None)

        resps = self._call(go())
        for r in resps.values():
            if r.code == ResponseCode.NO_PERMISSION:
                raise BrokerError(r.code, r.remark)
        return resps

    @staticmethod
    def _unknown(ident: str, resps: dict[str, RemotingCommand]) -> ClientError:
        """No broker knows the transaction; what a broker said beyond that (its half message deleted by
        retention) is kept."""
        why = [f"{name}: {r.remark}" for name, r in resps.items()
               if r.code == ResponseCode.QUERY_NOT_FOUND and r.remark and r.remark != "no such transaction"]
        return ClientError(f"no broker knows transaction {ident}" + (f" ({'; '.join(why)})" if why else ""))

    def tx_show(self, ident: str, group: str = "", broker: str = "") -> dict[str, Any]:
        """The transaction named by transaction id or half offset (of ``broker``: ``_tx_each``), from the first broker
        that knows it."""
        resps = self._tx_each(RequestCode.TXMQ_TX_SHOW, ident, group, broker=broker)
        for name, r in resps.items():
            if r.code == ResponseCode.SUCCESS:
                return {"broker": name, **orjson.loads(r.body)}
            if r.code != ResponseCode.QUERY_NOT_FOUND:  # an id several halves carry: the answer names them
                raise BrokerError(r.code, f"{name}: {r.remark}")
        raise self._unknown(ident, resps)

    def tx_decide(self, ident: str, outcome: str, group: str = "", broker: str = "") -> str:
        """An operator's COMMIT or ROLLBACK of the transaction named by id or half offset (of ``broker``:
        ``_tx_each``); the broker's name."""
        resps = self._tx_each(RequestCode.TXMQ_TX_DECIDE, ident, group, {"outcome": outcome}, broker)
        for name, r in resps.items():
            if r.code == ResponseCode.SUCCESS:
                return name
            if r.code == ResponseCode.TRANSACTION_SHOULD_COMMIT:
                raise ClientError(f"transaction {ident} was already committed (the first decision wins)")
            if r.code == ResponseCode.TRANSACTION_SHOULD_ROLLBACK:
                raise ClientError(f"transaction {ident} was already rolled back (the first decision wins)")
            if r.code != ResponseCode.QUERY_NOT_FOUND:
                raise BrokerError(r.code, f"{name}: {r.remark}")
        raise self._unknown(ident, resps)

    def tx_resume(self, ident: str, group: str = "", broker: str = "") -> str:
        errors = []
        resps = self._tx_each(RequestCode.TXMQ_TX_RESUME, ident, group, broker=broker)
        for name, r in resps.items():
            if r.code == ResponseCode.SUCCESS:
                return name
            if r.code != ResponseCode.QUERY_NOT_FOUND:
                errors.append(f"{name}: {r.remark}")
        if errors:
            raise ClientError("; ".join(errors))
        raise self._unknown(ident, resps)
