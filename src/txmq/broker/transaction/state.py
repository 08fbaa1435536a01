"""What the broker knows of every transaction, in a compact table (no message bodies, no Python object per
transaction beyond one dict entry).

Transactions are named by their half message's offset in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 (RocketMQ's
``tranStateTableOffset``), which grows by one per half message, so outcomes fit in a ``bytearray`` indexed by
that offset from a base on: the offsets below it are those whose half messages retention deleted (``trim``), so
the table follows what the log holds, not every transaction the broker ever saw. Pending transactions keep one
packed int each (store second, checks sent, topic and group indexes: about 110 bytes with the dict slot), and
their next check time sits in a wheel of one-second buckets, so a check pass touches only the buckets that are
due. Seconds here are the store's elapsed-time account (``txmq.store.clock``), never the wall clock: a step of
the wall clock neither stalls nor hastens a check.
"""

from __future__ import annotations

import heapq
import struct
import zlib
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from enum import IntEnum
from itertools import chain
from typing import NamedTuple

import orjson


class Outcome(IntEnum):
    PENDING = 0
    COMMIT = 1
    ROLLBACK = 2
    DISCARD = 3  # checked transactionCheckMax times without an answer; may be resumed
    # Below the table's base: the half message was deleted by retention (fileReservedTime), and with it what the
    # table knew. Never a byte of the table: the transaction can no longer be ended, resumed or checked.
    EXPIRED = 4


_OUTCOME_OF_BYTE = tuple(Outcome)  # by value: the table's bytes are outcomes
# For the code run per transaction: an enum member read through its class goes through EnumType's __getattr__
# hook in CPython 3.11 (about 0.07-0.1 µs), a module constant is a dict lookup.
PENDING, COMMIT, ROLLBACK, DISCARD, EXPIRED = _OUTCOME_OF_BYTE
FINAL = (COMMIT, ROLLBACK)  # the outcomes a transaction never leaves
# What a transaction was before a decision that may not reach the log: its outcome, its packed pending entry
# (None when it was not pending) and its checks if discarded. Ints only: nothing unpacked per decision.
Before = tuple[Outcome, int | None, int]


class PendingInfo(NamedTuple):
    """A pending transaction unpacked, for checks and listings (a decision keeps the packed int instead)."""

    half_offset: int
    store_time_s: int  # when the half was stored, in seconds of the store's elapsed-time account
    checks: int
    topic: str
    group: str
    recovered: bool


