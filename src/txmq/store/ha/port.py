"""The HA port's listener: TLS as ``tls.server.mode`` asks (disabled, permissive, enforcing: as the remoting
ports, ``txmq.remoting.tls``), and at most ``haMaxConnections`` connections at once, handshakes under way
included, so that strangers holding connections open cost a bounded number of sockets and buffers. A
connection over the cap is closed at once; refusals are logged at most once per kind, host and 10 s."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from txmq.refusals import RefusalLog
from txmq.remoting.tls import TlsServer
from txmq.store.ha.config import HAConfig
from txmq.store.ha.protocol import HANDSHAKE_TIMEOUT_S

log = logging.getLogger("txmq.ha")

Accept = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def peer_host(writer: asyncio.StreamWriter) -> str:
    return str(writer.get_extra_info("peername", ("?", 0))[0])


class HAPort:
    """Hands each connection to ``accept`` while fewer than ``config.max_connections`` are open."""

    def __init__(self, accept: Accept, config: HAConfig) -> None:
        self.accept = accept
        self.config = config
        self.open = 0
        self.refusals = RefusalLog(log, "HA port refused a connection")
        self._server: asyncio.Server | TlsServer | None = None

    async def start(self) -> None:
        cfg = self.config
        if cfg.tls.enabled:
            def factory() -> asyncio.Protocol:
                return asyncio.StreamReaderProtocol(asyncio.StreamReader(), self._serve)

            self._server = await TlsServer.start(factory, cfg.listen_host, cfg.listen_port, cfg.tls.context(),
                                                 allow_plain=cfg.tls.mode == "permissive",
                                                 handshake_timeout_s=HANDSHAKE_TIMEOUT_S,
                                                 max_pending=cfg.max_connections)
        else:
            self._server = await asyncio.start_server(self._serve, cfg.listen_host, cfg.listen_port)
        if cfg.listen_port == 0:
            cfg.listen_port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open >= self.config.max_connections:
            self.refusals.refused(peer_host(writer), f"{self.open} connections open (haMaxConnections)")
            writer.close()
            return
        self.open += 1
        try:
            await self.accept(reader, writer)
        finally:
            self.open -= 1
            writer.close()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
