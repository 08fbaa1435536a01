"""``RemotingServer``: accepts remoting connections and bounds what its peers can make it hold.

A peer's bytes never grow the server's memory without bound (``ServerLimits``):

- per connection the decoder holds at most one frame (``max_frame_size``, RocketMQ's ``frameMaxLength``) plus
  one read; across connections the bytes of frames not yet whole are bounded by ``server_buffered_bytes_max``:
  a connection whose partial frame would take the total past it is closed;
- a frame not whole ``server_frame_timeout_seconds`` after the server first saw its bytes closes its
  connection (a peer that stops mid-frame held its bytes forever);
- a connection with nothing read or written for ``server_channel_max_idle_time_seconds`` is closed
  (RocketMQ's ``serverChannelMaxIdleTimeSeconds``, Netty's all-idle handler; 0 turns it off, as there);
- at most ``server_max_connections`` connections are served; one beyond is closed at once.

Each event is one log line (a run of refused connections: one line when it starts, one when it ends), and those a
peer can cause at will (connections opened, closed, cut off) are folded per host as refusals are (``RefusalLog``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from txmq.conf import key
from txmq.refusals import RefusalLog
from txmq.remoting.codec import DEFAULT_MAX_FRAME_SIZE
from txmq.remoting.tls import TlsServer, TlsServerConfig
from txmq.remoting.transport import CONNECTION_EVENTS, DEFAULT_MAX_PENDING_INVOKES, Connection, Handler

log = logging.getLogger("txmq.remoting")
_CUT_OFF = RefusalLog(log, "remoting server cut off a connection")


def _host(conn: Connection) -> str:
    return conn.remote_address.rpartition(":")[0]


@dataclass
class ServerLimits:
    """What one remoting server lets its peers hold: keys of broker.conf (and of ``txmq namesrv -c``)."""

    server_channel_max_idle_time_seconds: float = key(120, unit="s", range=(0, None),
                                                      doc="an idle connection (no read, no write) is closed after "
                                                          "this; 0: never (as RocketMQ's Netty idle handler)")
    server_frame_timeout_seconds: float = key(30, unit="s", range=(0.1, None), rocketmq=False,
                                              doc="a frame must be whole within this of its first bytes")
    server_max_connections: int = key(4096, range=(1, None), rocketmq=False,
                                      doc="connections served at once (keep under the process's open-file limit)")
    server_buffered_bytes_max: int = key(256 * 1024 * 1024, unit="bytes", range=(1, None), rocketmq=False,
                                         doc="of partial frames, all connections together")


class RemotingServer:
    """Accepts remoting connections and hands their requests to ``handler(conn, cmd)``, within ``limits``."""

    def __init__(
        self,
        handler: Handler,
        host: str = "127.0.0.1",
        port: int = 0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        *,
        max_pending_invokes: int = DEFAULT_MAX_PENDING_INVOKES,
        limits: ServerLimits | None = None,
        tls: TlsServerConfig | None = None,
    ) -> None:
        self.handler = handler
        self.tls = tls  # tls.server.mode and its certificate (txmq.remoting.tls)
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        self.max_pending_invokes = max_pending_invokes
        self.limits = limits or ServerLimits()
        self.connections: set[Connection] = set()
        self.buffered_bytes = 0  # partial-frame bytes held by all connections
        self._buffered: dict[Connection, int] = {}  # per connection, those still holding some
        self._refused = 0  # connections refused in the current run at the cap
        # handlers still running whose connection closed: ``close`` drains or cancels them with the others
        self._orphans: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | TlsServer | None = None
        self._sweeper: asyncio.Task[None] | None = None

    def _new_connection(self) -> Connection:
        conn = Connection(
            self.handler,
            max_frame_size=self.max_frame_size,
            max_pending_invokes=self.max_pending_invokes,
            server_side=True,
            on_made=self._connection_made,
            on_read=self._account,
        )
        conn.on_close.append(self._connection_closed)
        return conn

    def _connection_made(self, conn: Connection) -> None:
        if len(self.connections) >= self.limits.server_max_connections:
            if not self._refused:
                log.warning("%d connections (serverMaxConnections): refusing new ones, first %s",
                            len(self.connections), conn.remote_address)
            self._refused += 1
            conn.log_close = False
            conn.abort()
            return
        self.connections.add(conn)
        CONNECTION_EVENTS.refused(_host(conn), f"{conn.remote_address} accepted")

    def _connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self._account(conn, 0)
        for task in conn.tasks:
            self._orphans.add(task)
            task.add_done_callback(self._orphans.discard)
        if self._refused and len(self.connections) < self.limits.server_max_connections:
            log.warning("accepting connections again after refusing %d at serverMaxConnections", self._refused)
            self._refused = 0

    def _account(self, conn: Connection, buffered: int) -> None:
        """After each read: ``conn`` holds ``buffered`` bytes of frames not handled yet."""
        self._release(conn)
        if not buffered or conn.closed:
            return
        self._buffered[conn] = buffered
        self.buffered_bytes += buffered
        if self.buffered_bytes > self.limits.server_buffered_bytes_max:
            _CUT_OFF.refused(_host(conn), f"closing {conn.remote_address}: its partial frame would take the bytes "
                             f"buffered by all connections to {self.buffered_bytes}, over serverBufferedBytesMax "
                             f"{self.limits.server_buffered_bytes_max}")
            self._release(conn)
            conn.abort()

    def _release(self, conn: Connection) -> None:
        self.buffered_bytes -= self._buffered.pop(conn, 0)

    async def _sweep(self) -> None:
        """Close connections whose frame stalled or that fell silent."""
        limits = self.limits
        idle_s = limits.server_channel_max_idle_time_seconds  # 0: no idle check (Netty's IdleStateHandler)
        period = max(0.05, min(1.0, limits.server_frame_timeout_seconds / 4, idle_s / 4 if idle_s else 1.0))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            stalled = [c for c in self._buffered if c.partial_since is not None and not c.write_paused
                       and now - c.partial_since > limits.server_frame_timeout_seconds]
            for conn in stalled:
                _CUT_OFF.refused(_host(conn), f"closing {conn.remote_address}: a frame not whole after "
                                 f"{limits.server_frame_timeout_seconds}s (serverFrameTimeoutSeconds), "
                                 f"{self._buffered[conn]} bytes held")
                self._release(conn)
                conn.abort()
            idle = [c for c in self.connections if now - c.last_activity > idle_s and not c.closed] if idle_s else ()
            for conn in idle:
                CONNECTION_EVENTS.refused(_host(conn), f"closing {conn.remote_address}: idle for {idle_s}s "
                                          "(serverChannelMaxIdleTimeSeconds)")
                conn.abort()  # nothing left to flush after that much silence, or a peer that does not read

    async def start(self) -> None:
        """Bind and listen; ``port`` is the bound port afterwards."""
        loop = asyncio.get_running_loop()
        tls = self.tls if self.tls is not None and self.tls.enabled else None
        if tls is not None:
            self._server = await TlsServer.start(self._new_connection, self.host, self.port, tls.context(),
                                                 allow_plain=tls.mode == "permissive",
                                                 handshake_timeout_s=self.limits.server_frame_timeout_seconds,
                                                 max_pending=self.limits.server_max_connections)
        else:
            self._server = await loop.create_server(
                self._new_connection, self.host, self.port, reuse_address=True
            )
        self.port = self._server.sockets[0].getsockname()[1]
        self._sweeper = loop.create_task(self._sweep(), name=f"remoting sweep :{self.port}")
        log.info("remoting server listening on %s:%d (TLS %s)", self.host, self.port,
                 tls.mode if tls is not None else "disabled")

    async def close(self, grace: float = 5.0) -> None:
        """Stop listening, close every connection, let running handlers (of connections closed before too)
        finish for ``grace`` seconds, then cancel them."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.wait([self._sweeper])
            self._sweeper = None
        if self._server is not None:
            self._server.close()
        conns = list(self.connections)
        if conns:
            await asyncio.gather(*(conn.aclose() for conn in conns))
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        tasks = {task for conn in conns for task in conn.tasks} | self._orphans
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=grace)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)

    async def __aenter__(self) -> RemotingServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
