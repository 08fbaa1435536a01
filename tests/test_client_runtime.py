"""``ClientRuntime.close`` with its loop blocked by a callback (a listener on the loop that does not return): the
close returns after its bounded waits instead of raising, the client's calls end with ``ClientError``, and the
loop's own thread closes the loop once the callback returns. A real loop on its real thread."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from txmq.client.runtime import ClientRuntime
from txmq.errors import ClientError


def test_close_of_a_loop_a_callback_blocks_returns_and_the_loop_closes_once_the_callback_returns(monkeypatch):
    monkeypatch.setattr(ClientRuntime, "STOP_WAIT_S", 0.3)
    runtime = ClientRuntime("blocked")
    entered, release = threading.Event(), threading.Event()

    def block() -> None:
        entered.set()
        release.wait(30)

    try:
        runtime.call_soon(block)
        assert entered.wait(5)
        began = time.monotonic()
        runtime.close()
        assert time.monotonic() - began < 5
        with pytest.raises(ClientError):
            runtime.call(asyncio.sleep(0), 1)
        assert not runtime.loop.is_closed()  # still blocked: closing it now would raise
    finally:
        release.set()
    runtime._thread.join(5)
    assert not runtime._thread.is_alive() and runtime.loop.is_closed()


def test_close_of_an_idle_loop_stops_its_thread_and_closes_it():
    runtime = ClientRuntime("idle")
    assert runtime.call(asyncio.sleep(0, "answered"), 5) == "answered"
    runtime.close()
    assert not runtime._thread.is_alive() and runtime.loop.is_closed()
