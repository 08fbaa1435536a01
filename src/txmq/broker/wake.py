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

    def set(self) -> None:
        """Ask the loop for a pass now (or right after the one running)."""
        self._event.set()

    async def wait(self, timeout_s: float) -> bool:
        """Wait for a wake or ``timeout_s``, then take the wake: True when woken, False on the timeout."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout_s)
        woken = self._event.is_set()
        self._event.clear()
        return woken
