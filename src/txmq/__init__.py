"""txmq: a transactional message broker with Apache RocketMQ's architecture."""

from typing import TYPE_CHECKING, Any

from txmq.client.admin import Admin
from txmq.client.consumer import ConsumeFromWhere, ConsumeStatus, MessageModel, PushConsumer
from txmq.client.instance import MessageQueue
from txmq.client.producer import AsyncProducer, Producer, SendResult, SendStatus
from txmq.client.pull_consumer import PullConsumer, PullResult, PullStatus
from txmq.client.transaction import (
    EndTransactionAnswer,
    HalfMessageRef,
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)
from txmq.errors import (
    BrokerError,
    ClientError,
    CorruptRecordError,
    InvalidMessageError,
    LocalProtocolError,
    RemoteProtocolError,
    StoreError,
    TxmqError,
)
from txmq.message import Message, MessageConst, MessageExt, MessageSysFlag

if TYPE_CHECKING:
    from txmq.client.txlog import TransactionLog


def __getattr__(name: str) -> Any:
    """``TransactionLog`` is imported on first use: it needs the ``db`` extra (SQLAlchemy), the rest does not."""
    if name != "TransactionLog":
        raise AttributeError(f"module 'txmq' has no attribute {name!r}")
    try:
        from txmq.client.txlog import TransactionLog
    except ModuleNotFoundError as exc:
        raise ImportError(f"txmq.TransactionLog needs SQLAlchemy: pip install 'txmq[db]' ({exc})") from exc
    return TransactionLog


__all__ = [
    "Admin",
    "AsyncProducer",
    "BrokerError",
    "ClientError",
    "ConsumeFromWhere",
    "ConsumeStatus",
    "CorruptRecordError",
    "EndTransactionAnswer",
    "HalfMessageRef",
    "InvalidMessageError",
    "LocalProtocolError",
    "LocalTransactionState",
    "Message",
    "MessageConst",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageSysFlag",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "RemoteProtocolError",
    "SendResult",
    "SendStatus",
    "StoreError",
    "TransactionListener",
    "TransactionLog",
    "TransactionProducer",
    "TransactionSendResult",
    "TxmqError",
]
