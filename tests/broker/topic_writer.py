"""Child process for the topic crash test: creates topics one after another and prints each name once its
creation returned, until it is killed. Usage: topic_writer.py ROOT RUN_ID."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from txmq.broker.topic_config_manager import TopicConfigManager
from txmq.topic import TopicConfig


async def main(root: str, run_id: str) -> None:
    manager = TopicConfigManager(Path(root), auto_create=True, default_queue_nums=8, delay_levels=18)
    print("ready", flush=True)
    i = 0
    while True:
        name = f"{run_id}_t{i}"
        if i % 7 == 3:  # some changes are batches (retry topics of a heartbeat)
            created = manager.create_all_absent([f"{name}_a", f"{name}_b"], 1)
            await manager.durable(created[0])
            sys.stdout.write("".join(f"{t}\n" for t in created))
        else:
            await manager.update(TopicConfig(name, 8, 8))
            sys.stdout.write(f"{name}\n")
        sys.stdout.flush()
        i += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
