# cython: annotation_typing=True
"""Pull response bodies straight into columns: the Spark source's rows without a ``MessageExt`` per message.

A PULL_MESSAGE response body is the pulled messages' records one after the other, in RocketMQ's message layout
(``txmq.message``'s docstring). ``decode_message`` turns each into a ``MessageExt`` (4 µs a message, most of it
building objects the source throws away); ``add_pulled`` reads the same bytes into one list per column, checking
what ``decode_message`` checks and raising its errors, and undoing what the consumer's ``prepare_for_user``
undoes (a compressed body is inflated, a retry topic is named by its real topic). ``tests/test_message_columns.py``
keeps the two equal, compiled and interpreted.

Compiled by Cython in pure Python mode (``setup.py``); the same file runs interpreted. Fixed-width fields are read
through a ``const unsigned char *`` into C integers, so a record costs only the objects its columns keep.
"""

from __future__ import annotations

import zlib

import cython

from txmq.errors import RemoteProtocolError
from txmq.message import HEAD_SIZE, MESSAGE_MAGIC_CODE, MessageConst, MessageSysFlag
from txmq.topic import RETRY_GROUP_TOPIC_PREFIX

# Offsets of the fields read, in the layout of txmq.message's docstring, and the constants compared per record:
# C integers when compiled (cython.declare), plain ints interpreted.
_BODYCRC = cython.declare(cython.Py_ssize_t, 8)
_QUEUEID = cython.declare(cython.Py_ssize_t, 12)
_QUEUEOFFSET = cython.declare(cython.Py_ssize_t, 20)
_PHYSICALOFFSET = cython.declare(cython.Py_ssize_t, 28)
_SYSFLAG = cython.declare(cython.Py_ssize_t, 36)
_BORNTIMESTAMP = cython.declare(cython.Py_ssize_t, 40)
_STORETIMESTAMP = cython.declare(cython.Py_ssize_t, 56)
_STOREHOSTADDRESS = cython.declare(cython.Py_ssize_t, 64)
_BODY = cython.declare(cython.Py_ssize_t, 84)
_HEAD_SIZE = cython.declare(cython.Py_ssize_t, HEAD_SIZE)
_MAGIC_CODE = cython.declare(cython.longlong, MESSAGE_MAGIC_CODE)
_COMPRESSED = cython.declare(cython.longlong, MessageSysFlag.COMPRESSED)
_TRANSACTION_MASK = cython.declare(cython.longlong, MessageSysFlag.TRANSACTION_MASK)
_TRANSACTION_COMMIT_TYPE = cython.declare(cython.longlong, MessageSysFlag.TRANSACTION_COMMIT_TYPE)
# Spark's TimestampType holds 0001-01-01 to 9999-12-31 23:59:59.999999 UTC; a stored time outside it (written before
# the broker refused such born timestamps, or by another program) becomes NULL rather than failing the read.
_FIRST_MS = cython.declare(cython.longlong, -62_135_596_800_000)
_LAST_MS = cython.declare(cython.longlong, 253_402_300_799_999)

_KEYS = MessageConst.KEYS
_TAGS = MessageConst.TAGS
_UNIQ_KEY = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_TRANSACTION_ID = MessageConst.TRANSACTION_ID
_RETRY_TOPIC = MessageConst.RETRY_TOPIC


