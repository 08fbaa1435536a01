"""Atomic config and state files (RocketMQ's ``ConfigManager``): write a temp file, fsync, rename, fsync the dir."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson


def write_json_atomic(path: Path, data: Any) -> None:
    write_bytes_atomic(path, orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(path: Path) -> Any | None:
    """The file's JSON, or None when it is missing. A corrupt file raises: configs are not derived data."""
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
