"""Typed access to a command's ext fields (RocketMQ's custom headers), which are all strings on the wire.

Every failure is a ``RemoteProtocolError`` naming the field, because ext fields come from the peer.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Final, TypeVar, overload

from txmq.errors import RemoteProtocolError


class Missing(enum.Enum):
    """The type of ``MISSING``: "no default given, the field is required"."""

    MISSING = enum.auto()


MISSING: Final = Missing.MISSING

_INT = re.compile(r"[+-]?[0-9]+")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_TRUE = frozenset(("true", "1"))
_FALSE = frozenset(("false", "0"))
_T = TypeVar("_T")


def parse_int(value: str, name: str) -> int:
    """An integer as Java's ``Long.toString`` writes it (optional sign, decimal digits), within a Java long:
    a bigger one cannot come from a RocketMQ client, and stored (a consumer offset) it broke every later JSON
    write of the table it sits in."""
    if _INT.fullmatch(value) is None:
        raise RemoteProtocolError(f"header field {name!r} is not an integer: {value[:40]!r}")
    number = int(value)
    if not _LONG_MIN <= number <= _LONG_MAX:
        raise RemoteProtocolError(f"header field {name!r} is outside the 64-bit range: {value[:40]!r}")
    return number


def parse_bool(value: str, name: str) -> bool:
    """``true``/``false`` (any case) as Java writes it, or ``1``/``0`` (the C++ client)."""
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise RemoteProtocolError(f"header field {name!r} is not a boolean: {value[:40]!r}")


def _absent(name: str, default: _T | Missing) -> _T:
    if default is MISSING:
        raise RemoteProtocolError(f"missing header field {name!r}")
    return default


@overload
def get_str(fields: Mapping[str, str], name: str) -> str: ...
@overload
def get_str(fields: Mapping[str, str], name: str, default: _T) -> str | _T: ...
def get_str(fields: Mapping[str, str], name: str, default: object = MISSING) -> object:
    """A string field; ``RemoteProtocolError`` when absent and no default is given."""
    value = fields.get(name)
    if value is None:
        return _absent(name, default)
    return value


@overload
def get_int(fields: Mapping[str, str], name: str) -> int: ...
@overload
def get_int(fields: Mapping[str, str], name: str, default: _T) -> int | _T: ...
def get_int(fields: Mapping[str, str], name: str, default: object = MISSING) -> object:
    """An integer field written as Java's ``Long.toString`` does (optional sign, decimal digits).

    An empty string counts as absent: the C++ client sends empty strings for unset fields.
    """
    value = fields.get(name)
    if value is None or value == "":
        return _absent(name, default)
    return parse_int(value, name)


@overload
def get_bool(fields: Mapping[str, str], name: str) -> bool: ...
@overload
def get_bool(fields: Mapping[str, str], name: str, default: _T) -> bool | _T: ...
def get_bool(fields: Mapping[str, str], name: str, default: object = MISSING) -> object:
    """A boolean field: ``true``/``false`` (any case) as Java writes it, or ``1``/``0`` (C++ client).

    An empty string counts as absent.
    """
    value = fields.get(name)
    if value is None or value == "":
        return _absent(name, default)
    return parse_bool(value, name)
