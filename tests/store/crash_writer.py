"""Child process for the crash test: appends with SYNC_FLUSH and prints each acknowledged record.

Usage: crash_writer.py STORE_DIR RUN_ID [QUEUES]. Prints "offset queue_id queue_offset key" per acknowledged
put, flushed at once, until it is killed. With QUEUES, puts go round-robin over that many queues (a few entries
each between checkpoints, which leave them unflushed); without, each of 8 workers puts to queue worker % 3.
The body is derived from the key so the parent can check it.
"""

from __future__ import annotations

import asyncio
import sys

from tests.store.store_helpers import make_config, msg
from txmq.store import DefaultMessageStore, FlushDiskType


def body_for(key: str) -> bytes:
    return (key.encode() + b"|") * 8


async def main(root: str, run_id: str, queues: int = 0) -> None:
    # Three queues: every checkpoint flushes every written queue (flushConsumeQueueLeastPages 0), so each one moves
    # the recovery point and the parent can check that recovery reads only the tail. QUEUES: the default policy.
    least_pages = {} if queues else {"flush_consume_queue_least_pages": 0}
    store = DefaultMessageStore(make_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH, checkpoint_interval_ms=100,
                                            **least_pages))
    await store.start()
    print("ready", flush=True)
    counter = 0

    async def producer(worker: int) -> None:
        nonlocal counter
        while True:
            counter += 1
            key = f"{run_id}-{worker}-{counter}"
            qid = counter % queues if queues else worker % 3
            result = await store.put_message(msg("crash", body_for(key), queue_id=qid, KEYS=key))
            if result.ok:
                a = result.append_result
                sys.stdout.write(f"{a.wrote_offset} {qid} {a.logics_offset} {key}\n")
                sys.stdout.flush()

    await asyncio.gather(*(producer(w) for w in range(8)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:4])))
