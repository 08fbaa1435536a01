"""Checkpoints take at most a tenth of the time: one that is slow (its fsyncs cover many files, or the disk is
slow) is followed by a longer wait, so each of its fsyncs covers more writes. The disk is made slow by replacing
``fsync_fd`` (every fsync the store makes goes through it)."""

from __future__ import annotations

import asyncio
import time

import txmq.store.mapped_file as mapped_file
from tests.store.store_helpers import make_config, msg, run
from txmq.store import DefaultMessageStore

FSYNC_S = 0.02
QUEUES = 10
RUN_S = 4.0


def test_a_slow_checkpoint_is_followed_by_a_longer_wait(root, monkeypatch):
    real = mapped_file.fsync_fd

    def slow_fsync(fd: int) -> None:
        time.sleep(FSYNC_S)
        real(fd)

    monkeypatch.setattr(mapped_file, "fsync_fd", slow_fsync)
    # every written consume queue fsynced at every checkpoint (flushConsumeQueueLeastPages 0, and each entry written
    # to its file at once: a tail would go to the checkpoint's tails journal instead), as this test's slow
    # checkpoints need
    config = make_config(root, checkpoint_interval_ms=20, flush_consume_queue_least_pages=0,
                         consume_queue_write_behind_bytes=0)

    async def main() -> tuple[int, int]:
        async with DefaultMessageStore(config) as store:
            began = time.monotonic()
            while time.monotonic() - began < RUN_S:  # every queue's file dirty at every checkpoint
                for q in range(QUEUES):
                    assert (await store.put_message(msg(f"t{q}", b"x" * 50))).ok
                await asyncio.sleep(0.01)
            return int(store.runtime_info()["checkpoints"]), store.checkpoint_offset

    checkpoints, recovery_point = run(main)
    # Each checkpoint fsyncs about 11 files (0.2 s or more): every 20 ms as configured that would be 3 to 16 in
    # 4 s (by the machine's load); at a tenth of the time a wait of 2 s or more follows each, so 2 at most.
    assert 1 <= checkpoints <= 2, checkpoints
    assert recovery_point > 0  # they still happen: recovery reads only what came after the last one
