"""Child process for the slave crash test: a master store and its slave, copying over HA on 127.0.0.1, in one
process; the master's wall clock steps back every seventh put (by a second, or 50 ms), the slave checkpoints every
100 ms.

Usage: crash_slave.py MASTER_DIR SLAVE_DIR. Prints "ready", then the commit-log offset of each put, flushed at once,
until it is killed.
"""

from __future__ import annotations

import asyncio
import sys

from tests.store.store_helpers import ha_config, make_config, msg, stepping_back
from txmq.launch import free_port
from txmq.store import DefaultMessageStore
from txmq.store.ha import HAClient, HAService


async def main(master_root: str, slave_root: str) -> None:
    port = free_port()
    master = DefaultMessageStore(make_config(master_root))
    await master.start()
    await HAService(master, ha_config(0, port)).start()
    slave = DefaultMessageStore(make_config(slave_root, checkpoint_interval_ms=100))
    slave.replica = True
    await slave.start()
    HAClient(slave, ha_config(1, port)).start()
    before_put = stepping_back(master.clock)
    print("ready", flush=True)
    n = 0
    while True:
        before_put(n)
        result = (await master.put_message(msg(body=b"x" * 300))).append_result
        assert result is not None
        print(result.wrote_offset, flush=True)
        n += 1
        if n % 5 == 0:
            await asyncio.sleep(0.005)  # the slave copies a frame or two meanwhile


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
