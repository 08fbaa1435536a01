"""MappedFileQueue.find at every offset (the last segment is looked at before any search), and the files a consume
queue's put makes for its run (checked without properties on every run)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from txmq.store.consume_queue import CQ_ENTRY_SIZE
from txmq.store.consume_queue_store import ConsumeQueueStore
from txmq.store.mapped_file import MappedFileQueue, offset_to_name

SEGMENT = 64


def test_find_answers_the_segment_holding_each_offset_or_none(tmp_path: Path) -> None:
    """Segments at 0, 64, 128 and 192, the first two deleted afterwards: every offset from below the first kept one
    to past the end of the last finds the segment that holds it, and none where no kept segment does; an empty queue
    finds none."""
    files = MappedFileQueue(str(tmp_path / "q"), SEGMENT)
    assert files.find(0) is None
    made = [files.create(start) for start in range(0, 4 * SEGMENT, SEGMENT)]
    for offset in range(-1, 4 * SEGMENT + 2):
        mf = files.find(offset)
        want = made[offset // SEGMENT] if 0 <= offset < 4 * SEGMENT else None
        assert mf is want, offset
    files.delete_files(made[:2])
    for offset in range(-1, 4 * SEGMENT + 2):
        want = made[offset // SEGMENT] if 2 * SEGMENT <= offset < 4 * SEGMENT else None
        assert files.find(offset) is want, offset
    files.close()


def test_a_put_makes_the_files_its_run_falls_in_and_no_more(tmp_path: Path) -> None:
    """Files of 4 entries. A run of 3 makes the first file; one that fills it exactly makes none; one of 6 from there
    makes the second and third; a run that ends inside the last file made makes none: every entry reads back."""
    queues = ConsumeQueueStore(str(tmp_path), 4 * CQ_ENTRY_SIZE, threading.Lock(), 16, 1 << 20)
    cq = queues.find_or_create("T", 0)

    def files() -> list[str]:
        return sorted(os.listdir(cq.directory))

    def names(*entries: int) -> list[str]:
        return [offset_to_name(e * CQ_ENTRY_SIZE) for e in entries]

    cq.put_run(0, [(100 * i, 100, 0) for i in range(3)])
    assert files() == names(0)
    cq.put_run(3, [(300, 100, 0)])
    assert files() == names(0)
    cq.put_run(4, [(100 * i, 100, 0) for i in range(4, 10)])
    assert files() == names(0, 4, 8)
    cq.put_run(10, [(1000, 100, 0)])
    assert files() == names(0, 4, 8)
    assert cq.max_offset == 11 and queues.tail_bytes == 11 * CQ_ENTRY_SIZE
    assert [cq.entry(i) for i in range(11)] == [(100 * i, 100, 0) for i in range(11)]
    cq.write_tail()
    assert queues.tail_bytes == 0 and [cq.entry(i) for i in range(11)] == [(100 * i, 100, 0) for i in range(11)]
    cq.close()
