"""MappedFile (one fixed-size segment file) and MappedFileQueue (the ordered segments of one log).

RocketMQ maps its segments into memory. txmq writes with ``os.pwrite`` and reads with ``os.pread``: the page
cache still does the caching, but the process never maps gigabytes of log, so its RSS stays small however
large the log grows, and a full disk is an ``OSError`` instead of a SIGBUS.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import ctypes
import errno
import operator
import os
import threading
from collections.abc import Iterator, Sequence

from txmq.errors import StoreError

NAME_DIGITS = 20
_SCAN_BLOCK = 4 << 20
IOV_MAX = os.sysconf("SC_IOV_MAX")  # buffers one pwritev takes (1024 on Linux); more is EINVAL


def fsync_fd(fd: int) -> None:
    """The one place the store makes data durable (tests replace it to simulate a slow disk)."""
    os.fdatasync(fd)


_LIBC = ctypes.CDLL(None, use_errno=True)


def syncfs(path: str) -> None:
    """Make everything written to the file system holding ``path`` durable with one call (syncfs(2)): a checkpoint
    with thousands of consume-queue files to flush (a stop, a thorough flush) would otherwise fsync each, and each
    fsync waits for its own journal commit."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if _LIBC.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """Make created, renamed or deleted directory entries durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def offset_to_name(offset: int) -> str:
    return str(offset).zfill(NAME_DIGITS)


def is_offset_name(name: str) -> bool:
    """A name ``offset_to_name`` makes (segments, index files, tails journals): ASCII digits only, since
    ``str.isdigit`` is true of '²' too, which ``int`` refuses (a stray file named so stopped the store opening)."""
    return len(name) == NAME_DIGITS and name.isascii() and name.isdigit()


