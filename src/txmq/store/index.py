"""IndexFile and IndexService: find messages by key (KEYS) and by client id (UNIQ_KEY).

RocketMQ's IndexFile layout, a hash table with chained entries kept on disk:

    offset                 size           field
    0                      8              beginTimestamp   store time of the first entry (ms)
    8                      8              endTimestamp     store time of the last entry (ms)
    16                     8              beginPhyOffset   commit-log offset of the first entry
    24                     8              endPhyOffset     commit-log offset of the last entry
    32                     4              hashSlotCount    number of slots
    36                     4              indexCount       entries used + 1 (entry 0 is never used)
    40                     4 * slots      slots            index of the newest entry per slot, 0 = empty
    40 + 4 * slots         20 * entries   entries          keyHash 4, phyOffset 8, timeDiff 4 (s), prevIndex 4

Differences from RocketMQ, both for a Python broker: the key hash is ``crc32("topic#key")`` (String.hashCode
is slow in Python and index files are private to the store), and files are named by the 20-digit
commit-log offset of their first entry, which is what recovery and retention reason with.

The file is memory-mapped (shared), as RocketMQ maps it: a put is a slot read and two small writes at random
places, which as ``pread``/``pwrite`` cost three syscalls per key (the largest part of a broker's work per
message); through the map they are memory stores into the page cache (so they survive a killed process as
writes do), and ``flush`` makes them durable with ``msync``. The file is sparse, and disk space is reserved
(``posix_fallocate``) for the slots at creation and for entries a megabyte ahead of use, so a full disk is
an ``OSError`` on the put, never a SIGBUS from a store into a hole. The header is written when the store
flushes, not on every put; on open the entry count is taken as the larger of the header's and the number of
non-zero entries, so entries written after the last header write are kept. Lookups read candidates back
from the commit log and check the key (hash collisions, entries left over from a crash).
"""

from __future__ import annotations

import array
import contextlib
import logging
import mmap
import os
import struct
import sys
import zlib
from collections.abc import Callable

from txmq.store.mapped_file import fsync_dir, fsync_fd, is_offset_name, offset_to_name

log = logging.getLogger("txmq.store")

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = HEADER.size  # 40
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = ENTRY.size  # 20
KEY_SEPARATOR = "#"
REPAIR_CHUNK = 65536  # entries read at a time by the search of ``_repair_slots``
ALLOCATE_AHEAD = 1 << 20  # bytes of entries reserved on disk before they are written
assert HEADER_SIZE == 40 and ENTRY_SIZE == 20


def key_hash(topic: str, key: str) -> int:
    return zlib.crc32(f"{topic}{KEY_SEPARATOR}{key}".encode()) & 0x7FFFFFFF


def _store_int(view: memoryview, pos: int, value: int) -> None:
    """The low 32 bits of ``value`` at ``pos``, big-endian (Java's ``putInt``)."""
    view[pos] = (value >> 24) & 0xFF
    view[pos + 1] = (value >> 16) & 0xFF
    view[pos + 2] = (value >> 8) & 0xFF
    view[pos + 3] = value & 0xFF


def _load_int(view: memoryview, pos: int) -> int:
    """The signed big-endian 32-bit int at ``pos`` (Java's ``getInt``)."""
    value = view[pos]  # widened first (a C long long: index.pxd), so its shift by 24 cannot overflow a C int
    value = (value << 24) | (view[pos + 1] << 16) | (view[pos + 2] << 8) | view[pos + 3]
    return value - (1 << 32) if value & 0x80000000 else value


class InvalidIndexFile(Exception):
    """The file's header or size does not describe a valid index file."""


