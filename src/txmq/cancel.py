"""Stopping tasks without losing a cancel.

A part stops its background tasks by cancelling each and waiting for it to end, their ``CancelledError`` expected.
Suppressing every ``CancelledError`` around ``await task`` also swallows the waiter's own: a session whose cleanup
waits for its reporter, cancelled by a shutdown just then, would carry on into its retry loop and the shutdown would
wait for it for good. And awaiting a task hands the waiter's cancel on to that task, which may end it without raising
it (an HA connection's accept, a telemetry stream's reader): the waiter's cancel is gone then, whatever it catches.

``cancel_and_wait`` waits with ``asyncio.wait``, whose only ``CancelledError`` is the waiter's own, and which leaves
the tasks to end their cancels: the waiter's own is raised, the tasks' never. A waiter in the cleanup of a cancel
delivered before (an application's timeout around a client's shutdown, ``asyncio.run`` cancelling its main task at
Ctrl-C, the body of an ``async with``) so waits for every task and goes on to the end of its cleanup.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel each task (None: none) and wait for every one to end; the first task's other exception is raised."""
    live = [task for task in tasks if task is not None]
    if not live:
        return
    for task in live:
        task.cancel()
    await asyncio.wait(live)
    failures = [task.exception() for task in live if not task.cancelled()]  # each retrieved: none logged as lost
    first = next((exc for exc in failures if exc is not None), None)
    if first is not None:
        raise first


async def run_to_end(task: asyncio.Future[Any]) -> None:
    """Wait for ``task`` however often the waiter is cancelled meanwhile, the task left to run (work that must finish
    once begun: a store's close), then raise the waiter's cancel, if any, or else the task's exception. Catching the
    first cancel around one wait is not enough: a second one, delivered while the handler waits, ends the waiter
    half way."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not task.cancelled():
            task.exception()  # retrieved: not logged as lost when the cancel is what is raised
        raise asyncio.CancelledError
    task.result()
