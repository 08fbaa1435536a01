"""txmq: a transactional message broker with Apache RocketMQ's architecture."""

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
    "BrokerError",
    "ClientError",
    "CorruptRecordError",
    "InvalidMessageError",
    "LocalProtocolError",
    "Message",
    "MessageConst",
    "MessageExt",
    "MessageSysFlag",
    "RemoteProtocolError",
    "StoreError",
    "TxmqError",
]
