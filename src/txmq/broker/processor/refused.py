"""The broker core's refusals in remoting's terms: the ``ResponseCode`` that answers each kind, as RocketMQ's
processors answer the same rule."""

from __future__ import annotations

from txmq.broker.core.refusal import Kind, Refusal
from txmq.remoting.codes import ResponseCode
from txmq.remoting.command import RemotingCommand

RESPONSE_CODES: dict[Kind, int] = {
    Kind.NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    Kind.ILLEGAL_TOPIC: ResponseCode.MESSAGE_ILLEGAL,
    Kind.TOPIC_NOT_EXIST: ResponseCode.TOPIC_NOT_EXIST,
    Kind.ILLEGAL_QUEUE: ResponseCode.SYSTEM_ERROR,
    Kind.NO_PERMISSION: ResponseCode.NO_PERMISSION,
    Kind.BODY_TOO_LARGE: ResponseCode.MESSAGE_ILLEGAL,
    Kind.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    Kind.RESERVED_PROPERTY: ResponseCode.MESSAGE_ILLEGAL,
    Kind.ILLEGAL_DELIVERY_TIME: ResponseCode.MESSAGE_ILLEGAL,
    Kind.BUSY: ResponseCode.SYSTEM_BUSY,
    Kind.INVALID_HANDLE: ResponseCode.SYSTEM_ERROR,
    Kind.MESSAGE_GONE: ResponseCode.SYSTEM_ERROR,
    Kind.STORE_FAILED: ResponseCode.SYSTEM_ERROR,
}


def refused(cmd: RemotingCommand, refusal: Refusal) -> RemotingCommand:
    """The response to ``cmd`` that ``refusal`` answers."""
    return RemotingCommand.response_to(cmd, RESPONSE_CODES[refusal.kind], remark=refusal.message)
