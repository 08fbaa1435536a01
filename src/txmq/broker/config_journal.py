"""A config file kept as a snapshot plus a journal of changes, so a change costs one small append, not a rewrite.

``<name>`` is the snapshot, the same JSON document the file always held (replaced atomically). ``<name>.changes``
holds the changes made since, one record a line::

    <crc32 of the JSON, 8 hex digits> <JSON document>\\n

A change is appended and fsynced before it is answered. The writes run on one thread of the journal's own, in the
order they were handed to it, and never on the broker's event loop (``append_soon``, ``replace_soon``: a future,
done once the record is durable), as an fsync can take seconds when other processes load the disk: the request
that made a change, a client's or an operator's, waits for that future while the loop serves other connections.

At open the snapshot is read and the journal replayed in order; a record that fails its CRC or does not parse at the
end of the journal is a write torn by a crash (never answered) and is dropped; one followed by valid records is
damage, skipped with a log line. The journal is then folded into a new snapshot and emptied (when the disk is full,
only its torn tail is cut off), and again whenever it holds more records than the table has entries (at least
``min_compact``), so the work of compaction stays proportional to the changes. A crash between writing the snapshot
and emptying the journal replays records the snapshot already holds (the change that folded it included: it is
appended first): records set or remove whole entries, so replaying one again changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from txmq.broker.persist import read_json, write_json_atomic
from txmq.store.mapped_file import fsync_dir

log = logging.getLogger("txmq.broker")


def encode_record(doc: Any) -> bytes:
    body = orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)
    return b"%08x %s\n" % (zlib.crc32(body), body)


def decode_records(raw: bytes) -> tuple[list[Any], int, int]:
    """The records of a journal in order, the length of its valid prefix (where a torn tail begins), and how many
    bad records were skipped before that. Each record is fdatasynced before the next is written, so a crash can
    tear only the last one; a bad record followed by a valid one is damage, and dropping what follows it would
    lose answered changes."""
    records: list[Any] = []
    pos = valid = skipped = bad = 0
    while pos < len(raw):
        end = raw.find(b"\n", pos)
        if end < 0:
            break
        record = _decode_line(raw[pos:end])
        pos = end + 1
        if record is _BAD:
            bad += 1
            continue
        records.append(record)
        valid, skipped = pos, skipped + bad
        bad = 0
    return records, valid, skipped


_BAD = object()


def _decode_line(line: bytes) -> Any:
    """One record's document, or ``_BAD`` when its CRC fails or it does not parse."""
    if len(line) < 10 or line[8:9] != b" ":
        return _BAD
    body = line[9:]
    try:
        if int(line[:8], 16) != zlib.crc32(body):
            return _BAD
        return orjson.loads(body)
    except ValueError:
        return _BAD


# Changes handed to a journal's writer and not durable yet beyond which an operator's change is refused busy: each,
# and the request waiting for it, is held in memory while a slow disk stores them (no TCP backpressure stops a
# peer sending more meanwhile).
MAX_QUEUED_CHANGES = 4096


def when_durable(durable: asyncio.Future[None], then: Callable[[], None] | None) -> None:
    """Call ``then`` once the change ``durable`` waits for is durable, whether or not its request still waits (a
    broker's stop cancels a handler that waits longer than its grace): what goes with an entry's deletion (a
    topic's queues, a group's offsets) goes whenever the deletion is stored."""
    if then is not None:
        durable.add_done_callback(lambda done: None if done.cancelled() or done.exception() else then())


