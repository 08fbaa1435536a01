"""TailJournal: every consume queue's buffered entries (its tail) made durable in one sequential file.

A thorough checkpoint (every ``flushConsumeQueueThoroughInterval``) makes every queue's entries durable, so that
its recovery point can pass them all. Writing each queue's tail to its own file and fsyncing it cost, with sends
spread over 80,000 queues, a write and mostly a ``close`` and an ``open`` per queue (more queue files than open
descriptors): about 12 µs of CPU a queue, a second or more a minute. The periodic thorough checkpoint writes every
tail into one file instead, fsynced once, and names it (``Checkpoint.tails``); the tails stay in memory and reach
their queues' files later, as any tail does (a page full, the write-behind bound), and a queue whose journaled
entries reach its file that way is flushed by the next checkpoint. Recovery writes the named journal's entries
into their queues' files before anything else; a journal that is missing or fails its check is ignored, and the
queues it held come out shorter than the checkpoint counted, so they are rebuilt from the log.

File ``cqtails/<seq>`` under the store's root, ``seq`` the journal's number (20 digits):

    offset  size  field
    0       4     magic       b"TXCT"
    4       4     version     1
    8       8     length      of the records that follow
    16      4     crc         zlib.crc32 of the records
    20      n     records     each: topic length (2), queue id (4), first logical offset (8), entry bytes (4),
                              the topic (UTF-8), the packed entries (20 bytes each, as in the queue's files)
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from txmq.fileio import write_atomic
from txmq.store.mapped_file import is_offset_name, offset_to_name

if TYPE_CHECKING:
    from txmq.store.consume_queue import ConsumeQueue

MAGIC = b"TXCT"
VERSION = 1
_HEADER = struct.Struct(">4siqI")
_RECORD = struct.Struct(">HiqI")
DIRECTORY = "cqtails"


@dataclass(eq=False)
class TailJournal:
    """One journal: its number, its bytes until they are on disk (``written``), then none."""

    seq: int
    blob: bytes | None = None
    written: bool = False

    def write(self, root: str) -> None:
        """Put the journal on disk, durable (any thread; a checkpoint's worker before the document naming it)."""
        if not self.written:
            assert self.blob is not None
            write_atomic(Path(path_of(root, self.seq)), self.blob)
            self.written, self.blob = True, None


def path_of(root: str, seq: int) -> str:
    return os.path.join(root, DIRECTORY, offset_to_name(seq))


def encode(queues: Iterable[ConsumeQueue]) -> bytes:
    """The journal's bytes for the tails of ``queues`` (loop thread: the tails are copied as they are now)."""
    parts: list[bytes | bytearray] = [b""]
    pack = _RECORD.pack
    for cq in queues:
        tail = cq.tail
        if tail:
            topic = cq.topic.encode()
            parts += (pack(len(topic), cq.queue_id, cq.tail_from, len(tail)), topic, tail)
    body = b"".join(parts)
    return _HEADER.pack(MAGIC, VERSION, len(body), zlib.crc32(body)) + body


def read(root: str, seq: int) -> tuple[list[tuple[str, int, int, bytes]] | None, str | None]:
    """The records (topic, queue id, first logical offset, packed entries) of journal ``seq``, or None and why."""
    path = path_of(root, seq)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        return None, f"consume-queue tails journal {path} cannot be read ({exc.strerror})"
    if len(raw) < _HEADER.size:
        return None, f"consume-queue tails journal {path} is truncated"
    magic, version, length, crc = _HEADER.unpack_from(raw)
    body = memoryview(raw)[_HEADER.size :]
    if magic != MAGIC or version != VERSION or length != len(body) or zlib.crc32(body) != crc:
        return None, f"consume-queue tails journal {path} fails its magic, version, length or CRC check"
    return list(_records(body)), None


def _records(body: memoryview) -> Iterator[tuple[str, int, int, bytes]]:
    at = 0
    while at < len(body):
        topic_len, queue_id, first, size = _RECORD.unpack_from(body, at)
        at += _RECORD.size
        topic = bytes(body[at : at + topic_len]).decode()
        at += topic_len
        yield topic, queue_id, first, bytes(body[at : at + size])
        at += size


def numbers(root: str) -> list[int]:
    """The numbers of the journals on disk, in order."""
    with contextlib.suppress(FileNotFoundError):
        names = os.listdir(os.path.join(root, DIRECTORY))
        return sorted(int(name) for name in names if is_offset_name(name))
    return []


def remove_below(root: str, seq: int, keep: int | None) -> None:
    """Delete the journals numbered below ``seq``, but ``keep``: no checkpoint on disk names them any more."""
    for n in numbers(root):
        if n < seq and n != keep:
            with contextlib.suppress(OSError):
                os.unlink(path_of(root, n))
