"""``Admin``: topics, stats and transactions across the brokers a name server knows (RocketMQ's
``DefaultMQAdminExt``, the part txmq's CLI needs)."""

from __future__ import annotations

from typing import Any

import orjson

from txmq.client.base import ClientBase
from txmq.client.instance import master_addrs
from txmq.errors import BrokerError, ClientError
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import CreateTopicRequestHeader
from txmq.topic import PermName, check_topic


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

    # --- topics ---------------------------------------------------------------------------------------

    def create_topic(self, topic: str, queue_nums: int = 8, brokers: list[str] | None = None,
                     perm: int = PermName.READ_WRITE, order: bool = False) -> None:
        check_topic(topic)
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
            return sorted(orjson.loads(resp.body).get("topicList") or [])
        return self._call(go())

    # --- stats and transactions -----------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        resps = self._check(self._call(self._each_broker(lambda: RemotingCommand.request(RequestCode.TXMQ_STATS))))
        return {name: orjson.loads(r.body) for name, r in resps.items()}

    def tx_list(self, limit: int = 100) -> dict[str, Any]:
        resps = self._check(self._call(self._each_broker(
            lambda: RemotingCommand.request(RequestCode.TXMQ_TX_LIST, {"limit": str(limit)}))))
        return {name: orjson.loads(r.body) for name, r in resps.items()}

    def tx_show(self, ident: str) -> dict[str, Any]:
        """The transaction named by transaction id or half offset, from the first broker that knows it."""
        resps = self._call(self._each_broker(lambda: RemotingCommand.request(RequestCode.TXMQ_TX_SHOW, {"id": ident})))
        for name, r in resps.items():
            if r.code == ResponseCode.SUCCESS:
                return {"broker": name, **orjson.loads(r.body)}
        raise ClientError(f"no broker knows transaction {ident}")

    def tx_decide(self, ident: str, outcome: str) -> str:
        """An operator's COMMIT or ROLLBACK of the transaction named by id or half offset; the broker's name."""
        resps = self._call(self._each_broker(
            lambda: RemotingCommand.request(RequestCode.TXMQ_TX_DECIDE, {"id": ident, "outcome": outcome})))
        for name, r in resps.items():
            if r.code == ResponseCode.SUCCESS:
                return name
            if r.code == ResponseCode.TRANSACTION_SHOULD_COMMIT:
                raise ClientError(f"transaction {ident} was already committed (the first decision wins)")
            if r.code == ResponseCode.TRANSACTION_SHOULD_ROLLBACK:
                raise ClientError(f"transaction {ident} was already rolled back (the first decision wins)")
            if r.code != ResponseCode.QUERY_NOT_FOUND:
                raise BrokerError(r.code, f"{name}: {r.remark}")
        raise ClientError(f"no broker knows transaction {ident}")

    def tx_resume(self, ident: str) -> str:
        resps = self._call(self._each_broker(
            lambda: RemotingCommand.request(RequestCode.TXMQ_TX_RESUME, {"id": ident})))
        errors = []
        for name, r in resps.items():
            if r.code == ResponseCode.SUCCESS:
                return name
            if r.code != ResponseCode.QUERY_NOT_FOUND:
                errors.append(f"{name}: {r.remark}")
        raise ClientError("; ".join(errors) or f"no broker knows transaction {ident}")
