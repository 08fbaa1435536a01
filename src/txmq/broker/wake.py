"""The wake-up of a background loop (check-back, delay levels, timers) that no wake can slip past.

A loop that clears its event after a pass loses a wake set during that pass: the work it announced then waits for
the loop's timeout. ``Wake.wait`` clears the event as it returns, before the caller's pass, so a wake set at any
moment after that makes the next ``wait`` return at once.
"""

from __future__ import annotations

import asyncio
import contextlib


class Wake:
    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._after_write = False

    def set(self) -> None:
        """Ask the loop for a pass now (or right after the one running)."""
        self._event.set()

    def set_after_write(self) -> None:
        """Ask for a pass once the put being asked for now is written: the store writes puts in groups, after the
        step that asked, and a pass before that would find nothing of it. Needs ``written`` as the store's append
        listener."""
        self._after_write = True

    def written(self, end: int) -> None:
        """The store's append listener: a group of puts is in the log and its consume queues."""
        if self._after_write:
            self._after_write = False
            self._event.set()

    async def wait(self, timeout_s: float) -> bool:
        """Wait for a wake or ``timeout_s``, then take the wake: True when woken, False on the timeout."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._event.wait()
        woken = self._event.is_set()
        self._event.clear()
        return woken
