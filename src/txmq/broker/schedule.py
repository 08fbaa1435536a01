"""Delayed messages by delay level (RocketMQ ``ScheduleMessageService``).

A message with ``DELAY=n`` is stored in ``SCHEDULE_TOPIC_XXXX`` queue ``n-1`` with its real topic and queue in
properties; one loop per broker walks each level's queue in order and re-stores every message whose delay
has passed into its real topic. Messages of one level become due in the order they were stored, so each level
only ever looks at the head of its queue. Progress per level is saved in ``config/delayOffset.json``.

A message is due ``delay`` after it was stored by the store's elapsed-time account (``txmq.store.clock``), not by
its wall-clock store timestamp: a step of the wall clock neither holds delayed messages back nor delivers them
early, and after a restart each is due where it was (the account resumes across restarts).
"""

from __future__ import annotations

import logging
from pathlib import Path

from txmq.broker.persist import read_json, write_json_atomic
from txmq.broker.wake import Wake
from txmq.message import MessageConst, MessageExt, decode_message
from txmq.store import DefaultMessageStore, GetMessageStatus
from txmq.topic import RMQ_SYS_SCHEDULE_TOPIC

log = logging.getLogger("txmq.broker")

IDLE_WAIT_S = 1.0  # the longest the loop sleeps between passes, woken or not


class ScheduleMessageService:
    def __init__(self, store: DefaultMessageStore, levels_ms: list[int], root: Path) -> None:
        self.store = store
        self.levels_ms = levels_ms
        self.path = root / "config" / "delayOffset.json"
        saved = read_json(self.path) or {}
        self.offsets: dict[int, int] = {int(k): int(v) for k, v in (saved.get("offsetTable") or {}).items()}
        self._persisted = dict(self.offsets)
        self._wake = Wake(self._records)
        store.add_append_listener(self._wake.written)
        self.delivered = 0

    @property
    def max_level(self) -> int:
        return len(self.levels_ms)

    def _records(self) -> int:
        """The records of every level's queue (``Wake.set_after_write``)."""
        return sum(self.store.get_max_offset_in_queue(RMQ_SYS_SCHEDULE_TOPIC, qid) for qid in range(self.max_level))

    def divert(self, msg: MessageExt) -> None:
        """Rewrite ``msg`` in place so that it is stored in the schedule topic until due."""
        level = min(max(1, msg.delay_time_level), self.max_level)
        msg.properties[MessageConst.DELAY_TIME_LEVEL] = str(level)
        msg.properties[MessageConst.REAL_TOPIC] = msg.topic
        msg.properties[MessageConst.REAL_QUEUE_ID] = str(msg.queue_id)
        msg.topic = RMQ_SYS_SCHEDULE_TOPIC
        msg.queue_id = level - 1
        self._wake.set_after_write()

    async def run(self) -> None:
        while True:
            next_due = await self.deliver_due()
            now = self.store.clock.elapsed_ms()
            timeout = IDLE_WAIT_S if next_due is None else max(0.01, min(IDLE_WAIT_S, (next_due - now) / 1000))
            await self._wake.wait(timeout)

    async def deliver_due(self) -> int | None:
        """Deliver every due message; return when the next one is due (the account's ms), if known."""
        next_due: int | None = None
        for level in range(1, self.max_level + 1):
            due = await self._deliver_level(level)
            if due is not None and (next_due is None or due < next_due):
                next_due = due
        return next_due

    async def _deliver_level(self, level: int) -> int | None:
        qid = level - 1
        delay_ms = self.levels_ms[level - 1]
        clock = self.store.clock
        offset = max(self.offsets.get(level, 0), self.store.get_min_offset_in_queue(RMQ_SYS_SCHEDULE_TOPIC, qid))
        while offset < self.store.get_max_offset_in_queue(RMQ_SYS_SCHEDULE_TOPIC, qid):
            got = self.store.get_message(RMQ_SYS_SCHEDULE_TOPIC, qid, offset, 32)
            if got.status != GetMessageStatus.FOUND:
                offset = max(offset + 1, got.next_begin_offset)
                continue
            for raw in got.messages:
                msg, _ = decode_message(raw)
                due_ms = clock.elapsed_of(msg.commit_log_offset, msg.store_timestamp) + delay_ms
                if due_ms > clock.elapsed_ms():
                    self.offsets[level] = offset
                    return due_ms
                result = await self.store.put_message(self._restore(msg))
                if not result.stored:  # a full disk: the message stays due, tried again in a second
                    log.warning("delayed message at level %d offset %d not delivered: %s %s", level, offset,
                                result.status.name, result.remark)
                    self.offsets[level] = offset
                    return clock.elapsed_ms() + 1000
                self.delivered += 1
                offset += 1
            self.offsets[level] = offset
        return None

    def _restore(self, msg: MessageExt) -> MessageExt:
        props = dict(msg.properties)
        topic = props.pop(MessageConst.REAL_TOPIC)
        queue_id = int(props.pop(MessageConst.REAL_QUEUE_ID, "0"))
        props.pop(MessageConst.DELAY_TIME_LEVEL, None)
        return MessageExt(topic, msg.body, props, flag=msg.flag, queue_id=queue_id, sys_flag=msg.sys_flag,
                          born_timestamp=msg.born_timestamp, born_host=msg.born_host, store_host=msg.store_host,
                          reconsume_times=msg.reconsume_times)

    def replace_offsets(self, offsets: dict[int, int]) -> None:
        """A slave takes its master's delivery progress per level (SlaveSynchronize)."""
        self.offsets = offsets

    def persist(self) -> None:
        """Write the progress per level when it moved since the last write (called every few seconds)."""
        if self.offsets != self._persisted:
            write_json_atomic(self.path, {"offsetTable": {str(k): v for k, v in self.offsets.items()}})
            self._persisted = dict(self.offsets)
