"""RocketMQ's custom headers: the typed ``extFields`` of each request and response. No IO.

Each header is a dataclass whose field names are RocketMQ's camelCase names in snake_case; ``from_ext``
checks presence and types and raises ``RemoteProtocolError`` naming the bad field (the peer's fault),
``to_ext`` gives the string map the wire carries.
"""

from __future__ import annotations

import dataclasses
import re
from types import MappingProxyType
from typing import Any, ClassVar, Self, TypeVar

import cython

from txmq.errors import RemoteProtocolError
from txmq.remoting.headers import parse_bool, parse_int, parse_int32

_MISSING = dataclasses.MISSING

_H = TypeVar("_H", bound="Header")

Int32 = int  # a field Java declares ``Integer``; a plain ``int`` field is a Java ``Long``


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


# Not Cython's generated pickling: it knows no fields here, and the header dataclasses built on this base would copy
# and pickle as empty objects; without it they copy by their own slots (the send header by its own C fields).
@cython.auto_pickle(False)
@cython.cclass
class Header:
    """Base for header dataclasses; ``ALIASES`` maps a field to extra wire names it may arrive under. Compiled, an
    extension type without fields (request_headers.pxd), so that the send header can be one."""

    # Class constants of extension types carry no annotation (in their body it would declare a C attribute), and
    # are read-only views.
    ALIASES = MappingProxyType[str, str]({})

    @classmethod
    def _spec(cls) -> tuple[_Field, ...]:
        """The fields with their wire names and rules, worked out once per class (a hot path: every send)."""
        spec = _SPECS.get(cls)
        if spec is None:
            spec = _SPECS[cls] = tuple(_Field(cls, f) for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        return spec

    @classmethod
    def from_ext(cls, ext: dict[str, str]) -> Self:
        """The header from a request's ext fields: absent (or, for all but plain strings, empty) fields take their
        defaults, a required one raises, the rest go through their type's parser. One pass over the spec and no
        kwargs: the send path parses a header per message, and this module is compiled (setup.py)."""
        return _parse(cls, _SPECS.get(cls) or cls._spec(), ext)

    def to_ext(self) -> dict[str, str]:
        """The ext fields on the wire: None is left out, a bool is ``true``/``false``, anything else its ``str``."""
        return _write(self, _SPECS.get(type(self)) or self._spec())


class _Field:
    """One field's wire name, alias, parser and default (C attributes when compiled: request_headers.pxd)."""

    def __init__(self, cls: type[Header], field: dataclasses.Field[Any]) -> None:
        self.name = field.name
        self.wire = _camel(field.name)
        self.alias = cls.ALIASES.get(field.name)
        self.type = str(field.type)
        self.kind = self.type.replace(" | None", "")
        self.parser = _PARSERS.get(self.kind)
        self.empty_is_absent = self.type != "str"  # the C++ client sends empty strings for unset fields
        self.required = field.default is _MISSING and field.default_factory is _MISSING
        self.default = None if field.default is _MISSING else field.default
        self.default_factory = None if field.default_factory is _MISSING else field.default_factory


def _parse(cls: type[_H], spec: tuple[_Field, ...], ext: dict[str, str]) -> _H:
    """A ``cls`` from ext fields by its spec (``Header.from_ext``): no kwargs, one pass."""
    get = ext.get
    header = cls.__new__(cls)
    for f in spec:
        value: object = get(f.wire)
        if value is None and f.alias is not None:
            value = get(f.alias)
        if value is None or (f.empty_is_absent and value == ""):
            if f.required:
                raise RemoteProtocolError(f"{cls.__name__}: missing field {f.wire}")
            value = f.default_factory() if f.default_factory is not None else f.default
        elif f.parser is not None:
            value = f.parser(value, f.wire)  # a str: it came from the ext fields
        setattr(header, f.name, value)
    return header


def _write(header: Header, spec: tuple[_Field, ...]) -> dict[str, str]:
    """``Header.to_ext`` by the header's spec."""
    out: dict[str, str] = {}
    for f in spec:
        value = getattr(header, f.name)
        if value is not None:
            out[f.wire] = ("true" if value else "false") if value.__class__ is bool else str(value)
    return out


_SPECS: dict[type, tuple[_Field, ...]] = {}
_PARSERS = {"int": parse_int, "Int32": parse_int32, "bool": parse_bool}  # the wire rules live in headers.py, once


# One per send. Compiled (setup.py), an extension type whose fields are C struct members: ``_parse_send`` stores them
# without a generic setattr each. ``cython.dataclasses`` keeps the dataclass (its fields with their types and
# defaults for the spec, repr, eq); interpreted, it is the standard library's dataclass, without slots (Cython's
# takes no ``slots``). Not declared in request_headers.pxd: there its fields' types would be lost to the spec
# (``dataclasses.fields`` gives ``object`` for them).
@cython.dataclasses.dataclass(init=False)
@cython.cclass
class SendMessageRequestHeader(Header):
    producer_group: str
    topic: str
    default_topic: str = "TBW102"
    default_topic_queue_nums: Int32 = 4
    queue_id: Int32 = -1
    sys_flag: Int32 = 0
    born_timestamp: int = 0
    flag: Int32 = 0
    properties: str = ""
    reconsume_times: Int32 = 0
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: Int32 | None = None

    # SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) carry single-letter names.
    V2_NAMES = MappingProxyType({
        "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
        "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
        "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch",
    })  # fmt: skip

    V2_LETTERS = MappingProxyType({v: k for k, v in V2_NAMES.items()})

    def __init__(self, producer_group: str, topic: str, default_topic: str = "TBW102",
                 default_topic_queue_nums: Int32 = 4, queue_id: Int32 = -1, sys_flag: Int32 = 0,
                 born_timestamp: int = 0, flag: Int32 = 0, properties: str = "", reconsume_times: Int32 = 0,
                 unit_mode: bool = False, batch: bool = False, max_reconsume_times: Int32 | None = None) -> None:
        """Written, not generated (as ``SendMessageResponseHeader``'s): type checkers do not know Cython's dataclass."""
        self.producer_group = producer_group
        self.topic = topic
        self.default_topic = default_topic
        self.default_topic_queue_nums = default_topic_queue_nums
        self.queue_id = queue_id
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.flag = flag
        self.properties = properties
        self.reconsume_times = reconsume_times
        self.unit_mode = unit_mode
        self.batch = batch
        self.max_reconsume_times = max_reconsume_times

    @classmethod
    def from_ext(cls, ext: dict[str, str]) -> Self:
        """Parsed by written code, not the spec's loop: every send parses one (``_parse_send``)."""
        return _parse_send(ext, _SEND_WIRE)

    @classmethod
    def from_v2_ext(cls, ext: dict[str, str]) -> SendMessageRequestHeader:
        """The single-letter form. A long name among the letters (no client sends one) goes the generic way, where
        the later of a letter and its long name wins; otherwise the letters are parsed by written code."""
        if not _SEND_WIRE_NAMES.isdisjoint(ext):
            names = cls.V2_NAMES
            return cls.from_ext({names.get(k, k): v for k, v in ext.items()})
        return _parse_send(ext, _SEND_V2)

    def to_v2_ext(self) -> dict[str, str]:
        letters = self.V2_LETTERS
        return {letters.get(k, k): v for k, v in self.to_ext().items()}


@cython.locals(h=SendMessageRequestHeader)
def _parse_send(ext: dict[str, str], keys: tuple[str, ...]) -> SendMessageRequestHeader:
    """``_parse`` for ``SendMessageRequestHeader`` written out field by field (a send's per-message path, compiled:
    no spec objects, no setattr by name, ``ext.get`` a C dict lookup). ``keys`` are the wire names in the spec's
    order (``_SEND_WIRE``, or the V2 letters ``_SEND_V2``); errors name the long wire name, as the generic path's do.
    It must give exactly what ``_parse`` gives: tests/remoting/test_send_header.py compares the two over every case
    that matters."""
    h = SendMessageRequestHeader.__new__(SendMessageRequestHeader)
    s = ext.get(keys[0])
    if s is None:
        raise RemoteProtocolError("SendMessageRequestHeader: missing field producerGroup")
    h.producer_group = s
    s = ext.get(keys[1])
    if s is None:
        raise RemoteProtocolError("SendMessageRequestHeader: missing field topic")
    h.topic = s
    s = ext.get(keys[2])
    h.default_topic = "TBW102" if s is None else s
    s = ext.get(keys[3])
    h.default_topic_queue_nums = 4 if not s else parse_int32(s, "defaultTopicQueueNums")
    s = ext.get(keys[4])
    h.queue_id = -1 if not s else parse_int32(s, "queueId")
    s = ext.get(keys[5])
    h.sys_flag = 0 if not s else parse_int32(s, "sysFlag")
    s = ext.get(keys[6])
    h.born_timestamp = 0 if not s else parse_int(s, "bornTimestamp")
    s = ext.get(keys[7])
    h.flag = 0 if not s else parse_int32(s, "flag")
    s = ext.get(keys[8])
    h.properties = "" if s is None else s
    s = ext.get(keys[9])
    h.reconsume_times = 0 if not s else parse_int32(s, "reconsumeTimes")
    s = ext.get(keys[10])
    h.unit_mode = False if not s else parse_bool(s, "unitMode")
    s = ext.get(keys[11])
    h.batch = False if not s else parse_bool(s, "batch")
    s = ext.get(keys[12])
    h.max_reconsume_times = None if not s else parse_int32(s, "maxReconsumeTimes")
    return h


# The send header's wire names in its spec's order, long and V2: what ``_parse_send`` reads, in that order.
_SEND_WIRE = tuple(f.wire for f in SendMessageRequestHeader._spec())
_SEND_WIRE_NAMES = frozenset(_SEND_WIRE)
_SEND_V2 = tuple(SendMessageRequestHeader.V2_LETTERS[w] for w in _SEND_WIRE)


def _parse_end(ext: dict[str, str]) -> EndTransactionRequestHeader:
    """``_parse`` for ``EndTransactionRequestHeader`` written out field by field, as ``_parse_send`` is (every
    transaction's decision parses one, compiled: no spec objects, ``ext.get`` a C dict lookup). It must give exactly
    what ``_parse`` gives: tests/remoting/test_send_header.py compares the two."""
    h = EndTransactionRequestHeader.__new__(EndTransactionRequestHeader)
    s = ext.get("producerGroup")
    if s is None:
        raise RemoteProtocolError("EndTransactionRequestHeader: missing field producerGroup")
    h.producer_group = s
    s = ext.get("tranStateTableOffset")
    if not s:
        raise RemoteProtocolError("EndTransactionRequestHeader: missing field tranStateTableOffset")
    h.tran_state_table_offset = parse_int(s, "tranStateTableOffset")
    s = ext.get("commitLogOffset")
    if not s:
        raise RemoteProtocolError("EndTransactionRequestHeader: missing field commitLogOffset")
    h.commit_log_offset = parse_int(s, "commitLogOffset")
    s = ext.get("commitOrRollback")
    if not s:
        raise RemoteProtocolError("EndTransactionRequestHeader: missing field commitOrRollback")
    h.commit_or_rollback = parse_int32(s, "commitOrRollback")
    s = ext.get("fromTransactionCheck")
    h.from_transaction_check = False if not s else parse_bool(s, "fromTransactionCheck")
    s = ext.get("msgId")
    h.msg_id = "" if s is None else s
    s = ext.get("transactionId")
    h.transaction_id = "" if s is None else s
    return h


@dataclasses.dataclass(slots=True, init=False)
class SendMessageResponseHeader(Header):
    msg_id: str
    queue_id: Int32
    queue_offset: int
    transaction_id: str | None = None
    batch_uniq_id: str | None = None

    def __init__(self, msg_id: str, queue_id: int, queue_offset: int, transaction_id: str | None = None,
                 batch_uniq_id: str | None = None) -> None:
        """Written, not generated: one per send's answer, and this module is compiled (setup.py)."""
        self.msg_id = msg_id
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.transaction_id = transaction_id
        self.batch_uniq_id = batch_uniq_id


@dataclasses.dataclass(slots=True)
class PullMessageRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: Int32
    queue_offset: int
    max_msg_nums: Int32 = 32
    sys_flag: Int32 = 0
    commit_offset: int = 0
    suspend_timeout_millis: int = 15_000
    subscription: str | None = None
    sub_version: int = 0
    expression_type: str | None = None

    FLAG_COMMIT_OFFSET: ClassVar[int] = 0x1
    FLAG_SUSPEND: ClassVar[int] = 0x2
    FLAG_SUBSCRIPTION: ClassVar[int] = 0x4
    FLAG_CLASS_FILTER: ClassVar[int] = 0x8


@dataclasses.dataclass(slots=True)
class PullMessageResponseHeader(Header):
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int = 0


@dataclasses.dataclass(slots=True)
class EndTransactionRequestHeader(Header):
    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: Int32
    from_transaction_check: bool = False
    msg_id: str = ""
    transaction_id: str = ""

    @classmethod
    def from_ext(cls, ext: dict[str, str]) -> Self:
        """Parsed by written code, not the spec's loop: every END_TRANSACTION parses one (``_parse_end``)."""
        return _parse_end(ext)  # type: ignore[return-value]


@dataclasses.dataclass(slots=True)
class CheckTransactionStateRequestHeader(Header):
    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str = ""
    transaction_id: str = ""
    offset_msg_id: str = ""


@dataclasses.dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader(Header):
    offset: int
    group: str
    delay_level: Int32 = 0
    origin_msg_id: str = ""
    origin_topic: str = ""
    unit_mode: bool = False
    max_reconsume_times: Int32 | None = None


@dataclasses.dataclass(slots=True)
class UnregisterClientRequestHeader(Header):
    client_id: str = ""
    producer_group: str = ""
    consumer_group: str = ""

    ALIASES = MappingProxyType({"client_id": "clientID"})  # RocketMQ's field is clientID


@dataclasses.dataclass(slots=True)
class GetConsumerListByGroupRequestHeader(Header):
    consumer_group: str


@dataclasses.dataclass(slots=True)
class QueryConsumerOffsetRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: Int32


@dataclasses.dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: Int32
    commit_offset: int


@dataclasses.dataclass(slots=True)
class TopicQueueRequestHeader(Header):
    """GET_MAX_OFFSET, GET_MIN_OFFSET and GET_EARLIEST_MSG_STORETIME."""

    topic: str
    queue_id: Int32


@dataclasses.dataclass(slots=True)
class SearchOffsetRequestHeader(Header):
    topic: str
    queue_id: Int32
    timestamp: int


@dataclasses.dataclass(slots=True)
class CreateTopicRequestHeader(Header):
    topic: str
    default_topic: str = "TBW102"
    read_queue_nums: Int32 = 8
    write_queue_nums: Int32 = 8
    perm: Int32 = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: Int32 = 0
    order: bool = False


@dataclasses.dataclass(slots=True)
class QueryMessageRequestHeader(Header):
    topic: str
    key: str
    max_num: Int32 = 32
    begin_timestamp: int = 0
    end_timestamp: int = 2**63 - 1


_EXPR_SPLIT = re.compile(r"\s*\|\|\s*")


def parse_tag_expression(expression: str | None) -> list[str] | None:
    """``"*"`` (or empty) → None for all tags; ``"TagA || TagB"`` → ["TagA", "TagB"]."""
    if expression is None:
        return None
    expression = expression.strip()
    if expression in ("", "*"):
        return None
    tags = [t for t in _EXPR_SPLIT.split(expression) if t]
    return tags or None
