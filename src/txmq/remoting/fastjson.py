"""Maps whose keys are objects, as RocketMQ's fastjson writes them: ``{{"brokerName":"b","queueId":0,
"topic":"t"}:{...}}`` (``ConsumeStats``, ``TopicStatsTable``, ``ResetOffsetBody`` key their tables by
``MessageQueue``). Not JSON, so neither orjson nor ``json`` reads it; RocketMQ's own tools expect exactly it."""

from __future__ import annotations

import json
from typing import Any

import orjson

_DECODER = json.JSONDecoder()


def dumps(value: Any) -> bytes:
    """JSON, with each ``ObjectMap`` written with its keys as objects."""
    if isinstance(value, ObjectMap):
        return b"{" + b",".join(dumps(k) + b":" + dumps(v) for k, v in value.items) + b"}"
    if isinstance(value, dict):
        return b"{" + b",".join(orjson.dumps(str(k)) + b":" + dumps(v) for k, v in value.items()) + b"}"
    if isinstance(value, list | tuple):
        return b"[" + b",".join(dumps(v) for v in value) + b"]"
    return orjson.dumps(value)


class ObjectMap:
    """A map keyed by objects (dicts): its items in order, written by ``dumps`` with the keys as objects."""

    __slots__ = ("items",)

    def __init__(self, items: list[tuple[dict[str, Any], Any]]) -> None:
        self.items = items


def loads(data: bytes | str) -> Any:
    """fastjson's output: JSON whose object keys may be objects; such a map is returned as a list of
    ``(key dict, value)`` pairs, any other object as a dict."""
    text = data.decode() if isinstance(data, bytes) else data
    value, end = _value(text, _skip(text, 0))
    if _skip(text, end) != len(text):
        raise ValueError(f"trailing data at {end}")
    return value


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _value(text: str, i: int) -> tuple[Any, int]:
    if text.startswith("{", i):
        return _object(text, _skip(text, i + 1))
    if text.startswith("[", i):
        out: list[Any] = []
        i = _skip(text, i + 1)
        if text.startswith("]", i):
            return out, i + 1
        while True:
            item, i = _value(text, i)
            out.append(item)
            i = _skip(text, i)
            if text.startswith("]", i):
                return out, i + 1
            i = _expect(text, i, ",")
    return _DECODER.raw_decode(text, i)


def _object(text: str, i: int) -> tuple[Any, int]:
    pairs: list[tuple[Any, Any]] = []
    if text.startswith("}", i):
        return {}, i + 1
    while True:
        key, i = _value(text, i)
        i = _expect(text, _skip(text, i), ":")
        val, i = _value(text, _skip(text, i))
        pairs.append((key, val))
        i = _skip(text, i)
        if text.startswith("}", i):
            i += 1
            break
        i = _expect(text, i, ",")
    if all(isinstance(k, str) for k, _ in pairs):
        return dict(pairs), i
    return pairs, i


def _expect(text: str, i: int, char: str) -> int:
    if not text.startswith(char, i):
        raise ValueError(f"expected {char!r} at {i}")
    return _skip(text, i + 1)
