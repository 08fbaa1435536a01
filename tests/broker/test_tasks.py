"""A part's background tasks: one-shot tasks are let go once finished, periodic ones run until stopped."""

from __future__ import annotations

import asyncio

from txmq.broker.tasks import BackgroundTasks


def test_finished_one_shot_tasks_are_let_go_and_stop_cancels_the_running_ones() -> None:
    async def main() -> None:
        tasks = BackgroundTasks()
        ticks: list[int] = []
        tasks.every(0.001, lambda: ticks.append(1), "periodic")
        for i in range(100):  # a slave's sync at each role change
            tasks.spawn(asyncio.sleep(0), f"one-shot {i}")
            await asyncio.sleep(0.001)
        tasks.spawn(asyncio.sleep(3600), "long")
        assert len(tasks._tasks) <= 3  # the periodic one, the long one, at most one one-shot not finished yet
        running = list(tasks._tasks)
        await tasks.stop()
        assert ticks and all(task.cancelled() or task.done() for task in running) and not tasks._tasks

    asyncio.run(main())
