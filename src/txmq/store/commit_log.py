"""CommitLog: the single append-only log every message goes to first; everything else is derived from it."""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from txmq.errors import CorruptRecordError, StoreError
from txmq.message import MESSAGE_MAGIC_CODE
from txmq.store.durability import Durability
from txmq.store.mapped_file import MappedFile, MappedFileQueue
from txmq.store.record import (
    BLANK_MAGIC_CODE,
    BLANK_SIZE,
    MIN_RECORD_SIZE,
    STORE_TIMESTAMP_POS,
    TRAILER_SIZE,
    blank_marker,
    check_record,
    read_prefix,
    seal,
    set_physical_offset,
)

READ_AHEAD = 1024  # one pread fetches most records whole
SCAN_CHUNK = 4 << 20  # recovery reads the log in chunks this large
# How far before a full segment's end its BLANK marker is first looked for (it fills what the next record did not
# fit in: less than the largest record, which maxMessageSize, unbounded, may make larger than this)
BLANK_SEARCH_BYTES = 64 << 20
_LONG = struct.Struct(">q")
Decoded = TypeVar("Decoded")  # what a slave makes of each replicated record (its dispatch request)


@dataclass
class ScanResult:
    """What a validating scan of the log found."""

    end_offset: int  # first byte after the last valid record
    records: int = 0
    bytes_scanned: int = 0
    corrupt_offset: int | None = None  # where the first bad record starts, if the scan stopped on one
    reason: str = ""