class IndexFile:
    """One index file; written on the loop thread, fsynced by the checkpoint thread."""

    def __init__(self, path: str, hash_slot_num: int, index_num: int, begin_phy: int | None = None) -> None:
        self.path = path
        create = begin_phy is not None
        self.fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o644)
        try:
            if begin_phy is not None:
                self.hash_slot_num, self.index_num = hash_slot_num, index_num
                os.ftruncate(self.fd, self._size())
                self._map(self._size())
                self._allocated = 0
                self._reserve(self._entry_pos(1))
                self.begin_ts = self.end_ts = 0
                self.begin_phy = self.end_phy = begin_phy
                self.index_count = 1
                self.write_header()
            else:
                self._load()
        except BaseException:
            if getattr(self, "mm", None) is not None:  # compiled, the field exists from the start (None)
                self._unmap()
            os.close(self.fd)
            if create:  # a disk too full for its slots: no sparse file of the full size left per attempt
                os.unlink(path)
            raise
        self.dirty = create

    def _size(self) -> int:
        return HEADER_SIZE + self.hash_slot_num * SLOT.size + self.index_num * ENTRY_SIZE

    def _load(self) -> None:
        raw = os.pread(self.fd, HEADER_SIZE, 0)
        if len(raw) != HEADER_SIZE:
            raise InvalidIndexFile(f"{self.path}: no header")
        self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.hash_slot_num, count = HEADER.unpack(raw)
        file_size = os.fstat(self.fd).st_size
        entries_bytes = file_size - HEADER_SIZE - self.hash_slot_num * SLOT.size
        if self.hash_slot_num <= 0 or entries_bytes <= 0 or entries_bytes % ENTRY_SIZE:
            raise InvalidIndexFile(f"{self.path}: header does not match a file of {file_size} bytes")
        self.index_num = entries_bytes // ENTRY_SIZE
        if not 1 <= count <= self.index_num or self.begin_phy != int(os.path.basename(self.path)):
            raise InvalidIndexFile(f"{self.path}: bad entry count {count} or begin offset {self.begin_phy}")
        self._map(file_size)
        # Entries written after the last header write: count the non-zero ones that follow.
        while count < self.index_num:
            raw = self.mm[self._entry_pos(count):self._entry_pos(min(count + 512, self.index_num))]
            n = 0
            while n * ENTRY_SIZE < len(raw) and any(raw[n * ENTRY_SIZE : (n + 1) * ENTRY_SIZE]):
                n += 1
            count += n
            if n < 512:
                break
        self.index_count = count
        self._allocated = 0
        self._reserve(self._entry_pos(count))
        if count < self.index_num:  # (a full file has every entry a slot can name: the store's older files)
            self._repair_slots()

    def _repair_slots(self) -> None:
        """Slots naming an entry past those counted: a power loss kept a slot's page (written back, as any dirty
        page of the map) but not the page of the entry it names. Each is set to the newest counted entry of its
        chain, so that the entries behind it, durable before the last checkpoint, are found again (a lookup stopped
        at such a slot, and the next put there started a new chain). The check is one pass over the slots in C;
        the search only runs for a file that has such slots, newest entries first (read through the map)."""
        # (read, not through the map: the slots' pages would stay in the broker's RSS)
        slots = array.array("I", os.pread(self.fd, self.hash_slot_num * SLOT.size, HEADER_SIZE))  # (a negative
        if sys.byteorder == "little":  # one reads as past any count)
            slots.byteswap()
        count = self.index_count
        if max(slots) < count:
            return
        bad = {i for i, value in enumerate(slots) if value >= count}
        newest: dict[int, int] = {}
        end = count
        while end > 1 and len(newest) < len(bad):
            start = max(1, end - REPAIR_CHUNK)
            hashes = [entry[0] for entry in ENTRY.iter_unpack(self.mm[self._entry_pos(start) : self._entry_pos(end)])]
            for k in range(len(hashes) - 1, -1, -1):
                slot = hashes[k] % self.hash_slot_num
                if slot in bad and slot not in newest:
                    newest[slot] = start + k
            end = start
        for slot in bad:
            SLOT.pack_into(self.mm, HEADER_SIZE + slot * SLOT.size, newest.get(slot, 0))
        self.dirty = True
        log.warning("index file %s: %d hash slots named entries past its %d (a power loss): set to the newest of "
                    "their chains", self.path, len(bad), count)

    def _map(self, size: int) -> None:
        self.mm = mmap.mmap(self.fd, size)
        self._view = memoryview(self.mm)  # put_key's stores (C stores into the map when compiled: index.pxd)

    def _unmap(self) -> None:
        self._view = memoryview(bytearray())  # the map's view released first: a map with one open cannot close
        self.mm.close()

    def _entry_pos(self, index: int) -> int:
        return HEADER_SIZE + self.hash_slot_num * SLOT.size + index * ENTRY_SIZE

    def _reserve(self, end: int) -> None:
        """Make sure the disk blocks up to ``end`` (and a megabyte beyond) exist before the map is written."""
        target = min(self._size(), end + ALLOCATE_AHEAD)
        if target > self._allocated:
            os.posix_fallocate(self.fd, self._allocated, target - self._allocated)
            self._allocated = target

    @property
    def full(self) -> bool:
        return self.index_count >= self.index_num

    def put_key(self, h: int, phy: int, store_ts: int) -> None:
        """Add one entry at the head of its slot's chain. The caller checks ``full`` first. Written byte by byte
        into the map's view: compiled (index.pxd), these are C stores where ``struct`` calls cost most of a put
        (one per stored message)."""
        if self.index_count == 1:
            self.begin_ts = store_ts
        view = self._view
        slot_pos = HEADER_SIZE + (h % self.hash_slot_num) * 4
        prev = _load_int(view, slot_pos)
        if not 0 < prev < self.index_count:
            prev = 0
        time_diff = max(0, (store_ts - self.begin_ts) // 1000)
        index = self.index_count
        pos = self._entry_pos(index)
        if pos + ENTRY_SIZE > self._allocated:
            self._reserve(pos + ENTRY_SIZE)
        _store_int(view, pos, h)  # the layout of ENTRY: keyHash, phyOffset, timeDiff, prevIndex
        _store_int(view, pos + 4, phy >> 32)
        _store_int(view, pos + 8, phy & 0xFFFFFFFF)
        _store_int(view, pos + 12, min(time_diff, 0x7FFFFFFF))
        _store_int(view, pos + 16, prev)
        _store_int(view, slot_pos, index)
        self.index_count = index + 1
        self.end_ts, self.end_phy = store_ts, phy
        self.dirty = True

    def lookup(self, h: int, max_num: int) -> list[int]:
        """Commit-log offsets of entries with key hash ``h``, newest first (candidates, to be verified)."""
        out: list[int] = []
        (index,) = SLOT.unpack_from(self.mm, HEADER_SIZE + (h % self.hash_slot_num) * SLOT.size)
        while 0 < index < self.index_count and len(out) < max_num:
            entry_hash, phy, _, prev = ENTRY.unpack_from(self.mm, self._entry_pos(index))
            if entry_hash == h:
                out.append(phy)
            if prev >= index:  # chains only point backwards; anything else is debris from a crash
                break
            index = prev
        return out

    def write_header(self) -> None:
        HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.hash_slot_num,
                         self.index_count)

    def flush(self) -> None:
        if self.fd >= 0:
            self.mm.flush()  # msync: the mapped pages to disk
            fsync_fd(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            self._unmap()
            os.close(self.fd)
            self.fd = -1

    def destroy(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class IndexService:
    """The index files of the store, oldest first; new entries go to the last one."""

    def __init__(self, root_dir: str, hash_slot_num: int, index_num: int) -> None:
        self.directory = os.path.join(root_dir, "index")
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = []
        os.makedirs(self.directory, exist_ok=True)

    def load(self) -> list[str]:
        """Open the index files; delete and report the invalid ones (recovery rebuilds their range)."""
        problems: list[str] = []
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if not is_offset_name(name):
                continue
            try:
                self.files.append(IndexFile(path, self.hash_slot_num, self.index_num))
            except InvalidIndexFile as exc:
                problems.append(str(exc))
                os.unlink(path)
        return problems

    def names(self) -> list[int]:
        return [f.begin_phy for f in self.files]

    def truncate_from(self, phy: int) -> list[int]:
        """Delete the files that begin at or after ``phy`` (recovery dispatches that range again)."""
        doomed = [f for f in self.files if f.begin_phy >= phy]
        self._delete(doomed)
        return [f.begin_phy for f in doomed]

    def put(self, topic: str, keys: list[str], phy: int, store_ts: int) -> None:
        self._put_keys(self.files[-1] if self.files else None, topic, keys, phy, store_ts)

    def rebuilder(self, begin_phy: int) -> Callable[[str, list[str], int, int], None]:
        """A ``put`` refilling a lost file that began at ``begin_phy`` (recovery feeds it that range)."""
        current: IndexFile | None = self._create(begin_phy)

        def put(topic: str, keys: list[str], phy: int, store_ts: int) -> None:
            nonlocal current
            current = self._put_keys(current, topic, keys, phy, store_ts)

        return put

    def _put_keys(self, f: IndexFile | None, topic: str, keys: list[str], phy: int, store_ts: int) -> IndexFile | None:
        """Add ``keys`` to ``f``, going on in a new file beginning at ``phy`` when it is full; return the
        file that took the last key."""
        for key in keys:
            if f is None or f.full:
                f = self._create(phy)
            f.put_key(key_hash(topic, key), phy, store_ts)
        return f

    def _create(self, begin_phy: int) -> IndexFile:
        """A new index file beginning at ``begin_phy``; a stale file of that name is replaced."""
        path = os.path.join(self.directory, offset_to_name(begin_phy))
        self._delete([f for f in self.files if f.path == path])
        if os.path.exists(path):
            os.unlink(path)
        f = IndexFile(path, self.hash_slot_num, self.index_num, begin_phy=begin_phy)
        self.files.append(f)
        self.files.sort(key=lambda x: x.begin_phy)
        fsync_dir(self.directory)
        return f

    def lookup(self, topic: str, key: str, max_num: int) -> list[int]:
        """Candidate commit-log offsets for ``key``, newest files first, without duplicates."""
        h = key_hash(topic, key)
        seen: dict[int, None] = {}
        for f in reversed(self.files):
            for phy in f.lookup(h, max_num * 4):
                seen.setdefault(phy)
        return list(seen)

    def delete_expired_files(self, min_phy_offset: int) -> int:
        """Delete files (never the last) whose entries all point below ``min_phy_offset``."""
        doomed = [f for i, f in enumerate(self.files[:-1]) if self.files[i + 1].begin_phy <= min_phy_offset]
        self._delete(doomed)
        return len(doomed)

    def _delete(self, doomed: list[IndexFile]) -> None:
        for f in doomed:
            f.destroy()
            self.files.remove(f)

    def dirty_files(self) -> list[IndexFile]:
        """Files written since the last call, with their headers brought up to date (loop thread)."""
        out = [f for f in self.files if f.dirty]
        for f in out:
            f.write_header()
            f.dirty = False
        return out

    def close(self) -> None:
        for f in self.files:
            f.close()
