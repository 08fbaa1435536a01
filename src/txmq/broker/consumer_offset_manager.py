"""Committed consumer offsets per ``topic@group`` and queue (RocketMQ ``ConsumerOffsetManager``).

Offsets live in memory and are written atomically to ``config/consumerOffset.json`` every
``flushConsumerOffsetInterval`` and at shutdown, as RocketMQ does: a crash can replay a few seconds of
messages (at-least-once), never skip any.
"""

from __future__ import annotations

from pathlib import Path

from txmq.broker.persist import read_json, write_json_atomic

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    def __init__(self, root: Path) -> None:
        self.path = root / "config" / "consumerOffset.json"
        self.table: dict[str, dict[int, int]] = {}
        self._dirty = False
        saved = read_json(self.path)
        if saved:
            for key, queues in (saved.get("offsetTable") or {}).items():
                self.table[key] = {int(q): int(o) for q, o in queues.items()}

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        queues = self.table.setdefault(key, {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one."""
        return self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}).get(queue_id, -1)

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self.table if k.split(TOPIC_GROUP_SEPARATOR, 1)[0] == topic]:
            del self.table[key]
            self._dirty = True

    def remove_group(self, group: str) -> None:
        for key in [k for k in self.table if k.split(TOPIC_GROUP_SEPARATOR, 1)[1] == group]:
            del self.table[key]
            self._dirty = True

    def persist(self, force: bool = False) -> None:
        if self._dirty or force:
            write_json_atomic(self.path, {"offsetTable": {k: {str(q): o for q, o in v.items()}
                                                          for k, v in self.table.items()}})
            self._dirty = False
