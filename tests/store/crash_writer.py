"""Child process for the crash test: appends with SYNC_FLUSH and prints each acknowledged record.

Usage: crash_writer.py STORE_DIR RUN_ID. Prints "offset queue_id queue_offset key" per acknowledged put,
flushed at once, until it is killed. The body is derived from the key so the parent can check it.
"""

from __future__ import annotations

import asyncio
import sys

from tests.store.store_helpers import make_config, msg
from txmq.store import DefaultMessageStore, FlushDiskType


def body_for(key: str) -> bytes:
    return (key.encode() + b"|") * 8


async def main(root: str, run_id: str) -> None:
    store = DefaultMessageStore(make_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH, checkpoint_interval_ms=100))
    await store.start()
    print("ready", flush=True)
    counter = 0

    async def producer(worker: int) -> None:
        nonlocal counter
        while True:
            counter += 1
            key = f"{run_id}-{worker}-{counter}"
            result = await store.put_message(msg("crash", body_for(key), queue_id=worker % 3, KEYS=key))
            if result.ok:
                a = result.append_result
                sys.stdout.write(f"{a.wrote_offset} {worker % 3} {a.logics_offset} {key}\n")
                sys.stdout.flush()

    await asyncio.gather(*(producer(w) for w in range(8)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
