"""RocketMQ's custom headers: the typed ``extFields`` of each request and response. No IO.

Each header is a dataclass whose field names are RocketMQ's camelCase names in snake_case; ``from_ext``
checks presence and types and raises ``RemoteProtocolError`` naming the bad field (the peer's fault),
``to_ext`` gives the string map the wire carries.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, ClassVar, Self

from txmq.errors import RemoteProtocolError
from txmq.remoting.headers import parse_bool, parse_int, parse_int32

_MISSING = dataclasses.MISSING

Int32 = int  # a field Java declares ``Integer``; a plain ``int`` field is a Java ``Long``


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


class Header:
    """Base for header dataclasses; ``ALIASES`` maps a field to extra wire names it may arrive under."""

    ALIASES: ClassVar[dict[str, str]] = {}

    @classmethod
    def _spec(cls) -> tuple[_Field, ...]:
        """The fields with their wire names and types, worked out once per class (a hot path: every send)."""
        spec = _SPECS.get(cls)
        if spec is None:
            spec = tuple(
                _Field(f.name, _camel(f.name), cls.ALIASES.get(f.name), str(f.type),
                       f.default is _MISSING and f.default_factory is _MISSING)
                for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            )
            _SPECS[cls] = spec
        return spec

    @classmethod
    def from_ext(cls, ext: dict[str, str]) -> Self:
        parse = _PARSE_FNS.get(cls)
        if parse is None:
            parse = _PARSE_FNS[cls] = _compile_from_ext(cls)
        return parse(ext)

    def to_ext(self) -> dict[str, str]:
        write = _WRITE_FNS.get(type(self))
        if write is None:
            write = _WRITE_FNS[type(self)] = _compile_to_ext(type(self))
        return write(self)


class _Field:
    __slots__ = ("alias", "kind", "name", "required", "type", "wire")

    def __init__(self, name: str, wire: str, alias: str | None, type_name: str, required: bool) -> None:
        self.name, self.wire, self.alias, self.type, self.required = name, wire, alias, type_name, required
        self.kind = type_name.replace(" | None", "")


_SPECS: dict[type, tuple[_Field, ...]] = {}


_PARSERS = {"int": parse_int, "Int32": parse_int32, "bool": parse_bool}  # the wire rules live in headers.py, once
_PARSE_FNS: dict[type, Any] = {}
_WRITE_FNS: dict[type, Any] = {}


def _compile_to_ext(cls: type[Header]) -> Any:
    """``to_ext`` for one header class as straight-line code (every answer to a send writes one): None is left
    out, a bool is ``true``/``false``, anything else its ``str``."""
    lines = ["def to_ext(self):", "    out = {}"]
    for f in cls._spec():
        lines += [f"    v = self.{f.name}", "    if v is not None:",
                  f"        out[{f.wire!r}] = ('true' if v else 'false') if v.__class__ is bool else str(v)"]
    lines.append("    return out")
    env: dict[str, Any] = {}
    exec("\n".join(lines), env)  # the source is built above from the class's own fields
    return env["to_ext"]


def _compile_from_ext(cls: type[Header]) -> Any:
    """``from_ext`` for one header class as straight-line code, written once from its fields: the send path parses
    a header per message, and a loop over field descriptions with a kwargs dict costs several times more. The
    rules are the same for every class (absent, empty, alias, required, parser by type)."""
    env: dict[str, Any] = {"cls": cls, "RemoteProtocolError": RemoteProtocolError}
    lines = ["def from_ext(ext):", "    get = ext.get"]
    args = []
    for n, (f, field) in enumerate(zip(cls._spec(), dataclasses.fields(cls), strict=True)):  # type: ignore[arg-type]
        v = f"v{n}"
        lines.append(f"    {v} = get({f.wire!r})")
        if f.alias is not None:
            lines.append(f"    if {v} is None: {v} = get({f.alias!r})")
        absent = f"{v} is None" if f.type == "str" else f"{v} is None or {v} == ''"
        lines.append(f"    if {absent}:")
        if f.required:
            lines.append(f"        raise RemoteProtocolError({cls.__name__ + ': missing field ' + f.wire!r})")
        elif field.default_factory is not _MISSING:
            env[f"d{n}"] = field.default_factory
            lines.append(f"        {v} = d{n}()")
        else:
            env[f"d{n}"] = field.default
            lines.append(f"        {v} = d{n}")
        parser = _PARSERS.get(f.kind)
        if parser is not None:
            env[f"p{n}"] = parser
            lines.append(f"    else: {v} = p{n}({v}, {f.wire!r})")
        args.append(f"{f.name}={v}")
    lines.append(f"    return cls({', '.join(args)})")
    exec("\n".join(lines), env)  # the source is built above from the class's own fields
    return env["from_ext"]


@dataclasses.dataclass(slots=True)
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
    V2_NAMES: ClassVar[dict[str, str]] = {
        "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
        "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
        "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch",
    }  # fmt: skip

    V2_LETTERS: ClassVar[dict[str, str]] = {v: k for k, v in V2_NAMES.items()}

    @classmethod
    def from_v2_ext(cls, ext: dict[str, str]) -> SendMessageRequestHeader:
        names = cls.V2_NAMES
        return cls.from_ext({names.get(k, k): v for k, v in ext.items()})

    def to_v2_ext(self) -> dict[str, str]:
        letters = self.V2_LETTERS
        return {letters.get(k, k): v for k, v in self.to_ext().items()}


@dataclasses.dataclass(slots=True)
class SendMessageResponseHeader(Header):
    msg_id: str
    queue_id: Int32
    queue_offset: int
    transaction_id: str | None = None
    batch_uniq_id: str | None = None


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
