"""txmq.store: RocketMQ's storage engine in Python (commit log, consume queues, index, checkpoint, recovery).

See docs/storage.md for the layout and the choices made.
"""

from txmq.store.config import FlushDiskType, StoreConfig
from txmq.store.dispatcher import DispatchRequest
from txmq.store.message_store import DefaultMessageStore
from txmq.store.record import BLANK_MAGIC_CODE
from txmq.store.recovery import RecoveryReport
from txmq.store.results import (
    AppendMessageResult,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)

__all__ = [
    "BLANK_MAGIC_CODE",
    "AppendMessageResult",
    "DefaultMessageStore",
    "DispatchRequest",
    "FlushDiskType",
    "GetMessageResult",
    "GetMessageStatus",
    "PutMessageResult",
    "PutMessageStatus",
    "RecoveryReport",
    "StoreConfig",
]
