"""A disk that fills up, for the store, broker and end-to-end tests: a real tmpfs, and a filler file that leaves
exactly as much room as a test wants."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator


@contextlib.contextmanager
def tmpfs(path: str | os.PathLike[str], size: str = "8m") -> Iterator[str]:
    """A real tmpfs of ``size`` mounted at ``path`` (made if missing) for the duration: a disk that fills up."""
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def free_bytes(path: str | os.PathLike[str]) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill_disk(path: str | os.PathLike[str], leave: int = 0) -> None:
    """(Re)allocate the file ``path``/filler so that only ``leave`` bytes stay free (delete it to free them)."""
    filler = os.path.join(path, "filler")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(filler)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, free_bytes(path) - leave)
    finally:
        os.close(fd)


def leave_for(path: str | os.PathLike[str], used_percent: float) -> int:
    """The free bytes ``fill_disk`` must leave for the disk to be ``used_percent`` used."""
    st = os.statvfs(path)
    return int(st.f_blocks * st.f_frsize * (100 - used_percent) / 100)
