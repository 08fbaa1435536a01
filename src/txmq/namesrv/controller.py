"""The name server process part: a remoting server plus a periodic scan for dead brokers."""

from __future__ import annotations

import asyncio
import logging

from txmq.acl.processor import AuthProcessor
from txmq.acl.validator import AccessValidator
from txmq.cancel import cancel_and_wait
from txmq.namesrv.processor import NamesrvProcessor
from txmq.namesrv.route_info import RouteInfoManager
from txmq.remoting.registry import RequestDispatcher, RequestTable
from txmq.remoting.server import RemotingServer, ServerLimits
from txmq.remoting.tls import TlsServerConfig

log = logging.getLogger("txmq.namesrv")


class NamesrvController:
    def __init__(self, host: str = "127.0.0.1", port: int = 9876, broker_expired_s: float = 120.0,
                 limits: ServerLimits | None = None, acl: AccessValidator | None = None,
                 tls: TlsServerConfig | None = None) -> None:
        self.routes = RouteInfoManager(broker_expired_s)
        self.acl = acl
        self.request_table = RequestTable("namesrv")
        self.request_table.register(NamesrvProcessor(self.routes))
        self.request_table.register(AuthProcessor(acl.store if acl is not None else None, "namesrv"))
        self.server = RemotingServer(RequestDispatcher(self.request_table, acl), host=host, port=port, tls=tls,
                                     limits=limits)
        self.host = host
        self._scan_task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        await self.server.start()
        self._scan_task = asyncio.create_task(self._scan_loop())
        log.info("namesrv listening on %s (%s)", self.addr,
                 f"ACL on: {self.acl.store.describe()}" if self.acl else "ACL off: anyone may register brokers")

    async def _scan_loop(self) -> None:
        interval = min(10.0, max(0.5, self.routes.broker_expired_s / 4))
        while True:
            await asyncio.sleep(interval)
            self.routes.scan_not_active_broker()

    async def close(self) -> None:
        await cancel_and_wait(self._scan_task)
        await self.server.close()
        if self.acl is not None:
            self.acl.store.close()
        log.info("namesrv stopped")
