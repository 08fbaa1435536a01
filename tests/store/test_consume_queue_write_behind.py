"""Consume-queue entries written behind (a queue's newest entries in a bytearray tail): the store-wide bound, reads at
every boundary between the files and the tails, a deleted topic, retention and a full disk at each point where a
tail is written."""

from __future__ import annotations

import os
from pathlib import Path

from tests.store.store_helpers import make_config, msg, run
from txmq.store import DefaultMessageStore
from txmq.store.consume_queue import CQ_ENTRY_SIZE


class _CountingTails(dict):  # type: ignore[type-arg]
    """The store's tails, counting the walks over them: each walk starts at the front of the dict, over every slot
    that tails written since its last resize left there."""

    walks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        type(self).walks += 1
        return super().__iter__()


def test_passing_the_bound_walks_the_tails_once_not_once_per_tail_written(root: Path) -> None:
    """With sends spread over many queues the bound is passed with thousands of small tails, and half of them are
    written in one go. Finding the oldest tail afresh for each (``next(iter(tails))``) walks over the slots the
    tails written before it left at the front of the dict: quadratic in the tails written (at 80,000 queues,
    seconds of the loop thread for the one put that passed the bound). One walk per pass is enough."""
    queues = 400
    limit = CQ_ENTRY_SIZE * queues  # passed at the 401st put: every queue holds one entry
    config = make_config(root, consume_queue_write_behind_bytes=limit)

    async def main() -> None:
        store = DefaultMessageStore(config)
        await store.start()
        store.queues.tails = _CountingTails()
        for qid in range(queues):
            assert (await store.put_message(msg("wide", b"w", queue_id=qid))).ok
        assert store.queues.tail_bytes == limit and _CountingTails.walks == 0
        assert (await store.put_message(msg("wide", b"w", queue_id=0))).ok  # past the bound
        assert store.queues.tail_bytes <= limit // 2
        assert len(store.queues.tails) < queues // 2 + 1  # half the tails and more were written ...
        assert _CountingTails.walks <= 2  # ... in one walk
        assert store.get_max_offset_in_queue("wide", 0) == 2
        assert all(store.get_max_offset_in_queue("wide", q) == 1 for q in range(1, queues))
        await store.shutdown()

    run(main)
