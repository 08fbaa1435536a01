"""Op records (RocketMQ's op half queue, ``RMQ_SYS_TRANS_OP_HALF_TOPIC``): a check never rewrites the half
message; op records carry outcomes and check counts for many transactions at once (body: comma-separated half
offsets, property ``TXMQ_OP``: COMMIT, ROLLBACK, DISCARD, RESUME or CHECK)."""

from __future__ import annotations

import asyncio
import logging

from txmq.message import MessageConst, MessageExt
from txmq.store import DefaultMessageStore, PutMessageResult
from txmq.topic import RMQ_SYS_TRANS_OP_HALF_TOPIC

log = logging.getLogger("txmq.transaction")

OP_PROPERTY = "TXMQ_OP"
REMOVE_TAG = "d"


class OpQueue:
    """Writes op records: the ones asked for in one loop iteration share one put."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        self._queue: dict[str, list[int]] = {}  # op records asked for in this loop iteration
        self._written: asyncio.Future[bool] | None = None

    async def write(self, op: str, half_offsets: list[int]) -> bool:
        """Record ``op`` for ``half_offsets``; return once the store answered, whether it stored the record (a
        full disk refuses it). The ops asked for in one loop iteration share one write: one record per kind, in
        the order the kinds were first asked for."""
        if not half_offsets:
            return True
        self._queue.setdefault(op, []).extend(half_offsets)
        if self._written is None:
            self._written = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(self._flush)
        return await asyncio.shield(self._written)

    def messages(self, offsets_by_op: dict[str, list[int]]) -> list[MessageExt]:
        """One op record per kind with half offsets, in the order of ``offsets_by_op``."""
        now = self.store.clock.wall_ms()
        return [MessageExt(RMQ_SYS_TRANS_OP_HALF_TOPIC, ",".join(map(str, offsets)).encode(),
                           {MessageConst.TAGS: REMOVE_TAG, OP_PROPERTY: op}, queue_id=0, born_timestamp=now,
                           store_host=self.store.config.store_host) for op, offsets in offsets_by_op.items() if offsets]

    def _flush(self) -> None:
        queue, written = self._queue, self._written
        self._queue, self._written = {}, None
        msgs = self.messages(queue)

        def done(task: asyncio.Future[PutMessageResult]) -> None:
            assert written is not None
            if task.cancelled():
                written.cancel()
            elif task.exception() is not None:
                written.set_exception(task.exception())  # type: ignore[arg-type]
            else:
                result = task.result()
                if not result.stored:
                    log.error("op records %s not stored: %s %s", list(queue), result.status.name, result.remark)
                written.set_result(result.stored)

        asyncio.ensure_future(self.store.put_messages(msgs)).add_done_callback(done)


def op_offsets(op: MessageExt) -> list[int]:
    """The half offsets an op record names (none, with one log line, when its body is unreadable)."""
    try:
        return [int(x) for x in op.body.decode().split(",") if x]
    except ValueError:
        log.error("unreadable op record at %d ignored", op.commit_log_offset)
        return []
