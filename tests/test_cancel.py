"""cancel_and_wait: the tasks' cancels are taken, the waiter's own is not lost."""

from __future__ import annotations

import asyncio

import pytest

from txmq.cancel import cancel_and_wait


async def _forever() -> None:
    await asyncio.Event().wait()


async def _slow_to_stop(stopping: asyncio.Event) -> None:
    """A task whose cleanup takes a while (a reporter's last write, a connection's close)."""
    try:
        await asyncio.Event().wait()
    finally:
        stopping.set()
        await asyncio.sleep(0.05)


def test_the_tasks_end_and_their_cancel_is_not_raised():
    async def go() -> list[bool]:
        tasks = [asyncio.create_task(_forever()) for _ in range(3)]
        await asyncio.sleep(0)
        await cancel_and_wait(*tasks, None)
        return [t.cancelled() for t in tasks]

    assert asyncio.run(go()) == [True, True, True]


def test_a_waiter_cancelled_while_it_waits_is_cancelled_and_does_not_run_on():
    """The shape of a session's cleanup in a retry loop: suppressing every CancelledError there swallowed the
    shutdown's cancel, and the loop ran on."""
    ran_on: list[bool] = []

    async def session() -> None:
        stopping = asyncio.Event()
        reporter = asyncio.create_task(_slow_to_stop(stopping))
        await asyncio.sleep(0)
        try:
            raise ConnectionResetError  # the connection was lost: the session cleans up
        except ConnectionResetError:
            await cancel_and_wait(reporter)
            ran_on.append(True)

    async def go() -> None:
        task = asyncio.create_task(session())
        await asyncio.sleep(0.01)  # the session waits for its reporter's cleanup now
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert ran_on == []


def test_another_exception_of_a_task_is_raised():
    async def failing() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            raise OSError("its last write failed")

    async def go() -> None:
        task = asyncio.create_task(failing())
        await asyncio.sleep(0)
        await cancel_and_wait(task)

    with pytest.raises(OSError, match="last write"):
        asyncio.run(go())
