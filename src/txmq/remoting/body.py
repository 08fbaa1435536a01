"""JSON request bodies (heartbeats, queue locks, broker registrations, txmq's batched decisions).

Whatever a peer sends, reading a body gives the structure its handler expects or a ``RemoteProtocolError``
naming what is wrong (the peer's fault: one warning line, no traceback), never a ``TypeError`` or
``AttributeError`` from deep inside a handler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from txmq.errors import RemoteProtocolError

T = TypeVar("T")


def json_object(body: bytes) -> dict[str, Any]:
    """The JSON object ``body`` holds; an empty body is an empty object."""
    if not body:
        return {}
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RemoteProtocolError(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RemoteProtocolError(f"the body is a JSON {type(data).__name__}, not an object")
    return data


def read_body(body: bytes, parse: Callable[[dict[str, Any]], T], what: str) -> T:
    """``parse`` the JSON object in ``body``; a field missing or of the wrong shape is a ``RemoteProtocolError``
    naming ``what`` the body should hold."""
    return read_fields(json_object(body), parse, what)


def read_fields(data: dict[str, Any], parse: Callable[[dict[str, Any]], T], what: str) -> T:
    """``read_body`` of a JSON object already parsed (a part of a body read in two steps)."""
    try:
        return parse(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RemoteProtocolError(f"{what}: {type(exc).__name__}: {exc}") from None
