"""Serving the console: its own accept loop, so that the connection cap holds from the moment a connection is
accepted (a TLS handshake included) and one connection more is closed at once, and aiohttp's idle timeout set to
the read timeout, so that a client that never finishes its request's headers is cut off. Together they keep a pile
of unfinished requests from using the descriptors the broker sharing the process needs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl

from aiohttp import web

from txmq.accept import accept
from txmq.cancel import cancel_and_wait
from txmq.console.app import make_app
from txmq.console.config import ConsoleConfig
from txmq.console.guard import REFUSALS, HttpLog
from txmq.refusals import RefusalLog

log = logging.getLogger("txmq.console")

BACKLOG = 128
ACCEPT_PAUSE_S = 0.5  # after an accept failed (the process out of descriptors): asyncio's own servers pause too
LINGER_S = 1.0  # after answering a request whose body did not all arrive, the rest is read this long at most
BUSY = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


class Listener:
    """Accepts connections for aiohttp's ``server``: at most ``limit`` open at once, those in their TLS handshake
    counted."""

    def __init__(self, server: web.Server, sock: socket.socket, ctx: ssl.SSLContext | None, limit: int,
                 timeout_s: float, refusals: RefusalLog) -> None:
        self._server, self._sock, self._ctx, self._limit = server, sock, ctx, limit
        self._timeout_s, self._refusals = timeout_s, refusals
        # connections accepted and not yet counted by aiohttp: each task's handler, until its ``connection_made``
        self._opening: dict[asyncio.Task[None], web.RequestHandler] = {}
        self._task = asyncio.get_running_loop().create_task(self._accept())

    @property
    def open(self) -> int:
        """Connections served and those opening, each once: a handler is in the server's connections from its
        ``connection_made`` (its transport set), turns before the task that opened it is done."""
        return len(self._server.connections) + sum(1 for h in self._opening.values() if h.transport is None)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await accept(self._sock)
            except OSError as exc:  # EMFILE and its kin: wait rather than spin
                self._refusals.refused("*", f"accept failed: {exc.strerror or exc}")
                await asyncio.sleep(ACCEPT_PAUSE_S)
                continue
            host = str(peer[0]) if isinstance(peer, tuple) else "?"
            if self.open >= self._limit:
                self._refusals.refused(host, f"connection closed: {self._limit} open already (the cap)")
                if self._ctx is None:
                    with contextlib.suppress(OSError):
                        conn.send(BUSY)
                conn.close()
                continue
            handler = self._server()
            task = loop.create_task(self._open(conn, host, handler))
            self._opening[task] = handler
            task.add_done_callback(self._opened)

    def _opened(self, task: asyncio.Task[None]) -> None:
        del self._opening[task]

    async def _open(self, conn: socket.socket, host: str, handler: web.RequestHandler) -> None:
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: handler, conn, ssl=self._ctx, ssl_handshake_timeout=self._timeout_s if self._ctx else None)
        except OSError as exc:  # a failed or too slow TLS handshake (ssl.SSLError is an OSError)
            self._refusals.refused(host, f"TLS handshake failed: {type(exc).__name__}")
            conn.close()
        except asyncio.CancelledError:
            conn.close()
            raise

    async def close(self) -> None:
        for task in list(self._opening):
            task.cancel()
        await cancel_and_wait(self._task)
        if self._opening:
            await asyncio.wait(list(self._opening))
        self._sock.close()


def listen(host: str, port: int) -> socket.socket:
    sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET,
                                backlog=BACKLOG)
    sock.setblocking(False)
    return sock


class Console:
    """The console served on the running loop; ``addr`` once started."""

    def __init__(self, config: ConsoleConfig) -> None:
        self.config = config
        self._runner: web.AppRunner | None = None
        self._listener: Listener | None = None

    @property
    def namesrv(self) -> str | None:
        return self.config.namesrv

    @namesrv.setter
    def namesrv(self, value: str | None) -> None:
        self.config.namesrv = value

    @property
    def port(self) -> int:
        return self.config.port

    @property
    def addr(self) -> str:
        host = self.config.host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    async def start(self) -> None:
        config = self.config
        config.check()
        ctx = None
        if config.https:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(config.https_cert, config.https_key)
        sock = listen(config.host, config.port)
        try:
            app = make_app(config)
            self._runner = web.AppRunner(app, access_log=None, keepalive_timeout=config.read_timeout_s,
                                         lingering_time=LINGER_S, logger=HttpLog(app[REFUSALS]))
            await self._runner.setup()
        except BaseException:
            sock.close()
            raise
        config.port = int(sock.getsockname()[1])
        assert self._runner.server is not None
        self._listener = Listener(self._runner.server, sock, ctx, config.max_connections, config.read_timeout_s,
                                  app[REFUSALS])
        log.info("console on %s://%s/%s", "https" if ctx else "http", self.addr,
                 " (users log in with their own ACL accounts)" if config.login else "")

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
