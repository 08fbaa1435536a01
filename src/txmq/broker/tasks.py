"""A part's background tasks: started by name, stopped together (each cancelled, then awaited)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from txmq.cancel import cancel_and_wait

log = logging.getLogger("txmq.broker")


async def every(period_s: float, fn: Callable[[], Awaitable[None] | None]) -> None:
    """Run ``fn`` every ``period_s`` seconds, the first time after one period; a failure is logged and the next
    run comes all the same."""
    while True:
        await asyncio.sleep(period_s)
        try:
            pending = fn()
            if pending is not None:
                await pending
        except Exception:
            log.exception("periodic %s failed", getattr(fn, "__name__", fn))


class BackgroundTasks:
    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Finished tasks are let go here: one-shot ones (a slave's sync at each role change) would otherwise pile
        up over a long-lived broker's failovers."""
        self._tasks = [task for task in self._tasks if not task.done()]
        self._tasks.append(asyncio.create_task(coro, name=name))

    def every(self, period_s: float, fn: Callable[[], Awaitable[None] | None], name: str) -> None:
        self.spawn(every(period_s, fn), name)

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks.clear()
