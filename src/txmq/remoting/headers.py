"""Typed access to a command's ext fields (RocketMQ's custom headers), which are all strings on the wire.

Every failure is a ``RemoteProtocolError`` naming the field, because ext fields come from the peer.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Final, TypeVar, overload

import cython

from txmq.errors import RemoteProtocolError


class Missing(enum.Enum):
    """The type of ``MISSING``: "no default given, the field is required"."""

    MISSING = enum.auto()


MISSING: Final = Missing.MISSING

_INT = re.compile(r"[+-]?[0-9]+")
_TRUE = frozenset(("true", "1"))
_FALSE = frozenset(("false", "0"))
# The booleans nearly every request carries, parsed once: a dict hit instead of ``lower()`` per field.
_BOOLS = {**dict.fromkeys(_TRUE, True), **dict.fromkeys(_FALSE, False)}
_T = TypeVar("_T")


@cython.locals(text=str, n=cython.longlong, ch=cython.Py_UCS4, size=cython.Py_ssize_t, max_digits=cython.Py_ssize_t)
def parse_int(value: str, name: str, bits: int = 64) -> int:
    """An integer as Java's ``Long.toString`` writes it (optional sign, decimal digits), within a Java ``long``
    (or ``int`` for ``bits=32``): RocketMQ's headers are typed so, and the message layout has those widths.

    Unsigned ASCII digits few enough to be in range by their count alone (nearly every header number: a send
    parses seven) are summed in one loop, compiled over the string's characters in C: no hash, no method call and
    no ``int()`` parse of a str; anything else goes through the rule below."""
    if type(value) is str:
        text = value
        size = len(text)
        max_digits = 18 if bits == 64 else 9
        if 0 < size <= max_digits:
            n = 0
            for ch in text:
                if ch < "0" or ch > "9":
                    break
                n = n * 10 + (ord(ch) - 48)
            else:
                return n
    if _INT.fullmatch(value) is None:
        raise RemoteProtocolError(f"header field {name!r} is not an integer: {value[:40]!r}")
    n2 = int(value) if len(value) <= 21 else None  # no long has more digits; int() of thousands would raise
    if n2 is None or not -(1 << (bits - 1)) <= n2 < 1 << (bits - 1):
        raise RemoteProtocolError(f"header field {name!r} is out of range for a {bits}-bit integer: {value[:40]!r}")
    return n2


def parse_int32(value: str, name: str) -> int:
    """A Java ``Integer`` header field."""
    return parse_int(value, name, 32)


def parse_bool(value: str, name: str) -> bool:
    """``true``/``false`` (any case) as Java writes it, or ``1``/``0`` (the C++ client)."""
    known = _BOOLS.get(value)
    if known is not None:
        return known
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