class SourceRows:
    """Rows read so far, one list per column of the Spark source (``txmq.spark.reader.ARROW_SCHEMA``).

    ``properties`` is kept flat as Arrow's map array is: row ``i``'s pairs are ``prop_keys``/``prop_values``
    ``[prop_offsets[i]:prop_offsets[i + 1]]``. Timestamps are µs since the epoch (the schema's unit)."""

    __slots__ = ("body", "born_timestamp", "keys", "msg_id", "prop_keys", "prop_offsets", "prop_values",
                 "queue_id", "queue_offset", "store_timestamp", "tags", "topic", "transaction_id")

    def __init__(self) -> None:
        self.topic: list[str] = []
        self.queue_id: list[int] = []
        self.queue_offset: list[int] = []
        self.msg_id: list[str] = []
        self.keys: list[str | None] = []
        self.tags: list[str | None] = []
        self.body: list[bytes] = []
        self.prop_offsets: list[int] = [0]
        self.prop_keys: list[str] = []
        self.prop_values: list[str] = []
        self.born_timestamp: list[int] = []
        self.store_timestamp: list[int] = []
        self.transaction_id: list[str | None] = []

    def __len__(self) -> int:
        return len(self.topic)

    def truncate(self, rows: int) -> None:
        """Keep the first ``rows`` rows: what a body that failed half-way appended goes."""
        props = self.prop_offsets[rows]
        for column in (self.topic, self.queue_id, self.queue_offset, self.msg_id, self.keys, self.tags, self.body,
                       self.born_timestamp, self.store_timestamp, self.transaction_id):
            del column[rows:]
        del self.prop_offsets[rows + 1:]
        del self.prop_keys[props:]
        del self.prop_values[props:]


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _u32(b: cython.p_const_uchar, p: cython.Py_ssize_t) -> cython.longlong:
    return ((cython.cast(cython.longlong, b[p]) << 24) | (cython.cast(cython.longlong, b[p + 1]) << 16)
            | (cython.cast(cython.longlong, b[p + 2]) << 8) | b[p + 3])


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _i32(b: cython.p_const_uchar, p: cython.Py_ssize_t) -> cython.longlong:
    """A Java int: big-endian, signed."""
    v: cython.longlong = _u32(b, p)
    return v - 4294967296 if v >= 2147483648 else v


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _i64(b: cython.p_const_uchar, p: cython.Py_ssize_t) -> cython.longlong:
    """A Java long: big-endian, signed (the high word signed, the low one not; the sum fits a long long)."""
    return _i32(b, p) * 4294967296 + _u32(b, p + 4)


def add_pulled(rows: SourceRows, data: bytes, end_offset: int, tags: frozenset[str] | set[str] | None,
               transaction_ids: bool) -> None:
    """Append the messages of the pull response body ``data`` whose queue offset is below ``end_offset`` and whose
    tag is in ``tags`` (None: every tag) to ``rows``.

    ``transaction_id`` is the message's transaction (``__transactionId__``, a half batch's, else its ``UNIQ_KEY``)
    for committed transactional messages, and for every message when ``transaction_ids`` is true (audit reads of
    the half and op topics); else None. Raises ``RemoteProtocolError``, as ``decode_message`` does, when ``data``
    is not whole, valid records (and then appends nothing).
    """
    start = len(rows)
    try:
        _add(rows, data, end_offset, tags, transaction_ids)
    except BaseException:
        rows.truncate(start)
        raise


