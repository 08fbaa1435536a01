"""The transaction service on a real store, for the tests in this folder."""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from txmq.broker.transaction.service import EndResult, TransactionalMessageService
from txmq.broker.transaction.state import Outcome, TransactionStateTable
from txmq.message import MessageConst, MessageExt
from txmq.store import DefaultMessageStore, PutMessageResult, PutMessageStatus, StoreConfig
from txmq.topic import RMQ_SYS_TRANS_OP_HALF_TOPIC


async def open_service(root: Path, snapshot_path: Path | None = None, **store_config: Any
                       ) -> tuple[DefaultMessageStore, TransactionalMessageService]:
    """A started store (``store_config``: StoreConfig fields beyond the defaults) and its recovered service."""
    store = DefaultMessageStore(StoreConfig(store_path_root_dir=str(root), store_host=("127.0.0.1", 10911),
                                            **store_config))
    await store.start()
    service = TransactionalMessageService(store, transaction_timeout_ms=1000, file_reserved_time_h=72,
                                          snapshot_path=snapshot_path)
    service.recover()
    return store, service


def half_msg(n: int, prefix: str = "U", queue_id: int = 0, group: str = "g") -> MessageExt:
    """Transactional message ``n`` of producer group ``group``, to topic "orders", as a producer sends it."""
    return MessageExt("orders", f"m{n}".encode(), {MessageConst.TRANSACTION_PREPARED: "true",
                                                    MessageConst.PRODUCER_GROUP: group,
                                                    MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"{prefix}{n:030d}"},
                      queue_id=queue_id, born_timestamp=int(time.time() * 1000), born_host=("127.0.0.1", 1))


async def half(service: TransactionalMessageService, n: int, prefix: str = "U", queue_id: int = 0, group: str = "g"
               ) -> tuple[int, int]:
    """Store half message ``n`` of producer group ``group``; returns (half offset, commit-log offset)."""
    r = await service.prepare_message(half_msg(n, prefix, queue_id, group))
    assert r.status == PutMessageStatus.PUT_OK and r.append_result is not None
    return r.append_result.logics_offset, r.append_result.wrote_offset


async def halves(service: TransactionalMessageService, first: int, count: int, prefix: str = "U"
                 ) -> list[tuple[int, int]]:
    """Store half messages ``first`` to ``first + count - 1`` with one write; their (half offset, commit-log offset)."""
    msgs = [half_msg(n, prefix) for n in range(first, first + count)]
    r = await service.prepare_messages(msgs)
    assert r.status == PutMessageStatus.PUT_OK
    return [(m.queue_offset, m.commit_log_offset) for m in msgs]


def end(service: TransactionalMessageService, off: int, clo: int, outcome: Outcome, group: str = "g"
        ) -> Awaitable[EndResult]:
    """A decision of producer group ``group`` for the half at (half offset, commit-log offset)."""
    return service.end_transaction(producer_group=group, half_offset=off, commit_log_offset=clo, outcome=outcome,
                                   source="test")


def later(service: TransactionalMessageService, seconds: float) -> float:
    """The service's elapsed-time account ``seconds`` from now: a check pass's ``now_s``."""
    return service.store.clock.elapsed_ms() / 1000 + seconds


class Sender:
    """A producer of every group, always online for check-back; records the half offsets it was asked about."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def send_check(self, group: str, half: MessageExt, half_offset: int) -> bool:
        self.sent.append(half_offset)
        return True

    def held_up(self, group: str) -> bool:
        return False


def lose_op_records(store: DefaultMessageStore, service: TransactionalMessageService) -> None:
    """The crash window between a commit's real messages and its op record: from now on no op record reaches the
    log, neither written alone nor after the real messages in the same put (lost with the torn tail)."""
    real_put = store.put_messages

    def without_ops(msgs: list[MessageExt]) -> Awaitable[PutMessageResult]:
        return real_put([m for m in msgs if m.topic != RMQ_SYS_TRANS_OP_HALF_TOPIC])
    store.put_messages = without_ops  # type: ignore[method-assign,assignment]

    async def no_op(op: str, offsets: list[int]) -> bool:
        return True
    service.ops.write = no_op  # type: ignore[method-assign]


def v1_snapshot(t: TransactionStateTable, half_covered: int, op_covered: int) -> bytes:
    """The snapshot of a table never trimmed, as brokers before the base wrote it ("TXMQTXS1": no base field)."""
    assert t.outcomes_base == 0
    return old_snapshot(t, half_covered, op_covered, b"TXMQTXS1")


def old_snapshot(t: TransactionStateTable, half_covered: int, op_covered: int, magic: bytes = b"TXMQTXS2",
                 wall_of: Callable[[int], int] = lambda s: s) -> bytes:
    """The snapshot as brokers before the elapsed-time account wrote it: store seconds as an unsigned 32-bit field
    (``wall_of(store second)``: the wall clock's second), and for "TXMQTXS1" no base field either."""
    body = bytearray(magic + t._SNAP_HEAD.pack(b"", half_covered, op_covered, t.outcomes_base)[8:])
    if magic == b"TXMQTXS1":
        del body[24:32]
    names = orjson.dumps(t.names)
    body += struct.pack(">I", len(names)) + names + struct.pack(">I", len(t.outcomes)) + bytes(t.outcomes)
    body += struct.pack(">I", len(t.pending))
    for half_offset, packed in t.pending.items():
        store_s, checks, topic, group = t._unpack(packed)
        body += t._SNAP_PENDING_V2.pack(half_offset, wall_of(store_s), checks, topic, group)
    body += struct.pack(">I", len(t.discarded))
    body += b"".join(t._SNAP_DISCARDED.pack(q, c) for q, c in t.discarded.items())
    return bytes(body) + zlib.crc32(body).to_bytes(4, "big")
