"""One exception tree. Each class says whose fault the error is, as h11 does."""

from __future__ import annotations


class TxmqError(Exception):
    """Base of every error txmq raises."""


class LocalProtocolError(TxmqError):
    """We were asked to build or send something the protocol does not allow (our bug or our caller's)."""


class RemoteProtocolError(TxmqError):
    """A peer sent bytes that are not a valid frame, header or message (the peer's fault)."""


class StoreError(TxmqError):
    """The store cannot do what was asked: bad offset, closed store, full disk."""


class CorruptRecordError(StoreError):
    """A record failed its magic, size or CRC check; it is never returned as data."""


class InvalidMessageError(TxmqError):
    """A message or name breaks a rule (topic name, size, properties) and was refused before storing."""


class BrokerError(TxmqError):
    """A broker answered a request with a non-success response code."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"broker answered code {code}: {remark or ''}".rstrip(": "))
        self.code = code
        self.remark = remark


class ClientError(TxmqError):
    """The client could not do what was asked (no route, timeout, not started)."""