class TransactionStateTable:
    # A name's index in a packed entry has the width the snapshot gives it (an unsigned 32-bit field): topics and
    # producer groups share one list, both chosen by peers, so narrower fields overflowed into each other.
    _GROUP_BITS = 32
    _TOPIC_BITS = 32
    _CHECK_BITS = 8
    # Names are never dropped one by one (an entry being decided keeps its indexes to go back to); the list is
    # rebuilt from the pending entries (and those kept to go back to) once it reaches this many names, then twice
    # as many as it kept.
    COMPACT_AT_NAMES = 4096
    # The front of the outcome array is cut (a copy of the rest) once retention has moved the half queue's start
    # this many offsets past the base, and a quarter of the array: each outcome is copied a bounded number of times.
    TRIM_AT_LEAST = 64 * 1024

    def __init__(self) -> None:
        self.outcomes = bytearray()  # outcomes[i]: the transaction at half offset outcomes_base + i
        self.outcomes_base = 0
        self.pending: dict[int, int] = {}
        self.pending_per_topic: Counter[str] = Counter()
        self.discarded: dict[int, int] = {}  # half offset -> checks sent before the discard
        self.names: list[str] = []  # topics and producer groups: a packed entry's name indexes point here
        self._name_index: dict[str, int] = {}
        self._compact_at = self.COMPACT_AT_NAMES
        self._wheel: dict[int, array[int]] = {}
        self._wheel_keys: list[int] = []
        # Transactions found pending by recovery: a commit may already be in the log without its op record.
        self.recovered: set[int] = set()

    # --- packing ------------------------------------------------------------------------------------

    def _index(self, name: str) -> int:
        idx = self._name_index.get(name)
        if idx is None:
            idx = self._name_index[name] = len(self.names)
            self.names.append(name)
        return idx

    def names_to_compact(self) -> bool:
        """Whether the name list has grown enough to be rebuilt (``compact_names``)."""
        return len(self.names) >= self._compact_at

    def compact_names(self) -> list[str]:
        """Keep only the names pending entries use, renumbered. Topics and producer groups come from peers, so
        made-up names would otherwise stay for the broker's life. Returns the list it replaced: an entry kept
        outside the table (a decision's ``Before``, to go back to) is renumbered with ``adopt(packed, old)``."""
        old = self.names
        self.names, self._name_index = [], {}
        pending = self.pending
        for half_offset, packed in pending.items():
            pending[half_offset] = self.adopt(packed, old)
        self._compact_at = max(self.COMPACT_AT_NAMES, 2 * len(self.names))
        return old

    def adopt(self, packed: int, names: list[str]) -> int:
        """``packed``, whose name indexes point into ``names`` (a list this table replaced, or another table's),
        with this table's indexes for those names."""
        store_time_s, checks, topic_idx, group_idx = self._unpack(packed)
        topic, group = self._index(names[topic_idx]), self._index(names[group_idx])
        return ((store_time_s << self._CHECK_BITS | checks) << self._TOPIC_BITS | topic) << self._GROUP_BITS | group

    def _unpack(self, packed: int) -> tuple[int, int, int, int]:
        """(store second, checks, topic index, group index) of a packed entry."""
        group_idx = packed & ((1 << self._GROUP_BITS) - 1)
        packed >>= self._GROUP_BITS
        topic_idx = packed & ((1 << self._TOPIC_BITS) - 1)
        packed >>= self._TOPIC_BITS
        return packed >> self._CHECK_BITS, packed & ((1 << self._CHECK_BITS) - 1), topic_idx, group_idx

    def info(self, half_offset: int) -> PendingInfo | None:
        packed = self.pending.get(half_offset)
        if packed is None:
            return None
        store_time_s, checks, topic_idx, group_idx = self._unpack(packed)
        return PendingInfo(half_offset, store_time_s, checks, self.names[topic_idx], self.names[group_idx],
                           half_offset in self.recovered)

    # --- outcomes -----------------------------------------------------------------------------------

    def outcome(self, half_offset: int) -> Outcome:
        """PENDING for an offset past the array (no half stored there yet), EXPIRED below the base."""
        i = half_offset - self.outcomes_base
        if i < 0:
            return EXPIRED
        if i < len(self.outcomes):
            return _OUTCOME_OF_BYTE[self.outcomes[i]]
        return PENDING

    def _set_outcome(self, half_offset: int, outcome: Outcome) -> None:
        """Below the base nothing is recorded: the half message is gone, and so is the transaction."""
        i = half_offset - self.outcomes_base
        if i < 0:
            return
        if i >= len(self.outcomes):
            self.outcomes.extend(bytes(max(i + 1 - len(self.outcomes), len(self.outcomes), 1024)))
        self.outcomes[i] = outcome

    def add_pending(self, half_offset: int, topic: str, group: str, store_time_s: int, first_check_s: int,
                    checks: int = 0, *, schedule: bool = True) -> None:
        """Track a pending transaction. ``schedule=False`` when it already has an entry in the wheel (a
        pending transaction must have exactly one, or a pass would check it twice). Once per half message as it
        is stored: the lookups of ``outcome``, ``_index``, ``_pack`` and ``schedule`` are written out here. Below
        the base it is not tracked: its half message is gone."""
        pending, outcomes = self.pending, self.outcomes
        i = half_offset - self.outcomes_base
        if i < 0 or half_offset in pending or (i < len(outcomes) and outcomes[i] in FINAL):
            return
        if self.discarded:
            self.discarded.pop(half_offset, None)
        if i < len(outcomes):
            outcomes[i] = PENDING
        else:
            self._set_outcome(half_offset, PENDING)  # grows the table
        index = self._name_index
        topic_idx, group_idx = index.get(topic), index.get(group)
        if topic_idx is None:
            topic_idx = self._index(topic)
        if group_idx is None:
            group_idx = self._index(group)
        pending[half_offset] = (((store_time_s << self._CHECK_BITS | min(checks, 255)) << self._TOPIC_BITS
                                 | topic_idx) << self._GROUP_BITS | group_idx)
        self.pending_per_topic[topic] += 1
        if schedule:
            bucket = self._wheel.get(first_check_s)
            if bucket is None:
                self.schedule(half_offset, first_check_s)
            else:
                bucket.append(half_offset)

    def reopen(self, half_offset: int, packed: int, check_at_s: int) -> None:
        """Undo a decision that could not be stored: pending again with its entry from before (``Before``: checks
        kept; the caller restores the recovered flag)."""
        store_time_s, checks, topic_idx, group_idx = self._unpack(packed)
        self._set_outcome(half_offset, Outcome.PENDING)
        self.add_pending(half_offset, self.names[topic_idx], self.names[group_idx], store_time_s, check_at_s, checks)

    def decide(self, half_offset: int, outcome: Outcome) -> None:
        """Record an outcome; a DISCARD keeps the transaction listable, COMMIT and ROLLBACK are final. Below the
        base nothing is recorded (the transaction is gone with its half message). Once per transaction on the
        commit path: the packed entry is read in place, no ``PendingInfo`` built."""
        i = half_offset - self.outcomes_base
        if i < 0:
            return
        packed = self._untrack(half_offset)
        outcomes = self.outcomes
        if i < len(outcomes):  # a stored half's: _set_outcome without its call
            outcomes[i] = outcome
        else:
            self._set_outcome(half_offset, outcome)
        if outcome == DISCARD:
            self.discarded[half_offset] = self._unpack(packed)[1] if packed is not None \
                else self.discarded.get(half_offset, 0)
        elif self.discarded:
            self.discarded.pop(half_offset, None)

    def _untrack(self, half_offset: int) -> int | None:
        """Take a transaction out of the pending ones; its packed entry, or None when it was not pending."""
        packed = self.pending.pop(half_offset, None)
        if packed is not None:
            self.recovered.discard(half_offset)
            per_topic = self.pending_per_topic
            topic = self.names[(packed >> self._GROUP_BITS) & ((1 << self._TOPIC_BITS) - 1)]
            per_topic[topic] -= 1
            if not per_topic[topic]:
                del per_topic[topic]
        return packed

    def count_check(self, half_offset: int) -> int:
        packed = self.pending.get(half_offset)
        if packed is None:
            return 0
        checks = self._unpack(packed)[1]
        if checks < 255:  # saturates: the field has 8 bits
            checks += 1
            self.pending[half_offset] = packed + (1 << (self._GROUP_BITS + self._TOPIC_BITS))
        return checks

    # --- retention ----------------------------------------------------------------------------------

    def due_for_trim(self, min_offset: int) -> bool:
        """Whether the half queue, now starting at ``min_offset``, has left enough of the array behind for
        ``trim``'s copy to pay (``TRIM_AT_LEAST`` and a quarter of the array)."""
        return min_offset - self.outcomes_base >= max(self.TRIM_AT_LEAST, len(self.outcomes) // 4)

    def trim(self, min_offset: int) -> tuple[int, int]:
        """Forget every transaction below ``min_offset``, the half queue's start: retention deleted their half
        messages. A pending or discarded one among them can never be committed (its body is gone); RocketMQ's
        check skips such a half. Returns how many pending and discarded transactions were dropped."""
        cut = min_offset - self.outcomes_base
        if cut <= 0:
            return 0, 0
        self.outcomes = self.outcomes[cut:]  # a new buffer of the rest: the old one is freed, not kept for later
        self.outcomes_base = min_offset
        gone = [h for h in self.pending if h < min_offset]  # their wheel entries are skipped when due
        for half_offset in gone:
            self._untrack(half_offset)
        gone_discarded = [h for h in self.discarded if h < min_offset]
        for half_offset in gone_discarded:
            del self.discarded[half_offset]
        self.recovered.difference_update(gone_discarded)
        return len(gone), len(gone_discarded)

    # --- check wheel --------------------------------------------------------------------------------

    def schedule(self, half_offset: int, at_s: int) -> None:
        bucket = self._wheel.get(at_s)
        if bucket is None:
            bucket = self._wheel[at_s] = array("q")
            heapq.heappush(self._wheel_keys, at_s)
        bucket.append(half_offset)

    def pop_due(self, now_s: int) -> Iterator[int]:
        """Pending transactions whose check time has come; decided ones are dropped on the way."""
        while self._wheel_keys and self._wheel_keys[0] <= now_s:
            at = heapq.heappop(self._wheel_keys)
            for half_offset in self._wheel.pop(at):
                if half_offset in self.pending:
                    yield half_offset

    def next_due_s(self) -> int | None:
        return self._wheel_keys[0] if self._wheel_keys else None

    def __len__(self) -> int:
        return len(self.pending)

    # --- snapshots ----------------------------------------------------------------------------------
    #
    # A snapshot lets recovery replay only the half and op records written after it (restart
    # time follows the unflushed tail, not the history). Layout, big-endian:
    #
    #   magic "TXMQTXS3" | half_covered q | op_covered q       queue offsets the snapshot reflects, exclusive
    #   outcomes_base q                                        the half offset of the first outcome
    #   names            u32 length + JSON list of topic and group names
    #   outcomes         u32 length + one byte per half offset from outcomes_base on (Outcome)
    #   pending          u32 count + per entry: half offset q, store second q (the elapsed-time account's),
    #                    checks B, topic I, group I
    #   discarded        u32 count + per entry: half offset q, checks I
    #   crc              u32 zlib.crc32 of everything before it
    #
    # Older layouts are read too, so that a broker upgraded over an old snapshot restarts from it: "TXMQTXS2" holds
    # wall-clock store seconds as an unsigned 32-bit field (I, which ends in 2106), converted at load
    # (``wall_to_elapsed_s``); "TXMQTXS1", written before the table was trimmed, has besides no outcomes_base (its
    # outcomes start at 0).

    _SNAP_MAGIC = b"TXMQTXS3"
    _SNAP_MAGIC_V2 = b"TXMQTXS2"
    _SNAP_MAGIC_V1 = b"TXMQTXS1"
    _SNAP_HEAD = struct.Struct(">8sqqq")
    _SNAP_HEAD_V1 = struct.Struct(">8sqq")
    _SNAP_PENDING = struct.Struct(">qqBII")
    _SNAP_PENDING_V2 = struct.Struct(">qIBII")
    _SNAP_DISCARDED = struct.Struct(">qI")

    def to_snapshot(self, half_covered: int, op_covered: int, as_before: Mapping[int, Before]) -> bytes:
        """The table as the log holds it. ``as_before`` names decisions still being written (half offset -> the
        transaction before the decision): they are written as they were (those below the base are gone)."""
        base = self.outcomes_base
        as_before = {h: before for h, before in as_before.items() if h >= base}
        outcomes = bytearray(self.outcomes)
        before_pending = [(h, packed) for h, (_, packed, _) in as_before.items() if packed is not None]
        discarded = dict(self.discarded)
        for half_offset, (before, _, checks) in as_before.items():
            outcomes[half_offset - base] = before
            if before == Outcome.DISCARD:
                discarded[half_offset] = checks
        # Packed straight into one buffer: with a million pending, an object per transaction would cost more
        # memory than the table itself (and a broker's RSS keeps its high-water mark).
        row = self._SNAP_PENDING
        rows = bytearray(row.size * (len(self.pending) + len(before_pending)))
        pos = 0
        for half_offset, packed in chain(self.pending.items(), before_pending):
            store_time_s, checks, topic_idx, group_idx = self._unpack(packed)
            row.pack_into(rows, pos, half_offset, store_time_s, checks, topic_idx, group_idx)
            pos += row.size
        names = orjson.dumps(self.names)
        parts: list[bytes | bytearray] = [
                 self._SNAP_HEAD.pack(self._SNAP_MAGIC, half_covered, op_covered, base),
                 struct.pack(">I", len(names)), names, struct.pack(">I", len(outcomes)), bytes(outcomes),
                 struct.pack(">I", len(rows) // row.size), rows]
        parts.append(struct.pack(">I", len(discarded)))
        parts += [self._SNAP_DISCARDED.pack(q, c) for q, c in discarded.items()]
        body = b"".join(parts)
        return body + struct.pack(">I", zlib.crc32(body))

    @classmethod
    def from_snapshot(cls, data: bytes, first_check_s: Callable[[int], int], wall_to_elapsed_s: Callable[[int], int],
                      now_s: int | None = None) -> tuple[TransactionStateTable, int, int]:
        """(table, half_covered, op_covered); pending transactions are scheduled at ``first_check_s(store
        second)``, an older layout's wall-clock store seconds first converted by ``wall_to_elapsed_s``; a store
        second past ``now_s`` (an account that started again, its file lost) is taken as ``now_s``. Raises
        ``ValueError`` for anything but a whole, intact snapshot."""
        if len(data) < cls._SNAP_HEAD_V1.size + 4 or zlib.crc32(data[:-4]) != struct.unpack(">I", data[-4:])[0]:
            raise ValueError("transaction snapshot is truncated or its CRC does not match")
        row, convert = cls._SNAP_PENDING_V2, wall_to_elapsed_s
        if data[:8] in (cls._SNAP_MAGIC, cls._SNAP_MAGIC_V2):
            _, half_covered, op_covered, base = cls._SNAP_HEAD.unpack_from(data)
            pos = cls._SNAP_HEAD.size
            if data[:8] == cls._SNAP_MAGIC:
                row, convert = cls._SNAP_PENDING, int
        elif data[:8] == cls._SNAP_MAGIC_V1:
            _, half_covered, op_covered = cls._SNAP_HEAD_V1.unpack_from(data)
            base, pos = 0, cls._SNAP_HEAD_V1.size
        else:
            raise ValueError("not a transaction snapshot")

        def chunk(size: int) -> bytes:
            nonlocal pos
            out = data[pos : pos + size]
            pos += size
            return out

        table = cls()
        table.outcomes_base = base
        names = orjson.loads(chunk(struct.unpack(">I", chunk(4))[0]))
        table.outcomes = bytearray(chunk(struct.unpack(">I", chunk(4))[0]))
        for _ in range(struct.unpack(">I", chunk(4))[0]):
            half_offset, store_s, checks, topic, group = row.unpack(chunk(row.size))
            store_s = convert(store_s)
            if now_s is not None and store_s > now_s:
                store_s = now_s
            table.add_pending(half_offset, names[topic], names[group], store_s, first_check_s(store_s), checks)
        for _ in range(struct.unpack(">I", chunk(4))[0]):
            half_offset, checks = cls._SNAP_DISCARDED.unpack(chunk(cls._SNAP_DISCARDED.size))
            table.discarded[half_offset] = checks
        return table, half_covered, op_covered
