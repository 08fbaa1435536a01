"""Why the broker core refuses a request, in no protocol's words: a kind each adapter maps to its own code
(remoting's ``ResponseCode``, gRPC's ``Code``) and a message both answer with."""

from __future__ import annotations

import enum


class Kind(enum.Enum):
    """The reasons a send, a pull or a consumer's request is refused. The adapters' tables map every kind."""

    NOT_AVAILABLE = "not available"  # this broker stores nothing now (a slave)
    ILLEGAL_TOPIC = "illegal topic"  # a name that breaks TopicValidator's rules
    TOPIC_NOT_EXIST = "topic not exist"  # and not auto-created
    ILLEGAL_QUEUE = "illegal queue"  # a queue the topic does not have
    NO_PERMISSION = "no permission"  # a system topic, a topic or group closed to the request, transactions off
    BODY_TOO_LARGE = "body too large"  # maxMessageSize
    MESSAGE_ILLEGAL = "message illegal"  # a rule of the message itself (born timestamp, batch rules)
    RESERVED_PROPERTY = "reserved property"  # a property only the broker sets
    ILLEGAL_DELIVERY_TIME = "illegal delivery time"  # a timer message's: timers off, not a number, too far ahead
    BUSY = "busy"  # a bound is full: try again later
    INVALID_HANDLE = "invalid receipt handle"  # names no delivery in flight (stale, foreign, malformed)
    MESSAGE_GONE = "message gone"  # the record a request names is no longer in the log
    STORE_FAILED = "store failed"  # the store did not take a write


class Refusal(Exception):
    """A request the core refuses. Returned as a value where a check runs per send or pull (no raise), raised
    from deeper calls (a receipt handle's). ``str(refusal)`` is its message."""

    def __init__(self, kind: Kind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __repr__(self) -> str:
        return f"Refusal({self.kind.name}, {self.message!r})"
