"""The transaction service on a real store, for the tests in this folder."""

from __future__ import annotations

import time
from pathlib import Path

from txmq.broker.transaction.service import TransactionalMessageService
from txmq.message import MessageConst, MessageExt
from txmq.store import DefaultMessageStore, PutMessageStatus, StoreConfig


async def open_service(root: Path, snapshot_path: Path | None = None
                       ) -> tuple[DefaultMessageStore, TransactionalMessageService]:
    store = DefaultMessageStore(StoreConfig(store_path_root_dir=str(root), store_host=("127.0.0.1", 10911)))
    await store.start()
    service = TransactionalMessageService(store, transaction_timeout_ms=1000, file_reserved_time_h=72,
                                          snapshot_path=snapshot_path)
    service.recover()
    return store, service


async def half(service: TransactionalMessageService, n: int, prefix: str = "U", queue_id: int = 0
               ) -> tuple[int, int]:
    """Store half message ``n``; returns (half offset, commit-log offset)."""
    m = MessageExt("orders", f"m{n}".encode(), {MessageConst.TRANSACTION_PREPARED: "true",
                                                 MessageConst.PRODUCER_GROUP: "g",
                                                 MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"{prefix}{n:030d}"},
                   queue_id=queue_id, born_timestamp=int(time.time() * 1000), born_host=("127.0.0.1", 1))
    r = await service.prepare_message(m)
    assert r.status == PutMessageStatus.PUT_OK and r.append_result is not None
    return r.append_result.logics_offset, r.append_result.wrote_offset