class ConfigJournal:
    """The snapshot at ``path`` and its journal ``path.changes``; ``append_soon`` one change, ``compact`` to fold.
    Called from one thread (the broker's loop); the file is written only by the journal's writer thread, job after
    job."""

    def __init__(self, path: Path, min_compact: int = 1000) -> None:
        self.path = path
        self.journal_path = path.with_name(path.name + ".changes")
        self.min_compact = min_compact
        self.records = 0  # records in the journal, counting those handed to the writer
        self.dirty = False  # the journal holds bytes a compaction should fold in or drop
        self._valid = 0  # the length of the journal's valid prefix when ``load`` read it
        self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"journal {path.name}")
        # A snapshot taken before a failed change was undone holds that change: a fold whose snapshot was taken
        # with fewer undone changes than the writer has seen fail appends its record instead.
        self._failed = 0  # jobs that failed (the writer's count)
        self._undone = 0  # changes undone after their job failed (the caller's count, at most ``_failed``)
        self.queued = 0  # changes handed to the writer by ``append_soon`` and not settled yet

    def table_change(self, record: Any, what: str) -> tuple[list[Any], list[str]] | None:
        """A record of a table kept this way, ``{"put": [entry documents], "delete": [names]}``, as its puts and
        deletes; None, with a log line, when it has another shape (damage whose CRC holds, or a later version's
        record): refusing to start, or dropping the records after it, would cost the valid entries of ``what``."""
        puts = record.get("put", []) if isinstance(record, dict) else None
        deletes = record.get("delete", []) if isinstance(record, dict) else None
        if not (isinstance(puts, list) and isinstance(deletes, list) and all(isinstance(n, str) for n in deletes)):
            log.warning("%s: a record that is not a change of %s was skipped: %.200r", self.journal_path, what, record)
            return None
        return puts, deletes

    def load(self) -> tuple[Any | None, Iterator[Any]]:
        """The snapshot (None when there is none) and the journal's records to apply to it, in order."""
        snapshot = read_json(self.path)
        try:
            raw = self.journal_path.read_bytes()
        except FileNotFoundError:
            raw = b""
        records, valid, skipped = decode_records(raw)
        if skipped:
            log.error("%s: %d records failed their CRC or did not parse, with valid records after them: skipped "
                      "(damage, not a torn write)", self.journal_path, skipped)
        if valid < len(raw):
            log.warning("%s: %d bytes after record %d are torn or corrupt and were dropped (a write the crash "
                        "interrupted, never answered)", self.journal_path, len(raw) - valid, len(records))
        self.records = len(records)
        self.dirty = bool(raw)
        self._valid = valid
        return snapshot, iter(records)

    def fold_at_open(self, document: Any) -> None:
        """Fold the journal ``load`` read into ``document``. When the snapshot cannot be written (a full disk,
        often what made the broker crash) the broker still starts, from the journal as it is: only its torn tail is
        cut off, which needs no space, so no record is appended after torn bytes."""
        try:
            self.compact(document)
        except OSError as exc:
            log.warning("%s: not folded into %s (%s): the broker goes on with the journal as it is",
                        self.journal_path, self.path, exc)
            if self._valid < self.journal_path.stat().st_size:
                with open(self.journal_path, "r+b") as f:
                    f.truncate(self._valid)
                    os.fdatasync(f.fileno())

    def append_soon(self, record: Any, entries: int, snapshot: Callable[[], Any]) -> asyncio.Future[None]:
        """From the running event loop: a future done once ``record`` is durable (after every change handed to the
        writer before it), or failed with the ``OSError`` that kept it from being stored (the caller then takes the
        change out of what its snapshots hold, undone in its table or dropped from its queue, and calls
        ``undone``). The journal is folded into ``snapshot()``'s document when it outgrew ``entries``; ``snapshot``
        is called only then: a callable, so the whole table is not serialized at every change."""
        durable = asyncio.wrap_future(self._submit(record, entries, snapshot))
        self.queued += 1
        durable.add_done_callback(self._settled)
        return durable

    def _settled(self, _: asyncio.Future[None]) -> None:
        self.queued -= 1

    def busy(self) -> str | None:
        """Why one more operator's change is refused (``MAX_QUEUED_CHANGES``), or None."""
        if self.queued < MAX_QUEUED_CHANGES:
            return None
        return f"{self.queued} changes of {self.path.name} wait for the disk: change again later"

    def undone(self) -> None:
        """The change whose append failed is out of the caller's snapshots: those taken from here on may be
        folded."""
        self._undone = min(self._undone + 1, self._failed)

    def _submit(self, record: Any, entries: int, snapshot: Callable[[], Any]) -> Future[None]:
        data = encode_record(record)
        document = None
        if self.records + 1 > max(self.min_compact, entries):
            document = snapshot()
            self.records = 0
        else:
            self.records += 1
        return self._writer.submit(self._write, self._undone, data, document)

    def _write(self, undone: int, data: bytes, document: Any) -> None:
        """On the writer thread: the record, then the whole table when it is to be folded and every change that
        failed before was undone when it was taken (``undone``); a fold with no record (``compact``'s) is left for
        later then: the journal holds it all. The record is durable before the snapshot is replaced, so the change
        stands or fails by its append alone: a fold that fails after it (the snapshot not written, or the journal
        not emptied) fails no change, and the journal replayed over either snapshot gives the same table. Folding
        instead of appending, a change whose journal could not be emptied was answered as failed while the new
        snapshot held it, and a crash before the journal was emptied replayed older records over it."""
        if data:
            try:
                self._append(data)
            except BaseException:
                self._failed += 1  # a change to undo
                raise
        if document is None or undone < self._failed:
            return
        if not data:
            self._fold(document)  # ``compact``'s: its caller learns of a failure
            return
        try:
            self._fold(document)
        except OSError as exc:
            log.warning("%s: not folded into %s (%s): the journal holds the changes, and is folded later",
                        self.journal_path, self.path, exc)

    def _append(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existed = self.journal_path.exists()
        fd = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                written = os.write(fd, data)
                if written != len(data):
                    raise OSError(f"short write to {self.journal_path}")
                os.fdatasync(fd)
            except OSError:  # a full disk: a partial record must not stay as the journal's tail
                os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
        if not existed:
            fsync_dir(str(self.path.parent))
        self.dirty = True

    def compact(self, document: Any) -> None:
        """Replace the snapshot with ``document`` (the whole table), then empty the journal; after the changes
        handed to the writer before it."""
        self.records = 0
        self._writer.submit(self._write, self._undone, b"", document).result()

    def replace_soon(self, document: Any) -> asyncio.Future[None]:
        """``compact`` with a table taken from elsewhere (a slave's, its master's), from the running event loop: a
        future done once it is durable. It holds no change made here, so it is folded even when a change handed to
        the writer before it failed and is not undone yet."""
        self.records = 0
        return asyncio.wrap_future(self._writer.submit(self._fold, document))

    def close(self) -> None:
        """Write the changes handed to the writer, then stop its thread (at the broker's stop)."""
        self._writer.shutdown(wait=True)

    def _fold(self, document: Any) -> None:
        write_json_atomic(self.path, document)
        if self.dirty:
            with open(self.journal_path, "r+b") as f:
                f.truncate(0)
                os.fdatasync(f.fileno())
        self.dirty = False