class CommitLog:
    """Segments of stored records (see ``record.py``), appended on the loop thread, flushed by any thread."""

    def __init__(self, root_dir: str, segment_size: int, durability: Durability | None = None) -> None:
        self.queue = MappedFileQueue(os.path.join(root_dir, "commitlog"), segment_size)
        self.segment_size = segment_size
        self.max_offset = 0  # end of the last record written (RocketMQ getMaxOffset)
        self.flushed_offset = 0  # everything below is fsynced
        self.fsyncs = 0  # flush rounds that made something durable
        # the store timestamp of the log's last record (not the highest: docs/reliability.md); 0 when unknown
        self.last_store_timestamp = 0
        self._flush_lock = threading.Lock()
        # lost at the first failed fsync: from then on nothing is appended or flushed (a retried fsync proves nothing)
        self.durability = durability if durability is not None else Durability()

    def load(self) -> list[str]:
        return self.queue.load()

    @property
    def min_offset(self) -> int:
        first = self.queue.first
        return first.file_from_offset if first is not None else self.max_offset

    # --- append ------------------------------------------------------------------------------------

    def append(self, records: list[bytearray]) -> list[int]:
        """Place, seal and write ``records`` (unsealed, see ``encode_record``); return their offsets.

        All writes go to one segment at a time, with one system call per segment touched (and per IOV_MAX
        records). When a record does not fit, the segment gets a BLANK marker and the log rolls to a new segment.
        Segments are created before anything is written, so a failure to create one leaves the log unchanged; a
        write that fails part-way is taken back (``truncate``), so a failed append leaves no record. Refused
        (``DurabilityLostError``) once durability is lost.
        """
        self.durability.check()
        pos = self.max_offset
        mf = self.queue.find(pos)
        created: list[MappedFile] = []
        plan: list[tuple[MappedFile, int, list[bytes | bytearray]]] = []
        offsets: list[int] = []
        try:
            if mf is None:
                mf = self.queue.create(pos - pos % self.segment_size)
                created.append(mf)
            parts: list[bytes | bytearray] = []
            start = pos
            seg_end = mf.end_offset  # a property (its module is interpreted): read once per segment, not per record
            for rec in records:
                if len(rec) + BLANK_SIZE > self.segment_size:
                    raise StoreError(f"record of {len(rec)} bytes does not fit in a segment")
                if pos + len(rec) + BLANK_SIZE > seg_end:
                    parts.append(blank_marker(seg_end - pos))
                    plan.append((mf, start, parts))
                    mf = self.queue.create(seg_end)
                    created.append(mf)
                    pos = start = mf.file_from_offset
                    seg_end = mf.end_offset
                    parts = []
                set_physical_offset(rec, pos)
                seal(rec)
                parts.append(rec)
                offsets.append(pos)
                pos += len(rec)
            plan.append((mf, start, parts))
        except BaseException:
            self.queue.delete_files(created)
            raise
        try:
            for seg, seg_pos, seg_parts in plan:
                seg.write(seg_parts, seg_pos - seg.file_from_offset)
        except BaseException:
            self.truncate(self.max_offset)  # whatever part was written goes: a failed append leaves no record
            raise
        self.max_offset = pos
        return offsets

    def append_raw(self, offset: int, data: bytes | bytearray | memoryview,
                   decode: Callable[[memoryview, int], Decoded]) -> list[Decoded]:
        """Write the whole records at the start of ``data`` (a master's bytes from ``offset``, which must be the
        end of this log) as they are; return ``decode(record, its offset)`` of each. A slave's log stays
        byte-identical.

        Every record is validated (magic, size, trailer CRC, PHYSICALOFFSET) and decoded before anything is
        written, once: a record that passes its checks may still not decode (``decode`` raises
        ``CorruptRecordError``), and one written but not dispatched would never reach its queues. A BLANK marker
        must fill the rest of its segment. An incomplete record at the end is left for the next call; a record
        that fails validation or decoding raises ``CorruptRecordError`` and nothing of this call is written.
        Refused (``DurabilityLostError``) once durability is lost.
        """
        if offset != self.max_offset:
            raise StoreError(f"replicated bytes at {offset}, but the log ends at {self.max_offset}")
        self.durability.check()
        view = memoryview(data)
        records: list[Decoded] = []
        plan: list[tuple[int, int, int]] = []  # (segment start, first offset, end offset) of each write
        pos, i = offset, 0
        while len(view) - i >= 8:
            total, magic = read_prefix(view, i)
            seg_start = pos - pos % self.segment_size
            seg_end = seg_start + self.segment_size
            if magic == BLANK_MAGIC_CODE and total == seg_end - pos:
                pass
            elif magic != MESSAGE_MAGIC_CODE or total < MIN_RECORD_SIZE or total > seg_end - pos - BLANK_SIZE:
                raise CorruptRecordError(f"replicated record at {pos}: bad magic or size ({magic:#x}, {total})")
            if len(view) - i < total:
                break
            rec = view[i : i + total]
            if magic == MESSAGE_MAGIC_CODE:
                check_record(rec, pos)
                records.append(decode(rec, pos))
            if plan and plan[-1][0] == seg_start:
                plan[-1] = (seg_start, plan[-1][1], pos + total)
            else:
                plan.append((seg_start, pos, pos + total))
            pos += total
            i += total
        for seg_start, first, end in plan:
            mf = self.queue.find(first) or self.queue.create(seg_start)
            mf.write([view[first - offset : end - offset]], first - seg_start)
        self.max_offset = pos
        return records

    def read_raw(self, offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` of the log from ``offset`` as stored, within one segment and below ``max_offset``
        (what a master streams to its slaves)."""
        mf = self.queue.find(offset)
        if mf is None or offset >= self.max_offset:
            return b""
        return mf.read(offset - mf.file_from_offset, min(max_bytes, self.max_offset - offset, mf.end_offset - offset))

    def tail_bytes(self, offset: int, n: int = 8) -> bytes:
        """The ``n`` bytes before ``offset`` (zeros where the log has none): two logs whose bytes before
        ``offset`` match end with the same record there, trailer CRC included. At the start of a segment, the
        bytes before the previous one's BLANK marker (its last record's trailer CRC) and the marker's size instead:
        the bytes just before a segment start are the zeros after that marker in every log, so two logs that
        differ in the previous segment matched there (a slave kept records its master no longer had)."""
        mf = self.queue.find(offset - 1) if offset > 0 else None
        if mf is None or offset > self.max_offset:
            return bytes(n)
        if offset == mf.end_offset:
            blank = self._blank_marker_at(mf)
            if blank is not None and blank - TRAILER_SIZE >= mf.file_from_offset:
                crc = mf.read(blank - TRAILER_SIZE - mf.file_from_offset, TRAILER_SIZE)
                return (crc + (offset - blank).to_bytes(n - TRAILER_SIZE, "big"))[-n:]
        start = max(offset - n, mf.file_from_offset)
        return bytes(n - (offset - start)) + mf.read(start - mf.file_from_offset, offset - start)

    @staticmethod
    def _blank_marker_at(mf: MappedFile) -> int | None:
        """The log offset of the BLANK marker ending the full segment ``mf``: the zeros after it end the segment,
        so its last 8 non-zero bytes are the marker (None: they are not). Looked for in the last
        ``BLANK_SEARCH_BYTES``, then, when those are all zeros (a record larger than that did not fit), in the whole
        segment: taken for no marker, the tail was the zeros every log shows there."""
        size = mf.end_offset - mf.file_from_offset
        window = max(0, size - BLANK_SEARCH_BYTES)
        last = mf.last_nonzero(window)
        if last < 0 and window:
            last = mf.last_nonzero(0)
        at = last + 1 - BLANK_SIZE
        if at < 0:
            return None
        total, magic = read_prefix(mf.read(at, BLANK_SIZE), 0)
        return mf.file_from_offset + at if magic == BLANK_MAGIC_CODE and total == size - at else None

    # --- read --------------------------------------------------------------------------------------

    def read(self, offset: int, size: int | None = None) -> memoryview:
        """The stored record at ``offset``, validated (magic, size, trailer CRC, PHYSICALOFFSET).

        Raises ``StoreError`` when ``offset`` is outside the log, ``CorruptRecordError`` when the record there
        fails validation.
        """
        if offset < self.min_offset or offset >= self.max_offset:
            raise StoreError(f"commit-log offset {offset} outside [{self.min_offset}, {self.max_offset})")
        mf = self.queue.find(offset)
        if mf is None:
            raise StoreError(f"commit-log offset {offset}: segment no longer on disk")
        pos = offset - mf.file_from_offset
        try:
            buf = mf.read(pos, size if size is not None and size >= MIN_RECORD_SIZE else READ_AHEAD)
        except OSError as exc:
            raise StoreError(f"commit-log offset {offset}: {exc}") from exc
        if len(buf) < 8:
            raise CorruptRecordError(f"record at {offset}: truncated")
        total, magic = read_prefix(buf)
        if magic != MESSAGE_MAGIC_CODE or total < MIN_RECORD_SIZE or offset + total > self.max_offset:
            raise CorruptRecordError(f"record at {offset}: bad magic or size ({magic & 0xFFFFFFFF:#x}, {total})")
        if total > len(buf):
            buf += mf.read(pos + len(buf), total - len(buf))
        rec = memoryview(buf)[:total]
        check_record(rec, offset)
        return rec

    def read_run(self, offset: int, sizes: list[int]) -> list[memoryview]:
        """The records that follow one another from ``offset`` with these sizes (a consume queue's entries written
        together), validated as ``read`` validates each, with one pread when they lie in one segment.

        Raises ``StoreError`` for a run not within one segment of the log, and as ``read`` does for the first record
        that fails; the caller reads them one by one then.
        """
        end = offset + sum(sizes)
        mf = self.queue.find(offset)
        if offset < self.min_offset or end > self.max_offset or mf is None or end > mf.end_offset:
            raise StoreError(f"records at {offset}..{end}: not within one segment of the log")
        try:
            buf = memoryview(mf.read(offset - mf.file_from_offset, end - offset))
        except OSError as exc:
            raise StoreError(f"commit-log offset {offset}: {exc}") from exc
        if len(buf) != end - offset:
            raise CorruptRecordError(f"records at {offset}: {len(buf)} of {end - offset} bytes read")
        out = []
        pos = 0
        for size in sizes:
            rec = buf[pos:pos + size]
            check_record(rec, offset + pos)
            out.append(rec)
            pos += size
        return out

    def read_store_timestamp(self, offset: int) -> int:
        """STORETIMESTAMP of the record at ``offset`` without reading the record (time lookups)."""
        mf = self.queue.find(offset)
        if mf is None:
            raise StoreError(f"commit-log offset {offset}: segment no longer on disk")
        raw = mf.read(offset - mf.file_from_offset + STORE_TIMESTAMP_POS, 8)
        if len(raw) != 8:
            raise CorruptRecordError(f"record at {offset}: truncated")
        return int(_LONG.unpack(raw)[0])

    # --- flush -------------------------------------------------------------------------------------

    def flush(self) -> int:
        """fsync every segment holding bytes below ``max_offset`` not yet flushed; return the flushed offset.

        Safe from any thread: ``max_offset`` is read once, before the segments, so every segment the target
        covers already exists; segments below ``flushed_offset`` are the only ones retention may delete.
        A failed fsync loses durability (and is raised): ``flushed_offset`` never moves again, as a later fsync's
        success would not cover the bytes whose writeback failed; from then on this raises ``DurabilityLostError``.
        """
        with self._flush_lock:
            self.durability.check()
            target = self.max_offset
            if target <= self.flushed_offset and not self.queue.directory_dirty:
                return self.flushed_offset
            for mf in self.queue.files_from(self.flushed_offset):
                if mf.file_from_offset >= target:
                    break
                with self.durability.fsyncing(mf.path):
                    mf.flush()
            with self.durability.fsyncing(self.queue.directory):
                self.queue.sync_directory()
            self.flushed_offset = target
            self.fsyncs += 1
            return target

    # --- recovery ----------------------------------------------------------------------------------

    def scan(
        self,
        start: int,
        on_record: Callable[[int, memoryview], None],
        end: int | None = None,
        on_corrupt: Callable[[int, str], None] | None = None,
    ) -> ScanResult:
        """Validate records from ``start`` (a record boundary) to ``end`` or the end of the log; call
        ``on_record`` for each. A record ``on_record`` cannot decode (it raises ``CorruptRecordError``: a topic or
        properties not UTF-8, whose CRC is right) fails validation.

        Stops at the first record that fails validation, unless ``on_corrupt`` is given (rebuilds): then a
        record with a bad CRC (or not decoded) is skipped by its size, and a bad magic or size skips the rest of
        the segment, as do zeros before ``end``.
        A zero TOTALSIZE and magic ends the log, also in a segment that is not the last (as in RocketMQ's
        recovery, where only a BLANK marker goes on with the next file): zeros before a segment's end and its
        BLANK marker are pages a power loss took while the kernel had written back later ones, all after the log's
        last flush. Recovery cuts the log there, so that no consume queue is left with a gap (entries of lost
        records between kept ones), and a slave copies the log as it is.
        """
        result = ScanResult(end_offset=start)
        pos = start
        mf = self.queue.find(pos)
        while mf is not None:
            seg_end = mf.end_offset
            chunk = b""
            chunk_start = pos
            while True:
                cpos = pos - chunk_start
                if end is not None and pos >= end:
                    return result
                if seg_end - pos < BLANK_SIZE:
                    break  # cannot happen with the 8-byte rule; treat as the end of the segment
                if cpos + 8 > len(chunk):
                    chunk, chunk_start, cpos = mf.read(pos - mf.file_from_offset, SCAN_CHUNK), pos, 0
                total, magic = read_prefix(chunk, cpos)
                if total == 0 and magic == 0:  # no more records: the end of the log, even in a segment not the last
                    if on_corrupt is not None and end is not None:  # but a rebuild's range is log recovery kept:
                        on_corrupt(pos, "zeros")  # damage (a sector lost), skipped with the rest of its segment
                        result.end_offset = pos = seg_end
                        break
                    result.end_offset = pos
                    break
                if magic == BLANK_MAGIC_CODE and total == seg_end - pos:
                    result.bytes_scanned += total
                    result.end_offset = pos = seg_end
                    break
                if magic != MESSAGE_MAGIC_CODE or total < MIN_RECORD_SIZE or total > seg_end - pos - BLANK_SIZE:
                    reason = f"bad magic or size ({magic:#x}, {total})"
                    if on_corrupt is None:
                        return self._stopped(result, pos, reason)
                    on_corrupt(pos, reason)
                    result.end_offset = pos = seg_end
                    break
                if cpos + total > len(chunk):
                    chunk = mf.read(pos - mf.file_from_offset, max(SCAN_CHUNK, total))
                    chunk_start, cpos = pos, 0
                rec = memoryview(chunk)[cpos : cpos + total]
                try:
                    check_record(rec, pos)
                    on_record(pos, rec)
                except CorruptRecordError as exc:
                    if on_corrupt is None:
                        return self._stopped(result, pos, str(exc))
                    on_corrupt(pos, str(exc))
                    pos += total
                    continue
                result.records += 1
                result.bytes_scanned += total
                pos += total
                result.end_offset = pos
            if result.end_offset != seg_end:
                break
            mf = self.queue.find(seg_end)
        return result

    @staticmethod
    def _stopped(result: ScanResult, pos: int, reason: str) -> ScanResult:
        result.end_offset = pos
        result.corrupt_offset = pos
        result.reason = reason
        return result

    def data_bytes_after(self, offset: int) -> int:
        """Bytes after ``offset`` holding data (up to the last non-zero byte), over all later segments."""
        total = 0
        for mf in self.queue.files_from(offset):
            start = max(offset - mf.file_from_offset, 0)
            last = mf.last_nonzero(start)
            if last >= 0:
                total += last + 1 - start
        return total

    def truncate(self, offset: int) -> None:
        """Drop everything from ``offset`` on (zero the rest of its segment, delete later segments), durably:
        the flush thread may have fsynced the dropped bytes already, and a crash must not bring them back.

        The log's end is lowered once the bytes are zeroed, whether or not their fsync then succeeds: no record
        is read or appended past the cut. When the fsync fails (``OSError``), durability is lost: nothing is
        appended after zeros that may not be on disk until a restart's recovery has looked at the log."""
        with self._flush_lock:
            self.queue.truncate_from(offset)
            self.max_offset = offset
            self.flushed_offset = min(self.flushed_offset, offset)
            mf = self.queue.find(offset)
            if mf is not None:
                with self.durability.fsyncing(mf.path):
                    mf.flush()
            with self.durability.fsyncing(self.queue.directory):
                self.queue.sync_directory()

    def close(self) -> None:
        self.queue.close()
