"""Message filters at the broker (RocketMQ's ``ExpressionType`` and ``ExpressionMessageFilter``): a TAG
expression tests the tag hash in each consume-queue entry, a SQL92 expression the properties of each record read
from the commit log. A message either refuses is never sent to the consumer.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from txmq.filter.sql import SqlFilterError, Unknown, compile_root, compile_sql
from txmq.message import HEAD_SIZE, java_string_hash, string_to_properties
from txmq.remoting.request_headers import parse_tag_expression

__all__ = ["ExpressionType", "FilterRefused", "MessageFilter", "SqlFilterError", "build_filter", "compile_sql",
           "tags_filter", "wire_properties"]

_BODY_LENGTH_AT = HEAD_SIZE - 4  # BODYLENGTH, the fixed header's last field
_INT = struct.Struct(">i").unpack_from
_SHORT = struct.Struct(">H").unpack_from


class ExpressionType:
    """A subscription's ``expressionType`` (RocketMQ: TAG by default, SQL92)."""

    TAG = "TAG"
    SQL92 = "SQL92"


class FilterRefused(ValueError):
    """A subscription the broker will not filter by: SQL92 with ``enablePropertyFilter=false`` (``disabled``),
    an unknown expression type, or an expression that does not parse (its message says where)."""

    def __init__(self, message: str, *, disabled: bool = False) -> None:
        super().__init__(message)
        self.disabled = disabled


@dataclass(frozen=True, slots=True)
class MessageFilter:
    """The two tests of one subscription; None passes everything."""

    tags: Callable[[int], bool] | None = None  # a consume-queue entry's tag hash
    record: Callable[[bytes], bool] | None = None  # a record in wire form


def tags_filter(expression: str | None) -> Callable[[int], bool] | None:
    """The tag-hash test of a TAG expression (``TagA || TagB``; ``*`` passes all)."""
    tags = parse_tag_expression(expression)
    if tags is None:
        return None
    return {java_string_hash(t) for t in tags}.__contains__


def wire_properties(wire: bytes) -> dict[str, str]:
    """The properties of a message in wire form (``encode_message``): after its body and its topic."""
    pos = HEAD_SIZE + _INT(wire, _BODY_LENGTH_AT)[0]
    pos += 1 + wire[pos]
    end = pos + 2 + _SHORT(wire, pos)[0]
    return string_to_properties(wire[pos + 2 : end].decode())


def _record_test(root: Callable[[dict[str, str]], bool | None]) -> Callable[[bytes], bool]:
    """One call per record on the pull path: read the properties, evaluate; only TRUE selects."""

    def record(wire: bytes) -> bool:
        try:
            return root(wire_properties(wire)) is True
        except (Unknown, UnicodeDecodeError):  # not comparable, or properties that are not UTF-8: not selected
            return False

    return record


def build_filter(expression_type: str | None, expression: str | None, *, sql_enabled: bool) -> MessageFilter:
    """The filter of a subscription; raises ``FilterRefused``. A SQL92 expression is compiled once and kept
    (``CompiledCache``, refusals too): each pull or heartbeat that names it again finds it compiled."""
    kind = (expression_type or ExpressionType.TAG).upper()
    if kind == ExpressionType.TAG:
        return MessageFilter(tags=tags_filter(expression))
    if kind != ExpressionType.SQL92:
        raise FilterRefused(f"expression type {expression_type!r} is not supported (TAG or SQL92)")
    if not sql_enabled:
        raise FilterRefused("The broker does not support consumer to filter message by SQL92 "
                            "(enablePropertyFilter=false)", disabled=True)
    try:
        return MessageFilter(record=_record_test(compile_root(expression or "")))
    except SqlFilterError as exc:
        raise FilterRefused(str(exc)) from None
