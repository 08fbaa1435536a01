"""The commit-log record: RocketMQ's message layout plus a CRC trailer over the whole record.

A record is written by ``CommitLog`` (``commit_log.py``) from the bytes ``encode_record`` returns:

    offset        size  field
    0             4     TOTALSIZE            the stored record, trailer included (= wire TOTALSIZE + 4)
    4             4     MAGICCODE            0xDAA320A7 (MESSAGE_MAGIC_CODE): a message record
    8             4     BODYCRC              zlib.crc32(body) & 0x7FFFFFFF (RocketMQ's own check)
    12            4     QUEUEID
    16            4     FLAG
    20            8     QUEUEOFFSET          logical offset in the consume queue (0 for prepared/rollback)
    28            8     PHYSICALOFFSET       offset of this record in the commit log
    36            4     SYSFLAG              MessageSysFlag bits (transaction type in 0xC)
    40            8     BORNTIMESTAMP
    48            8     BORNHOST             IPv4 (4) + port (4)
    56            8     STORETIMESTAMP       ms since the epoch: the wall clock as its group was written (steps too)
    64            8     STOREHOSTADDRESS     IPv4 (4) + port (4)
    72            4     RECONSUMETIMES
    76            8     PREPAREDTRANSACTIONOFFSET
    84            4+n   BODY                 length, bytes
    88+n          1+t   TOPIC                length, UTF-8
    ..            2+p   PROPERTIES           length, "k\\x01v\\x02..." UTF-8
    TOTALSIZE-4   4     RECORDCRC            zlib.crc32 of bytes [0, TOTALSIZE-4) as stored, unsigned

All integers are big-endian. RocketMQ only checks the body; the trailer lets txmq detect a torn or flipped
byte anywhere in the record (header, topic, properties) on every read and during recovery.

The wire form (what ``encode_message`` wrote, what the broker sends in pull responses) is the record
without its trailer and with TOTALSIZE reduced by 4: one slice and one 4-byte pack, no re-encoding.

A segment ends with a BLANK marker when the next record does not fit (records never span segments):

    0   4   TOTALSIZE    bytes from this marker to the end of the segment
    4   4   MAGICCODE    0xCBD43194 (BLANK_MAGIC_CODE)

Bytes after the last record of the active segment are zero (the file is created sparse), so a TOTALSIZE
of 0 with a zero magic means "no more records in this segment".
"""

from __future__ import annotations

import struct
import zlib

from txmq.errors import CorruptRecordError
from txmq.message import HEAD_SIZE, HOST_HEAD, MESSAGE_MAGIC_CODE, MessageExt, message_parts

BLANK_MAGIC_CODE = 0xCBD43194
TRAILER_SIZE = 4
BLANK_SIZE = 8  # the smallest room a segment must keep for its end marker (END_FILE_MIN_BLANK_LENGTH)
MIN_RECORD_SIZE = HEAD_SIZE + 3 + TRAILER_SIZE  # empty body, empty topic, no properties
PHYSICAL_OFFSET_POS = 28
STORE_TIMESTAMP_POS = 56

_TRAILER_ROOM = bytes(TRAILER_SIZE)
_INT = struct.Struct(">i")
_UINT = struct.Struct(">I")
_LONG = struct.Struct(">q")
_PREFIX = struct.Struct(">iI")  # TOTALSIZE, MAGICCODE
HEADER = HOST_HEAD  # TOTALSIZE .. BODY length, hosts kept as raw 8-byte fields


def encode_record(m: MessageExt) -> bytearray:
    """``m`` as a stored record with room for its trailer (not yet sealed): ``encode_message``'s layout joined
    straight into one buffer, TOTALSIZE counting the trailer."""
    return bytearray().join(message_parts(m, _TRAILER_ROOM))


def set_physical_offset(rec: bytearray, offset: int) -> None:
    _LONG.pack_into(rec, PHYSICAL_OFFSET_POS, offset)


def set_store_timestamp(rec: bytearray, stamp: int) -> None:
    _LONG.pack_into(rec, STORE_TIMESTAMP_POS, stamp)


def seal(rec: bytearray) -> None:
    """Write the trailer: CRC32 of everything before it."""
    _UINT.pack_into(rec, len(rec) - TRAILER_SIZE, zlib.crc32(memoryview(rec)[:-TRAILER_SIZE]))


def blank_marker(size: int) -> bytes:
    return _PREFIX.pack(size, BLANK_MAGIC_CODE)


def to_wire(rec: bytes | bytearray | memoryview) -> bytes:
    """The stored record as ``encode_message`` wrote it: trailer dropped, TOTALSIZE reduced by 4."""
    n = len(rec) - TRAILER_SIZE
    return _INT.pack(n) + rec[4:n]


def read_prefix(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """(TOTALSIZE, MAGICCODE) at ``pos``."""
    return _PREFIX.unpack_from(buf, pos)


def check_record(rec: bytes | bytearray | memoryview, offset: int) -> None:
    """Validate a whole stored record read from commit-log ``offset``.

    Raises ``CorruptRecordError`` for a bad magic, size or trailer CRC, or a PHYSICALOFFSET other than
    ``offset``.
    """
    if len(rec) < MIN_RECORD_SIZE:
        raise CorruptRecordError(f"record at {offset}: {len(rec)} bytes is too short")
    total, magic = _PREFIX.unpack_from(rec, 0)
    if magic != MESSAGE_MAGIC_CODE:
        raise CorruptRecordError(f"record at {offset}: bad magic {magic & 0xFFFFFFFF:#010x}")
    if total != len(rec):
        raise CorruptRecordError(f"record at {offset}: TOTALSIZE {total} but {len(rec)} bytes read")
    (crc,) = _UINT.unpack_from(rec, total - TRAILER_SIZE)
    if zlib.crc32(memoryview(rec)[: total - TRAILER_SIZE]) != crc:
        raise CorruptRecordError(f"record at {offset}: CRC mismatch")
    (phys,) = _LONG.unpack_from(rec, PHYSICAL_OFFSET_POS)
    if phys != offset:
        raise CorruptRecordError(f"record at {offset}: PHYSICALOFFSET says {phys}")
    body_len = _INT.unpack_from(rec, HEAD_SIZE - 4)[0]
    if body_len < 0 or HEAD_SIZE + body_len + 3 + TRAILER_SIZE > total:
        raise CorruptRecordError(f"record at {offset}: body length {body_len} does not fit")
