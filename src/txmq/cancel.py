"""Stopping tasks without losing a cancel.

A part stops its background tasks by cancelling each and waiting for it to end, their ``CancelledError`` expected.
Suppressing every ``CancelledError`` around that wait also swallows the waiter's own: a session whose cleanup waits
for its reporter, cancelled by a shutdown just then, would carry on into its retry loop and the shutdown would wait
for it for good. ``cancel_and_wait`` raises the waiter's own cancel and only that.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel each task (None: none) and wait for every one to end; a task's other exception is raised."""
    live = [task for task in tasks if task is not None]
    for task in live:
        task.cancel()
    for task in live:
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
