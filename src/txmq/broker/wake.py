"""The wake-up of a background loop (check-back, delay levels, timers) that no wake can slip past.

A loop that clears its event after a pass loses a wake set during that pass: the work it announced then waits for
the loop's timeout. ``Wake.wait`` clears the event as it returns, before the caller's pass, so a wake set at any
moment after that makes the next ``wait`` return at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable


class Wake:
    def __init__(self, records: Callable[[], int] | None = None) -> None:
        """``records``: how many records the queues the loop reads hold, for ``set_after_write``."""
        self._event = asyncio.Event()
        self._records = records
        self._asked = 0  # puts asked for with set_after_write whose records were not seen written yet
        self._seen = 0  # ``records()`` when last looked at

    def set(self) -> None:
        """Ask the loop for a pass now (or right after the one running)."""
        self._event.set()

    def set_after_write(self) -> None:
        """Ask for a pass once the put being asked for now (of one record in the loop's queues) is written: the
        store writes puts in groups, after the step that asked, and a pass before that would find nothing of it.
        Not at the next group written: a put asked after a wait (a COMMIT's, from a task of its own) comes in a
        later group than another sender's, whose pass would find nothing of it. Needs ``written`` as the store's
        append listener, and every put to the loop's queues asked for here: one unaccounted for would count as a
        put awaited, whose own then woke nothing."""
        assert self._records is not None, "set_after_write needs the records of the loop's queues"
        if not self._asked:
            self._seen = self._records()
        self._asked += 1

    def written(self, end: int) -> None:
        """The store's append listener: a group of puts is in the log and its consume queues. A pass when it holds
        records of the loop's queues, while puts asked for are not all seen written (one refused stays counted:
        the next records written wake the loop all the same)."""
        if not self._asked or self._records is None:
            return
        records = self._records()
        if records > self._seen:
            self._asked = max(0, self._asked - (records - self._seen))
            self._event.set()
        self._seen = records  # lower after a replica's truncation

    async def wait(self, timeout_s: float) -> bool:
        """Wait for a wake or ``timeout_s``, then take the wake: True when woken, False on the timeout."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._event.wait()
        woken = self._event.is_set()
        self._event.clear()
        return woken
