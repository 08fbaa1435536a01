"""TLS on remoting ports, with RocketMQ's server modes (``tls.server.mode``):

* ``disabled``: plaintext only;
* ``permissive``: TLS and plaintext on the same port, told apart by the first byte a client sends (0x16 opens
  a TLS handshake; a remoting frame starts with its length, whose first byte is 0 for any frame under 16 MiB);
* ``enforcing``: TLS only; a plaintext client is closed at its first byte.

Both TLS modes accept connections themselves (``TlsServer``) to look at that byte, so that each refused
connection and failed handshake is logged (``RefusalLog``: at most a line per kind, host and 10 s).

Clients verify the server's certificate against ``trust_cert_path`` (RocketMQ's ``tls.client.trustCertPath``)
or the system's CAs, and its name or IP address.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from txmq.accept import accept
from txmq.cancel import cancel_and_wait
from txmq.refusals import RefusalLog

log = logging.getLogger("txmq.remoting")

MODES = ("disabled", "permissive", "enforcing")
_TLS_HANDSHAKE = 0x16
SNIFF_TIMEOUT_S = 30.0  # a client that connects and sends nothing is dropped after this


@dataclass(frozen=True, slots=True)
class TlsServerConfig:
    mode: str = "disabled"
    cert_path: str = ""
    key_path: str = ""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"tls.server.mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.mode != "disabled" and not (self.cert_path and self.key_path):
            raise ValueError(f"tls.server.mode={self.mode} needs tls.server.certPath and tls.server.keyPath")

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert_path, self.key_path)
        return ctx


def client_context(trust_cert_path: str | None = None) -> ssl.SSLContext:
    """What a client connects with: the server's certificate checked against ``trust_cert_path`` (a CA bundle)
    or, without one, the system's CAs."""
    return ssl.create_default_context(cafile=trust_cert_path or None)


def _peer_host(conn: socket.socket) -> str:
    try:
        return str(conn.getpeername()[0])
    except OSError:
        return "?"


class TlsServer:
    """A listening socket whose connections are handed to ``factory`` over TLS, or over plaintext when
    ``allow_plain`` (permissive), as each client's first byte says. Offers what ``RemotingServer`` uses of an
    ``asyncio.Server``."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], sock: socket.socket, ctx: ssl.SSLContext,
                 allow_plain: bool, handshake_timeout_s: float = SNIFF_TIMEOUT_S, max_pending: int = 4096) -> None:
        self._loop = asyncio.get_running_loop()
        # Sockets before their first byte or in their handshake are not connections of the RemotingServer yet:
        # bounded here, by the server's frame timeout and connection cap, so a peer cannot hold them forever.
        self._handshake_timeout_s = handshake_timeout_s
        self._max_pending = max_pending
        self._factory = factory
        self._ctx = ctx
        self._allow_plain = allow_plain
        self._refusals = RefusalLog(log, "TLS server refused a connection")
        self.sockets = [sock]
        self._waiting: dict[socket.socket, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self._accepting = self._loop.create_task(self._accept(sock))

    @property
    def pending(self) -> int:
        """Sockets accepted and not yet connections: waiting for their first byte or in their handshake."""
        return len(self._waiting) + len(self._tasks)

    @classmethod
    async def start(cls, factory: Callable[[], asyncio.Protocol], host: str, port: int,
                    ctx: ssl.SSLContext, allow_plain: bool, handshake_timeout_s: float = SNIFF_TIMEOUT_S,
                    max_pending: int = 4096) -> TlsServer:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
        return cls(factory, sock, ctx, allow_plain, handshake_timeout_s, max_pending)

    async def _accept(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = await accept(sock)
            except OSError as exc:
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            if self.pending >= self._max_pending:
                self._refusals.refused(_peer_host(conn), "too many connections before their handshake")
                conn.close()
                continue
            self._wait_first_byte(conn)

    def _wait_first_byte(self, conn: socket.socket) -> None:
        self._waiting[conn] = self._loop.call_later(self._handshake_timeout_s, self._drop, conn)
        self._loop.add_reader(conn.fileno(), self._readable, conn)

    def _drop(self, conn: socket.socket) -> None:
        timer = self._waiting.pop(conn, None)
        if timer is not None:
            timer.cancel()
        with contextlib.suppress(OSError, ValueError):
            self._loop.remove_reader(conn.fileno())
        conn.close()

    def _readable(self, conn: socket.socket) -> None:
        try:
            first = conn.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return
        except OSError:
            first = b""
        if not first:
            self._drop(conn)
            return
        self._waiting.pop(conn).cancel()
        self._loop.remove_reader(conn.fileno())
        ctx = self._ctx if first[0] == _TLS_HANDSHAKE else None
        if ctx is None and not self._allow_plain:
            self._refusals.refused(_peer_host(conn), "plaintext (tls.server.mode=enforcing)")
            conn.close()
            return
        task = self._loop.create_task(self._connect(conn, ctx))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, conn: socket.socket, ctx: ssl.SSLContext | None) -> None:
        host = _peer_host(conn)
        try:
            await self._loop.connect_accepted_socket(
                self._factory, conn, ssl=ctx, ssl_handshake_timeout=self._handshake_timeout_s if ctx else None)
        except (OSError, ssl.SSLError) as exc:  # a failed handshake: this client's problem only
            self._refusals.refused(host, f"TLS handshake failed: {type(exc).__name__}: {exc}")
            conn.close()
        except asyncio.CancelledError:  # the server is closing
            conn.close()
            raise

    def close(self) -> None:
        self._accepting.cancel()
        for conn in list(self._waiting):
            self._drop(conn)
        for task in self._tasks:
            task.cancel()
        self.sockets[0].close()

    async def wait_closed(self) -> None:
        """After ``close``: the accept loop and the handshakes it cancelled have ended (a handshake's own failure
        is its client's, not the close's)."""
        await cancel_and_wait(self._accepting)
        if self._tasks:
            await asyncio.wait(list(self._tasks))
