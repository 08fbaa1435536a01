"""Java properties files with RocketMQ's camelCase keys onto dataclass fields (``brokerName`` → ``broker_name``):
``broker.conf`` for the broker, ``txmq namesrv -c`` for the name server's remoting limits."""

from __future__ import annotations

import dataclasses
import re
from typing import Any


def parse_properties(text: str) -> dict[str, str]:
    """Java properties, the subset broker.conf files use: ``key=value`` or ``key: value``, ``#``/``!`` comments."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:]?\s*(.*)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


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
        raise ValueError(f"config {key}: {raw!r} is not a {type_name}") from exc
    return raw.strip()
