"""Java properties files with RocketMQ's camelCase keys onto dataclass fields (``brokerName`` → ``broker_name``):
``broker.conf`` for the broker, ``txmq namesrv -c`` for the name server's remoting limits."""

from __future__ import annotations

import dataclasses
import re
from typing import Any


def parse_properties(text: str) -> dict[str, str]:
    """A Java properties file as ``java.util.Properties.load`` reads it: ``key=value``, ``key: value`` or
    ``key value``; ``#``/``!`` comment lines; a line ending in an odd number of backslashes goes on with the next
    (whose leading blanks are dropped); ``\\t \\n \\r \\f \\uXXXX`` and ``\\`` before any other character."""
    out: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        line = line.lstrip(" \t\f")
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1] + next(lines, "").lstrip(" \t\f")
        key, value = _split_entry(line)
        out[_unescape(key)] = _unescape(value)
    return out


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_entry(line: str) -> tuple[str, str]:
    """The key ends at the first unescaped ``=``, ``:`` or blank; one ``=``/``:`` may follow blanks after it."""
    i = 0
    while i < len(line) and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", lambda m: chr(int(m.group(1)[1:], 16)) if len(m.group(1)) == 5
                  else _ESCAPES.get(m.group(1), m.group(1)), text, flags=re.S)


def update_fields(obj: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Set the dataclass fields of ``obj`` named by camelCase or snake_case keys, converting strings to each
    field's type; returns the entries that name no field."""
    types = {f.name: str(f.type) for f in dataclasses.fields(obj)}
    unknown = {}
    for key, raw in values.items():
        name = _snake(key)
        if name in types:
            setattr(obj, name, _convert(raw, types[name], key))
        else:
            unknown[key] = raw
    return unknown


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key.replace(".", "_")).lower()


_KINDS = {"int": "an integer", "float": "a number", "bool": "true or false"}


def _convert(raw: Any, type_name: str, key: str) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        if type_name == "bool":
            if raw.strip().lower() not in ("true", "false"):
                raise ValueError(raw)
            return raw.strip().lower() == "true"
        if type_name == "int":
            return int(raw.strip())
        if type_name == "float":
            return float(raw.strip())
    except ValueError as exc:
        raise ValueError(f"config {key}: {raw!r} is not {_KINDS.get(type_name, type_name)}") from exc
    return raw.strip()
