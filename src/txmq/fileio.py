"""Atomic file replacement: readers see the old file or the new one, never half of either, also after a crash."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path


def write_atomic(path: Path, data: bytes, mode: int = 0o666) -> None:
    """Write a temp file beside ``path`` (a unique name: several processes may write the same file), fsync it,
    rename it over ``path``, and fsync the directory so the rename itself survives a crash. ``mode``: the new
    file's permissions before the umask (0o600 for secrets: never readable by others, not even for a moment)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # a full disk must not also collect one temp file per attempt
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
