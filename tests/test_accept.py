"""The accept loops (TLS remoting port, console) on asyncio's own loop: a flood of connects queued on the listening
socket is taken a connection per loop turn, with the loop's other tasks running in between, not in one burst that
holds them until the queue is empty."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from aiohttp import web

from txmq.console.serve import Listener, listen
from txmq.refusals import RefusalLog
from txmq.remoting.tls import TlsServer

FLOOD = 100  # below the console's backlog, so that every connect is queued before the server's first turn


async def _flood_while_ticking(addr: tuple[str, int], accepted: Callable[[], int]) -> list[int]:
    """Queue FLOOD connects, then count accepted connections at every turn a ticking task gets until all are in."""
    clients = [socket.create_connection(addr) for _ in range(FLOOD)]  # blocking: the kernel queues each one
    seen: list[int] = []

    async def tick() -> None:
        while True:
            seen.append(accepted())
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    try:
        for _ in range(1000):
            if accepted() == FLOOD:
                break
            await asyncio.sleep(0.01)
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        for c in clients:
            c.close()
    assert accepted() == FLOOD
    return seen


def _run_on_asyncio_loop(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:  # not uvloop
        runner.run(main())


def test_the_tls_accept_loop_lets_other_tasks_run_during_a_flood_of_connects():
    async def go() -> None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)  # no client gets as far as a handshake here
        server = await TlsServer.start(asyncio.Protocol, "127.0.0.1", 0, ctx, allow_plain=True)
        await asyncio.sleep(0.01)  # the accept loop waits on the socket
        try:
            seen = await _flood_while_ticking(server.sockets[0].getsockname()[:2], lambda: server.pending)
        finally:
            server.close()
            await server.wait_closed()
        assert any(0 < n < FLOOD for n in seen), seen  # the ticker ran while the flood was being accepted

    _run_on_asyncio_loop(go)


@contextlib.asynccontextmanager
async def _console_listener(cap: int) -> AsyncIterator[tuple[web.Server, Listener, tuple[str, int]]]:
    """The console's listener (cap ``cap`` connections) over an aiohttp server that answers every request empty."""
    async def handler(request: web.BaseRequest) -> web.Response:
        return web.Response()

    server = web.Server(handler)
    sock = listen("127.0.0.1", 0)
    listener = Listener(server, sock, None, cap, 5.0, RefusalLog(logging.getLogger("txmq.console"), "refused"))
    await asyncio.sleep(0.01)
    try:
        yield server, listener, sock.getsockname()[:2]
    finally:
        await listener.close()
        await server.shutdown(0.1)


def test_the_console_accept_loop_lets_other_tasks_run_during_a_flood_of_connects():
    async def go() -> None:
        async with _console_listener(FLOOD * 2) as (_, listener, addr):
            seen = await _flood_while_ticking(addr, lambda: listener.open)
        assert any(0 < n < FLOOD for n in seen), seen

    _run_on_asyncio_loop(go)


def test_the_console_counts_each_connection_once_and_serves_up_to_its_cap():
    """A connection is counted as opening until aiohttp counts it, not as both for the turns in between: a flood
    of exactly the cap is served whole (counted twice, the last ones were refused at the cap)."""
    async def go() -> None:
        async with _console_listener(FLOOD) as (server, listener, addr):
            seen = await _flood_while_ticking(addr, lambda: len(server.connections))
            counted = listener.open
        assert counted == FLOOD
        assert any(0 < n < FLOOD for n in seen), seen  # accepted over many turns, each of which could double count

    _run_on_asyncio_loop(go)
