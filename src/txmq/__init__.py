"""txmq: a transactional message broker with Apache RocketMQ's architecture."""

from txmq.client.admin import Admin
from txmq.client.consumer import ConsumeFromWhere, ConsumeStatus, MessageModel, PushConsumer
from txmq.client.instance import MessageQueue
from txmq.client.producer import Producer, SendResult, SendStatus
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

__all__ = [
    "Admin",
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
    "TransactionProducer",
    "TransactionSendResult",
    "TxmqError",
]
