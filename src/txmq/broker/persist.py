"""Config files as JSON (RocketMQ's ``ConfigManager``), replaced atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from txmq.fileio import write_atomic


def write_json_atomic(path: Path, data: Any) -> None:
    write_atomic(path, orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))


def read_json(path: Path) -> Any | None:
    """The file's JSON, or None when it is missing. A corrupt file raises: configs are not derived data."""
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
