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


def test_the_cleanup_of_a_cancelled_task_waits_for_every_task_and_goes_on():
    """A task whose cancel was delivered already (an application's timeout around a client's shutdown, Ctrl-C
    cancelling ``asyncio.run``'s main task, the body of an ``async with`` store) stops its parts in its cleanup:
    their CancelledErrors are theirs, not a new cancel of the waiter, so it waits for each and goes on to the end
    of its cleanup (closing its connections, writing its checkpoint)."""
    cleaned: list[str] = []

    async def owner(tasks: list[asyncio.Task[None]]) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await cancel_and_wait(*tasks)
            cleaned.append("after the tasks")

    async def go() -> list[bool]:
        tasks = [asyncio.create_task(_forever()), asyncio.create_task(_slow_to_stop(asyncio.Event()))]
        task = asyncio.create_task(owner(tasks))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return [t.done() for t in tasks]

    assert asyncio.run(go()) == [True, True]
    assert cleaned == ["after the tasks"]


def test_a_waiter_whose_cancel_a_task_takes_as_its_own_is_cancelled_all_the_same():
    """Cancelling a waiter cancels the task it waits for; a task that ends its own cancel without raising it (an HA
    connection's accept, a telemetry stream's reader) then returns normally, and the waiter's cancel would be lost
    with it."""
    ran_on: list[bool] = []

    async def swallows_its_cancel() -> None:
        try:
            try:
                await asyncio.Event().wait()
            finally:
                await asyncio.sleep(0.05)  # its cleanup, which the waiter's cancel cuts short
        except asyncio.CancelledError:
            pass

    async def waiter(task: asyncio.Task[None]) -> None:
        await cancel_and_wait(task)
        ran_on.append(True)

    async def go() -> None:
        inner = asyncio.create_task(swallows_its_cancel())
        await asyncio.sleep(0)
        outer = asyncio.create_task(waiter(inner))
        await asyncio.sleep(0.01)  # the waiter waits for the task's cleanup now
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer

    asyncio.run(go())
    assert ran_on == []


def test_a_cancel_asked_for_before_the_wait_began_is_raised():
    """A cancel asked for while the waiter ran (a signal handler's, between two of its steps) is delivered at its
    next wait: here, not handed on to the task it stops and lost with that task's own."""
    ran_on: list[bool] = []

    async def waiter(task: asyncio.Task[None]) -> None:
        current = asyncio.current_task()
        assert current is not None
        current.cancel()
        await cancel_and_wait(task)
        ran_on.append(True)

    async def go() -> bool:
        inner = asyncio.create_task(_forever())
        await asyncio.sleep(0)
        outer = asyncio.create_task(waiter(inner))
        with pytest.raises(asyncio.CancelledError):
            await outer
        await asyncio.sleep(0)
        return inner.cancelled()

    assert asyncio.run(go())
    assert ran_on == []
