"""Child process for the slave crash test: a master store and its slave, copying over HA on 127.0.0.1, in one
process; the master's wall clock steps back every seventh put (by a second, or 50 ms), the slave checkpoints every
100 ms.

Usage: crash_slave.py MASTER_DIR SLAVE_DIR. Prints "ready", then the commit-log offset of each put, flushed at once,
until it is killed.
"""

from __future__ import annotations

import asyncio
import sys

from tests.store.store_helpers import make_config, msg
from txmq.launch import free_port
from txmq.store import DefaultMessageStore
from txmq.store.ha import HAClient, HAConfig, HAService


def ha_config(broker_id: int, port: int) -> HAConfig:
    return HAConfig("C", "broker-a", broker_id, listen_port=port, master_address=f"127.0.0.1:{port}",
                    send_heartbeat_interval_ms=200, housekeeping_interval_ms=2000)


async def main(master_root: str, slave_root: str) -> None:
    port = free_port()
    master = DefaultMessageStore(make_config(master_root))
    await master.start()
    await HAService(master, ha_config(0, port)).start()
    slave = DefaultMessageStore(make_config(slave_root, checkpoint_interval_ms=100))
    slave.replica = True
    await slave.start()
    HAClient(slave, ha_config(1, port)).start()
    clock = master.clock
    mono, wall = clock.monotonic_ns, clock.wall_ns
    shift = {"mono": 0, "wall": 0}  # (not a lambda over the last one: thousands of puts)
    clock.monotonic_ns = lambda: mono() + shift["mono"]
    clock.wall_ns = lambda: wall() + shift["wall"]
    print("ready", flush=True)
    n = 0
    while True:
        shift["mono"] += 10_000_000
        shift["wall"] += 10_000_000 - (0 if n % 7 != 6 else 50_000_000 if n % 3 else 1_000_000_000)
        result = (await master.put_message(msg(body=b"x" * 300))).append_result
        assert result is not None
        print(result.wrote_offset, flush=True)
        n += 1
        if n % 5 == 0:
            await asyncio.sleep(0.005)  # the slave copies a frame or two meanwhile


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