class FdPool:
    """The open descriptors of segments that need not stay open (consume-queue files): at most ``limit``, the least
    recently used closed first and opened again at their next use. Without it a broker holds one descriptor per
    consume-queue file (8 per topic of 8 queues), and past the process's open-file limit every send and every
    accepted connection fails. A closed file's written pages stay in the page cache; ``MappedFile.flush`` of a
    pooled file fsyncs through a descriptor of its own, so the checkpoint thread never uses one that the loop
    thread may close. Used from the loop thread only."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._open: collections.OrderedDict[MappedFile, None] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def use(self, mf: MappedFile) -> None:
        """``mf`` was just opened or used: the most recently used now; close the least recently used past the
        limit."""
        self._open[mf] = None
        self._open.move_to_end(mf)
        while len(self._open) > self.limit:
            old, _ = self._open.popitem(last=False)
            old.close_fd()

    def forget(self, mf: MappedFile) -> None:
        self._open.pop(mf, None)


class MappedFile:
    """A segment: a file of exactly ``file_size`` bytes named by the offset of its first byte.

    Created sparse (``ftruncate``), so unwritten bytes read as zeros: that is how the end of the data
    in the active segment is found. Kept small (``__slots__``, the path derived when used): a broker with 80,000
    consume queues holds at least as many.
    """

    __slots__ = ("_fd", "closed", "directory", "dirty", "file_from_offset", "file_size", "pool")

    def __init__(self, directory: str, file_from_offset: int, file_size: int, *, create: bool = False,
                 pool: FdPool | None = None) -> None:
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        self.directory = directory
        self.pool = pool  # None: the descriptor stays open until close
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        path = self.path
        self._fd = os.open(path, flags, 0o644)
        try:
            if os.fstat(self._fd).st_size != file_size:
                os.ftruncate(self._fd, file_size)
        except OSError:
            os.close(self._fd)
            if create:  # no file of the wrong size left behind
                os.unlink(path)
            raise
        self.dirty = False  # written since the last flush snapshot (read and cleared on the loop thread)
        self.closed = False
        if pool is not None:
            pool.use(self)

    @property
    def path(self) -> str:
        return os.path.join(self.directory, offset_to_name(self.file_from_offset))

    @property
    def fd(self) -> int:
        """The open descriptor; a pooled file closed for room is opened again (and becomes the most recent)."""
        if self.pool is not None:
            if self._fd < 0 and not self.closed:
                self._fd = os.open(self.path, os.O_RDWR)
            self.pool.use(self)
        return self._fd

    def close_fd(self) -> None:
        """Close the descriptor for room (a pooled file); the next use opens it again."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    def write(self, parts: Sequence[bytes | bytearray | memoryview], pos: int) -> None:
        """Write ``parts`` back to back at ``pos``: one system call per ``IOV_MAX`` parts.

        A short write (the disk filled up) is completed with ``pwrite``, which then raises the ``OSError``
        (ENOSPC) that says why; the caller undoes whatever part was written.
        """
        size = sum(map(len, parts))
        if pos < 0 or pos + size > self.file_size:
            raise StoreError(f"write of {size} bytes at {pos} does not fit in {self.path}")
        self.dirty = True
        if len(parts) <= IOV_MAX:
            self._write_all(parts, size, pos)
            return
        for i in range(0, len(parts), IOV_MAX):
            chunk = parts[i : i + IOV_MAX]
            want = sum(map(len, chunk))
            self._write_all(chunk, want, pos)
            pos += want

    def _write_all(self, parts: Sequence[bytes | bytearray | memoryview], size: int, pos: int) -> None:
        written = os.pwritev(self.fd, parts, pos)
        while written < size:
            written += os.pwrite(self.fd, b"".join(parts)[written:], pos + written)

    def read(self, pos: int, size: int) -> bytes:
        size = min(size, self.file_size - pos)
        if pos < 0 or size <= 0:
            return b""
        return os.pread(self.fd, size, pos)

    def flush(self) -> None:
        if self.pool is None:
            if self._fd >= 0:
                fsync_fd(self._fd)
            return
        try:  # any thread: a descriptor of its own, as the loop thread may close the pooled one meanwhile
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:  # deleted since the snapshot: nothing left to make durable
            return
        try:
            fsync_fd(fd)
        finally:
            os.close(fd)

    def zero_from(self, pos: int) -> None:
        """Discard everything from ``pos`` to the end: shrink and regrow, so the rest becomes a zero hole."""
        os.ftruncate(self.fd, pos)
        os.ftruncate(self.fd, self.file_size)
        self.dirty = True

    def last_nonzero(self, start: int = 0) -> int:
        """Position of the last non-zero byte at or after ``start``, or -1. Skips sparse holes, so finding
        the end of the data costs little however large the file is."""
        last = -1
        pos = start
        while pos < self.file_size:
            try:
                data_at = os.lseek(self.fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    break
                raise
            hole_at = min(os.lseek(self.fd, data_at, os.SEEK_HOLE), self.file_size)
            while data_at < hole_at:
                block = self.read(data_at, min(_SCAN_BLOCK, hole_at - data_at))
                stripped = block.rstrip(b"\0")
                if stripped:
                    last = data_at + len(stripped) - 1
                data_at += len(block)
            pos = hole_at
        return last

    def close(self) -> None:
        self.closed = True
        if self.pool is not None:
            self.pool.forget(self)
        self.close_fd()

    def destroy(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


_start = operator.attrgetter("file_from_offset")


class MappedFileQueue:
    """The segments of one log in offset order. ``lock`` guards the list against the flush thread; many small
    queues (the consume queues) share one."""

    __slots__ = ("_made_in", "directory", "directory_dirty", "file_size", "files", "lock", "pool")

    def __init__(self, directory: str, file_size: int, pool: FdPool | None = None,
                 lock: threading.Lock | None = None, *, listed: bool = False) -> None:
        """``listed``: the directory was just found by listing its parent, nothing to make (at 80,000 consume
        queues the checks cost recovery a second)."""
        self.directory = directory
        self.file_size = file_size
        self.pool = pool  # the descriptors of this queue's segments are pooled (see FdPool)
        self.files: list[MappedFile] = []
        self.lock = lock if lock is not None else threading.Lock()
        if listed:
            self._made_in: tuple[str, ...] = ()
            self.directory_dirty = False
            return
        # Directories made for this queue (a new topic's consume queue): their entries in their parents must
        # be made durable too, or a crash can lose a whole queue directory with its fsynced files.
        made, path = [], directory
        while path and not os.path.isdir(path):
            made.append(path)
            path = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        self._made_in = tuple(os.path.dirname(d) for d in made)
        self.directory_dirty = bool(made)  # entries created or deleted since the last directory fsync

    def load(self, *, strict: bool = True) -> list[str]:
        """Open every segment in the directory; return one line per problem found (and fixed).

        A segment larger than the configured size means the configuration changed: ``strict`` (the commit
        log) refuses to open, otherwise (derived files) the problem is reported and the file resized.
        """
        problems: list[str] = []
        names = sorted(n for n in os.listdir(self.directory) if is_offset_name(n))
        for name in names:
            start = int(name)
            if start % self.file_size:
                problems.append(f"{self.directory}/{name}: offset not a multiple of the segment size, ignored")
                continue
            size = os.path.getsize(os.path.join(self.directory, name))
            if size > self.file_size and not strict:
                problems.append(f"{self.directory}/{name}: {size} bytes instead of {self.file_size}")
            elif size > self.file_size:
                raise StoreError(
                    f"{self.directory}/{name} has {size} bytes, more than the configured {self.file_size}: "
                    "was the segment size changed?"
                )
            if size < self.file_size:  # a crash between creating the file and sizing it
                problems.append(f"{self.directory}/{name}: {size} bytes instead of {self.file_size}, extended")
            self._append(MappedFile(self.directory, start, self.file_size, pool=self.pool))
        return problems

    def _append(self, mf: MappedFile) -> None:
        with self.lock:
            self.files.append(mf)

    def create(self, start: int) -> MappedFile:
        mf = MappedFile(self.directory, start, self.file_size, create=True, pool=self.pool)
        self._append(mf)
        self.directory_dirty = True
        return mf

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    @property
    def first(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding ``offset``, if it is still on disk. The last one first: appends and the newest reads
        fall in it, and that needs no search."""
        files = self.files
        if files:
            last = files[-1]
            if last.file_from_offset <= offset:
                return last if offset < last.file_from_offset + last.file_size else None
        i = bisect.bisect_right(files, offset, key=_start) - 1
        if i < 0:
            return None
        mf = files[i]
        return mf if offset < mf.end_offset else None

    def files_from(self, offset: int) -> Iterator[MappedFile]:
        """Segments that end after ``offset``, in order (a snapshot: safe while the list changes)."""
        with self.lock:
            snapshot = list(self.files)
        for mf in snapshot:
            if mf.end_offset > offset:
                yield mf

    def delete_files(self, doomed: list[MappedFile]) -> None:
        with self.lock:
            ids = {id(mf) for mf in doomed}
            self.files = [mf for mf in self.files if id(mf) not in ids]
        for mf in doomed:
            mf.destroy()
        if doomed:
            self.directory_dirty = True

    def truncate_from(self, offset: int) -> int:
        """Drop everything at and after ``offset``; return how many later segments were deleted."""
        later = [mf for mf in self.files if mf.file_from_offset > offset]
        self.delete_files(later)
        mf = self.find(offset)
        if mf is not None:
            mf.zero_from(offset - mf.file_from_offset)
        return len(later)

    def sync_directory(self, *, synced: bool = False) -> None:
        """Make the directory's entries durable; ``synced``: a ``syncfs`` already did, only the bookkeeping is left.
        Still dirty when an fsync fails: the next flush makes the entries durable before it counts them so."""
        if self.directory_dirty:
            self.directory_dirty = False  # first: an entry made meanwhile (another thread's) sets it again
            if not synced:
                try:
                    fsync_dir(self.directory)
                    for parent in self._made_in:
                        fsync_dir(parent)
                except BaseException:
                    self.directory_dirty = True
                    raise
            self._made_in = ()

    def close(self) -> None:
        with self.lock:
            for mf in self.files:
                mf.close()
