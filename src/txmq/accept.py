"""Accepting connections without starving the loop.

asyncio's own loop answers ``sock_accept`` at once, without giving other tasks a turn, while connections are queued
on the listening socket: a flood of connects would hold every other task of the process (the broker's sends,
pulls, flushes) until the queue is empty. ``accept`` gives the loop a turn before each accept, so an accept loop
takes its share and no more.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any


async def accept(sock: socket.socket) -> tuple[socket.socket, Any]:
    """The next connection on the listening ``sock`` (non-blocking) and its peer's address, after a loop turn."""
    await asyncio.sleep(0)
    return await asyncio.get_running_loop().sock_accept(sock)
