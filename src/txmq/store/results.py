"""Statuses and results of puts and gets, named as in RocketMQ so the broker maps them to response codes."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import cython


class PutMessageStatus(Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # stored and dispatched, but the fsync did not finish in time
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"  # not stored: the store is shut down, the disk full, a replica
    # txmq's: in the log, but not acknowledged (a master in controller mode whose lease lapsed): the record stays,
    # a transaction's decision stands, and the client is told SERVICE_NOT_AVAILABLE
    NOT_ACKNOWLEDGED = "NOT_ACKNOWLEDGED"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"  # too large, topic too long, bad host address
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"  # an I/O error while writing

    # Enum's own __hash__ is Python code run per lookup (a send looks its status up three times: its response code
    # and ``stored``); members compare by identity, so the identity hash is the same contract, in C.
    __hash__ = object.__hash__


# Read per put: a module constant is one dict lookup, a member read off the enum passes EnumType's __getattr__ hook.
_PUT_OK = PutMessageStatus.PUT_OK

# One AppendMessageResult and one PutMessageResult per put. Compiled (setup.py), extension types (results.pxd): C
# structs, their fields set and read without attribute lookups, kept out of the cyclic collector and reused from a
# free list. ``cython.dataclasses`` keeps the dataclass's fields, repr, eq and ``dataclasses.replace`` (the standard
# library's dataclass when interpreted), with a written ``__init__``; ``__slots__`` is written out for the
# interpreted class, so the fields carry no class defaults: ``__init__`` has them.
@cython.dataclasses.dataclass(init=False)
@cython.no_gc  # C integers and a str: nothing leads back to it (results.pxd)
@cython.freelist(64)
@cython.cclass
class AppendMessageResult:
    __slots__ = ("logics_offset", "msg_id", "msg_num", "store_timestamp", "wrote_bytes", "wrote_offset")

    wrote_offset: int  # commit-log offset of the (first) record
    wrote_bytes: int  # stored bytes of all records of the put
    msg_id: str  # offset message id of the (first) record
    store_timestamp: int
    logics_offset: int  # queue offset of the (first) record
    msg_num: int

    def __init__(self, wrote_offset: int, wrote_bytes: int, msg_id: str, store_timestamp: int, logics_offset: int,
                 msg_num: int = 1) -> None:
        self.wrote_offset = wrote_offset
        self.wrote_bytes = wrote_bytes
        self.msg_id = msg_id
        self.store_timestamp = store_timestamp
        self.logics_offset = logics_offset
        self.msg_num = msg_num


@cython.dataclasses.dataclass(init=False)
@cython.no_gc  # a status member, a str and an AppendMessageResult: nothing leads back to it (results.pxd)
@cython.freelist(64)
@cython.cclass
class PutMessageResult:
    __slots__ = ("append_result", "remark", "status")

    status: PutMessageStatus
    append_result: AppendMessageResult | None
    remark: str  # why a put was refused, for the answer (a full disk says so)

    def __init__(self, status: PutMessageStatus, append_result: AppendMessageResult | None = None,
                 remark: str = "") -> None:
        self.status = status
        self.append_result = append_result
        self.remark = remark

    @property
    def ok(self) -> bool:
        return self.status is _PUT_OK

    @property
    def stored(self) -> bool:
        """In the commit log, whether or not its flush (or replication) finished in time."""
        return is_stored(self)


def is_stored(result: PutMessageResult) -> bool:
    """``result.stored``; compiled, a C function to the send path's answer (results.pxd), where the property is an
    attribute lookup and a call. Most puts are PUT_OK: that is asked first, by identity."""
    status = result.status
    return result.append_result is not None and (status is _PUT_OK or status in _STORED)


_STORED = frozenset({PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                     PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE,
                     PutMessageStatus.NOT_ACKNOWLEDGED})


class GetMessageStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # entries were there, the tag filter refused them all
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"  # entries point at deleted or unreadable records
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"  # no entry at that offset
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass
class GetMessageResult:
    status: GetMessageStatus
    messages: list[bytes] = field(default_factory=list)  # wire form, as encode_message writes it
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    queue_offsets: list[int] = field(default_factory=list)  # queue offset of each returned message
    # The reader is so far behind the log's end that its reads leave memory: a slave should serve it
    # (RocketMQ isSuggestPullingFromSlave, from accessMessageInMemoryMaxRatio).
    suggest_pulling_from_slave: bool = False

    @property
    def message_count(self) -> int:
        return len(self.messages)

    @property
    def buffer_total_size(self) -> int:
        return sum(len(m) for m in self.messages)
