"""Committed consumer offsets per ``topic@group`` and queue (RocketMQ ``ConsumerOffsetManager``).

Offsets live in memory and are written atomically to ``config/consumerOffset.json`` every
``flushConsumerOffsetInterval`` (when one changed) and at shutdown, as RocketMQ does: a crash can replay a few
seconds of messages (at-least-once), never skip any.

The table is bounded (txmq's ``consumerOffsetMaxEntries``, one entry per topic, group and queue): a peer
cannot grow it, and the file rewritten with it, without limit. Callers commit only for topics and queues that
exist and names that are legal.
"""

from __future__ import annotations

import logging
from pathlib import Path

from txmq.broker.persist import read_json, write_json_atomic

log = logging.getLogger("txmq.broker")

TOPIC_GROUP_SEPARATOR = "@"
DEFAULT_MAX_ENTRIES = 50_000


class ConsumerOffsetManager:
    def __init__(self, root: Path, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.path = root / "config" / "consumerOffset.json"
        self.table: dict[str, dict[int, int]] = {}
        self.max_entries = max_entries
        self._dirty = False
        self._full_logged = False
        saved = read_json(self.path)
        if saved:
            for key, queues in (saved.get("offsetTable") or {}).items():
                self.table[key] = {int(q): int(o) for q, o in queues.items()}
        self.entries = sum(len(q) for q in self.table.values())

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> bool:
        """Record an offset; False (and nothing kept) when it would be a new entry beyond ``max_entries``."""
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        queues = self.table.get(key)
        if queues is None or queue_id not in queues:
            if self.entries >= self.max_entries:
                if not self._full_logged:
                    log.warning("consumer offset table full (%d entries, consumerOffsetMaxEntries): new offsets are "
                                "refused", self.entries)
                    self._full_logged = True
                return False
            queues = self.table.setdefault(key, {})
            self.entries += 1
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self._dirty = True
        return True

    def full_remark(self) -> str:
        return f"consumer offset table is full: {self.entries} offsets kept (consumerOffsetMaxEntries)"

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one."""
        return self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}).get(queue_id, -1)

    def replace_all(self, table: dict[str, dict[int, int]]) -> None:
        """A slave takes its master's offsets (SlaveSynchronize); persisted at the next period when changed."""
        if table != self.table:
            self.table = table
            self.entries = sum(len(q) for q in table.values())  # what bounds new offsets, once promoted
            self._dirty = True

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self.table if k.split(TOPIC_GROUP_SEPARATOR, 1)[0] == topic]:
            self.entries -= len(self.table.pop(key))
            self._dirty = True
            self._full_logged = False

    def remove_group(self, group: str) -> None:
        for key in [k for k in self.table if k.split(TOPIC_GROUP_SEPARATOR, 1)[1] == group]:
            self.entries -= len(self.table.pop(key))
            self._dirty = True
            self._full_logged = False

    def persist(self, force: bool = False) -> None:
        if self._dirty or force:
            write_json_atomic(self.path, {"offsetTable": {k: {str(q): o for q, o in v.items()}
                                                          for k, v in self.table.items()}})
            self._dirty = False