@cython.cfunc
def _add(rows: SourceRows, data: bytes, end_offset: cython.longlong, tags: frozenset[str] | set[str] | None,
         transaction_ids: cython.bint) -> cython.void:
    b: cython.p_const_uchar = data
    n: cython.Py_ssize_t = len(data)
    pos: cython.Py_ssize_t = 0
    end: cython.Py_ssize_t
    p: cython.Py_ssize_t
    body_pos: cython.Py_ssize_t
    topic_pos: cython.Py_ssize_t
    props_pos: cython.Py_ssize_t
    total: cython.longlong
    body_len: cython.longlong
    topic_len: cython.Py_ssize_t
    sys_flag: cython.longlong
    queue_offset: cython.longlong
    magic: cython.longlong
    record: cython.Py_ssize_t
    props: dict
    topic_col: list = rows.topic
    queue_id_col: list = rows.queue_id
    queue_offset_col: list = rows.queue_offset
    msg_id_col: list = rows.msg_id
    keys_col: list = rows.keys
    tags_col: list = rows.tags
    body_col: list = rows.body
    prop_offsets: list = rows.prop_offsets
    prop_keys: list = rows.prop_keys
    prop_values: list = rows.prop_values
    born_col: list = rows.born_timestamp
    store_col: list = rows.store_timestamp
    tx_col: list = rows.transaction_id
    while pos < n:
        if n - pos < _HEAD_SIZE:
            raise RemoteProtocolError("message truncated before its fixed header")
        total = _i32(b, pos)
        magic = _u32(b, pos + 4)
        if magic != _MAGIC_CODE:
            raise RemoteProtocolError(f"bad message magic {magic:#x}")
        body_len = _i32(b, pos + _BODY)
        if total < _HEAD_SIZE + 3 or total > n - pos or body_len < 0 or _HEAD_SIZE + body_len + 3 > total:
            raise RemoteProtocolError(f"bad message size {total} (body {body_len})")
        end = pos + total
        body_pos = pos + _HEAD_SIZE
        p = body_pos + body_len
        topic_len = b[p]
        topic_pos = p + 1
        p = topic_pos + topic_len
        if p + 2 > end:
            raise RemoteProtocolError("message truncated in its topic")
        props_pos = p + 2
        if props_pos + ((b[p] << 8) | b[p + 1]) != end:
            raise RemoteProtocolError("message sizes do not add up to TOTALSIZE")
        body = data[body_pos:body_pos + body_len]
        if (zlib.crc32(body) & 0x7FFFFFFF) != _i32(b, pos + _BODYCRC):
            raise RemoteProtocolError("message body CRC mismatch")
        try:
            props = _properties(data, b, props_pos, end)
            topic = data[topic_pos:topic_pos + topic_len].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RemoteProtocolError("message topic or properties are not UTF-8") from exc
        record = pos
        pos = end
        queue_offset = _i64(b, record + _QUEUEOFFSET)
        tag = props.get(_TAGS)
        if queue_offset >= end_offset or (tags is not None and tag not in tags):
            continue
        sys_flag = _i32(b, record + _SYSFLAG)
        if sys_flag & _COMPRESSED:
            try:
                body = zlib.decompress(body)
            except zlib.error as exc:
                raise RemoteProtocolError(f"compressed message body does not inflate: {exc}") from None
        real_topic = props.get(_RETRY_TOPIC)
        if real_topic and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            topic = real_topic
        uniq = props.get(_UNIQ_KEY)
        topic_col.append(topic)
        queue_id_col.append(_i32(b, record + _QUEUEID))
        queue_offset_col.append(queue_offset)
        # The offset id (RocketMQ createMessageId) is the store host's 8 bytes then the commit-log offset's 8.
        msg_id_col.append(uniq or (data[record + _STOREHOSTADDRESS:record + _STOREHOSTADDRESS + 8]
                                   + data[record + _PHYSICALOFFSET:record + _PHYSICALOFFSET + 8]).hex().upper())
        keys_col.append(props.get(_KEYS))
        tags_col.append(tag)
        body_col.append(body)
        prop_keys.extend(props.keys())
        prop_values.extend(props.values())
        prop_offsets.append(len(prop_keys))
        born_col.append(_micros(_i64(b, record + _BORNTIMESTAMP)))
        store_col.append(_micros(_i64(b, record + _STORETIMESTAMP)))
        if transaction_ids or (sys_flag & _TRANSACTION_MASK) == _TRANSACTION_COMMIT_TYPE:
            tx_col.append(props.get(_TRANSACTION_ID) or uniq)
        else:
            tx_col.append(None)


@cython.cfunc
def _micros(ms: cython.longlong) -> object:
    """``ms * 1000``, or None for a time no Spark timestamp holds."""
    if _FIRST_MS <= ms <= _LAST_MS:
        return ms * 1000
    return None


@cython.cfunc
def _properties(data: bytes, b: cython.p_const_uchar, p: cython.Py_ssize_t, end: cython.Py_ssize_t) -> dict:
    """``k\\x01v\\x02...`` between ``p`` and ``end`` as ``string_to_properties`` reads it: pairs split at the first
    ``\\x01``, items without one dropped (but still UTF-8-checked, as its whole-string decode does), the last value
    of a repeated name kept. The separators are ASCII, so splitting bytes before decoding splits the same places."""
    props: dict = {}
    item: cython.Py_ssize_t
    sep: cython.Py_ssize_t
    while p < end:
        item = p
        sep = -1
        while p < end and b[p] != 2:
            if sep < 0 and b[p] == 1:
                sep = p
            p += 1
        if sep >= 0:
            props[data[item:sep].decode("utf-8")] = data[sep + 1:p].decode("utf-8")
        else:
            data[item:p].decode("utf-8")
        p += 1
    return props
