"""Messages, their properties, their ids, and RocketMQ's message layout. No IO here.

The layout below is RocketMQ's own (``MessageDecoder``, and the CommitLog record of RocketMQ 4.x, version 1
with IPv4 hosts). It is written once, here, because three parts speak it: the store writes it into the
commit log, the broker sends it in pull and check-back responses, and clients decode it.

    offset  size  field
    0       4     TOTALSIZE            whole record, this field included
    4       4     MAGICCODE            0xDAA320A7 (MESSAGE_MAGIC_CODE)
    8       4     BODYCRC              zlib.crc32(body) & 0x7FFFFFFF
    12      4     QUEUEID
    16      4     FLAG                 user flag, opaque to the broker
    20      8     QUEUEOFFSET          logical offset in the consume queue
    28      8     PHYSICALOFFSET       offset of this record in the commit log
    36      4     SYSFLAG              MessageSysFlag bits
    40      8     BORNTIMESTAMP        ms since the epoch, producer clock
    48      8     BORNHOST             IPv4 (4) + port (4)
    56      8     STORETIMESTAMP       ms since the epoch, broker clock
    64      8     STOREHOSTADDRESS     IPv4 (4) + port (4)
    72      4     RECONSUMETIMES
    76      8     PREPAREDTRANSACTIONOFFSET
    84      4+n   BODY                 length, bytes
    88+n    1+t   TOPIC                length (<= 127), UTF-8
    ..      2+p   PROPERTIES           length (<= 32767), "k\\x01v\\x02..." UTF-8

All integers are big-endian and signed, as Java writes them.
"""

from __future__ import annotations

import datetime
import itertools
import os
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import ClassVar

import cython

from txmq.errors import InvalidMessageError, RemoteProtocolError

MESSAGE_MAGIC_CODE = 0xDAA320A7
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# TOTALSIZE .. PREPAREDTRANSACTIONOFFSET, then the body length.
_HEAD = struct.Struct(">iIiiiqqiq4sIq4sIiqi")
HEAD_SIZE = _HEAD.size  # 88
assert HEAD_SIZE == 88
# The same head with each host as its 8 raw bytes (IPv4 + port): what encoding packs, a host packed once per host.
HOST_HEAD = struct.Struct(">iIiiiqqiq8sq8siqi")
assert HOST_HEAD.size == HEAD_SIZE
# Bound once: compiled, ``HOST_HEAD.pack(...)`` would look the method up and bind it on every call.
_pack_head = HOST_HEAD.pack
_pack_host = struct.Struct(">4sI").pack
_pack_offset = struct.Struct(">q").pack
_pack_props_len = struct.Struct(">h").pack
_crc32 = zlib.crc32


class MessageSysFlag:
    """Bits of SYSFLAG (RocketMQ ``MessageSysFlag``)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    TRANSACTION_MASK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOSTADDRESS_V6 = 0x20

    @staticmethod
    def transaction_value(flag: int) -> int:
        return flag & MessageSysFlag.TRANSACTION_MASK

    @staticmethod
    def reset_transaction_value(flag: int, value: int) -> int:
        return (flag & ~MessageSysFlag.TRANSACTION_MASK) | value


class MessageConst:
    """Property names (RocketMQ ``MessageConst``)."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT_STORE_MSG_OK = "WAIT"
    DELAY_TIME_LEVEL = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    TRANSACTION_ID = "__transactionId__"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    RECONSUME_TIME = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_SWITCH = "TRACE_ON"
    SHARDING_KEY = "__SHARDINGKEY"
    # txmq's: the account that stored a half message, set by the broker under access control and refused from
    # any client (docs/security.md)
    HALF_ACCOUNT = "TXMQ_HALF_ACCOUNT"
    KEY_SEPARATOR = " "

    SYSTEM_KEYS: ClassVar[frozenset[str]] = frozenset(
        {
            KEYS, TAGS, WAIT_STORE_MSG_OK, DELAY_TIME_LEVEL, RETRY_TOPIC, REAL_TOPIC, REAL_QUEUE_ID,
            TRANSACTION_PREPARED, PRODUCER_GROUP, MIN_OFFSET, MAX_OFFSET, ORIGIN_MESSAGE_ID,
            UNIQ_CLIENT_MESSAGE_ID_KEYIDX, TRANSACTION_ID, TRANSACTION_CHECK_TIMES,
            CHECK_IMMUNITY_TIME_IN_SECONDS, TRANSACTION_PREPARED_QUEUE_OFFSET, RECONSUME_TIME,
            MAX_RECONSUME_TIMES, CONSUME_START_TIMESTAMP, MSG_REGION, TRACE_SWITCH, SHARDING_KEY,
        }
    )  # fmt: skip


def properties_to_string(props: Mapping[str, str]) -> str:
    """Encode properties as RocketMQ does: ``k\\x01v\\x02`` for each pair. A list, not a generator: compiled, a
    generator is two objects per call (every stored message)."""
    return "".join([f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items()])


@cython.locals(text=str, i=cython.Py_ssize_t, j=cython.Py_ssize_t, k=cython.Py_ssize_t, n=cython.Py_ssize_t)
def string_to_properties(text: str) -> dict[str, str]:
    """Decode ``k\\x01v\\x02...``; pairs without a separator are dropped, as RocketMQ does. Scanned with ``find``
    and slices, C calls when compiled: every send and every decoded record passes here, and a split list and a
    partition tuple per pair cost a third more."""
    props: dict[str, str] = {}
    n = len(text)
    i = 0
    while i < n:
        j = text.find(PROPERTY_SEPARATOR, i)
        if j < 0:
            j = n
        k = text.find(NAME_VALUE_SEPARATOR, i, j)
        if k >= 0:
            props[text[i:k]] = text[k + 1 : j]
        i = j + 1
    return props


def body_crc(body: bytes) -> int:
    return _crc32(body) & 0x7FFFFFFF


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: the tag hash that ConsumeQueue entries carry (tagsString2tagsCode)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


class Message:
    """A message as a producer builds it. ``tags`` and ``keys`` live in the properties, as in RocketMQ."""

    __slots__ = ("body", "flag", "properties", "topic", "transaction_id")

    def __init__(
        self,
        topic: str,
        body: bytes,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        flag: int = 0,
    ) -> None:
        self._init_message(topic, body, tags, keys, dict(properties or {}), flag)

    def _init_message(self, topic: str, body: bytes, tags: str | None, keys: str | Iterable[str] | None,
                      properties: dict[str, str], flag: int) -> None:
        """The message's own fields, for both classes' ``__init__``: compiled, a C method (message.pxd), where
        ``MessageExt`` calling ``Message.__init__`` would be a call through Python's argument parsing per message.
        ``properties`` becomes the message's own dict."""
        if isinstance(body, str):
            body = body.encode()
        self.topic = topic
        self.body = bytes(body)
        self.flag = flag
        self.properties: dict[str, str] = properties
        self.transaction_id: str | None = None
        if tags is not None:
            self.properties[MessageConst.TAGS] = tags
        if keys is not None:
            if not isinstance(keys, str):
                keys = MessageConst.KEY_SEPARATOR.join(keys)
            self.properties[MessageConst.KEYS] = keys

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(MessageConst.KEYS)

    @property
    def user_properties(self) -> dict[str, str]:
        """Properties minus the ones RocketMQ reserves."""
        return {k: v for k, v in self.properties.items() if k not in MessageConst.SYSTEM_KEYS}

    @property
    def delay_time_level(self) -> int:
        """The ``DELAY`` property; ``InvalidMessageError`` when the sender's value is not an integer."""
        raw = self.properties.get(MessageConst.DELAY_TIME_LEVEL) or "0"
        try:
            return int(raw)
        except ValueError:
            raise InvalidMessageError(f"property {MessageConst.DELAY_TIME_LEVEL} is not a delay level: "
                                      f"{raw[:40]!r}") from None

    @delay_time_level.setter
    def delay_time_level(self, level: int) -> None:
        """Deliver after the broker's ``messageDelayLevel`` entry ``level`` (1: 1s, 2: 5s, ... by default); 0: now."""
        if level < 0:
            raise InvalidMessageError(f"delay level {level}: 0 (none) or a level of messageDelayLevel")
        if level:
            self.properties[MessageConst.DELAY_TIME_LEVEL] = str(level)
        else:
            self.properties.pop(MessageConst.DELAY_TIME_LEVEL, None)

    def deliver_at(self, timestamp_ms: int) -> None:
        """A timer message: delivered at the wall-clock instant ``timestamp_ms`` (ms since the epoch), at once when
        it has passed (RocketMQ 5's ``TIMER_DELIVER_MS``)."""
        self._set_timer("TIMER_DELIVER_MS", int(timestamp_ms))

    def deliver_after(self, seconds: float) -> None:
        """A timer message: delivered ``seconds`` after the broker stores it (``TIMER_DELAY_MS``, counted from the
        broker's clock: a client clock that is off does not move it)."""
        self._set_timer("TIMER_DELAY_MS", round(seconds * 1000))

    def _set_timer(self, name: str, value: int) -> None:
        for other in ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"):
            self.properties.pop(other, None)
        self.properties[name] = str(value)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(topic={self.topic!r}, tags={self.tags!r}, keys={self.keys!r}, "
            f"body={len(self.body)}B)"
        )


class MessageExt(Message):
    """A stored message: the message plus what the broker knows of it (RocketMQ ``MessageExt``)."""

    __slots__ = (
        "body_crc",
        "born_host",
        "born_timestamp",
        "commit_log_offset",
        "prepared_transaction_offset",
        "queue_id",
        "queue_offset",
        "reconsume_times",
        "store_host",
        "store_size",
        "store_timestamp",
        "sys_flag",
    )

    def __init__(
        self,
        topic: str,
        body: bytes,
        properties: Mapping[str, str] | None = None,
        *,
        flag: int = 0,
        queue_id: int = 0,
        queue_offset: int = 0,
        commit_log_offset: int = 0,
        store_size: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: tuple[str, int] = ("127.0.0.1", 0),
        store_timestamp: int = 0,
        store_host: tuple[str, int] = ("127.0.0.1", 0),
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        body_crc: int = 0,
    ) -> None:
        self._init_message(topic, body, None, None, dict(properties or {}), flag)
        self._init_ext(queue_id, queue_offset, commit_log_offset, store_size, sys_flag, born_timestamp, born_host,
                       store_timestamp, store_host, reconsume_times, prepared_transaction_offset, body_crc)

    def _init_ext(self, queue_id: int, queue_offset: int, commit_log_offset: int, store_size: int, sys_flag: int,
                  born_timestamp: int, born_host: tuple[str, int], store_timestamp: int, store_host: tuple[str, int],
                  reconsume_times: int, prepared_transaction_offset: int, body_crc: int) -> None:
        """What the broker knows of the message, for ``__init__`` and ``inner_message``: compiled, a C method."""
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.store_size = store_size
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.body_crc = body_crc
        self.transaction_id = self.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def offset_msg_id(self) -> str:
        """The broker-side id: store host and commit-log offset (RocketMQ ``createMessageId``)."""
        return create_offset_msg_id(self.store_host, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        """The id users see: the client's ``UNIQ_KEY`` when it set one, else the offset id."""
        return self.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or self.offset_msg_id

    def copy(self) -> MessageExt:
        return decode_message(encode_message(self))[0]


_packed_hosts: dict[tuple[str, int], bytes] = {}
_topic_parts: dict[str, bytes] = {}
_CACHED = 1024  # hosts per cache: a handful, renewed as clients reconnect; a flood of new ones empties it
# Topics a broker stores to are its topic table's (10,000 and more): past the bound a topic's part is encoded per
# message, and the cache is never emptied (emptied, a send spread over more topics than it holds missed every time);
# a deleted topic's slot is freed (``forget_topic``). At most 16,384 names of at most 127 bytes: a few MB however
# many names a peer tries.
_CACHED_TOPICS = 16_384


def _packed_host(host: tuple[str, int]) -> bytes:
    """IPv4 (4) + port (4), as the layout stores a host: worked out once per host, every message has two."""
    packed = _packed_hosts.get(host)
    if packed is None:
        try:
            packed = _pack_host(socket.inet_aton(host[0]), host[1])
        except OSError as exc:
            raise InvalidMessageError(f"not an IPv4 address: {host[0]!r}") from exc
        except struct.error as exc:
            raise InvalidMessageError(f"a field does not fit the message layout: {exc}") from None
        if len(_packed_hosts) >= _CACHED:
            _packed_hosts.clear()
        _packed_hosts[host] = packed
    return packed


def _topic_part(topic: str) -> bytes:
    """TOPIC as the layout stores it, its length byte first: encoded once per topic."""
    part = _topic_parts.get(topic)
    if part is None:
        raw = topic.encode()
        if len(raw) > 127:
            raise InvalidMessageError(f"topic longer than 127 bytes: {topic[:40]!r}...")
        part = bytes((len(raw),)) + raw
        if len(_topic_parts) < _CACHED_TOPICS and topic.__class__ is str:  # a subclass could compare unlike itself
            _topic_parts[topic] = part
    return part


def forget_topic(topic: str) -> bool:
    """Free ``topic``'s slot in the cache of encoded topics (the topic was deleted): a full cache admits no new
    topic, so the slots of topics that are gone would keep new topics' parts out. True when it held one."""
    return _topic_parts.pop(topic, None) is not None


# The born timestamps a broker takes (ms since the epoch, UTC): 2000-01-01 to 2200-01-01, exclusive. Beyond, the
# producer's clock or its message is broken, and tools would have to print a date no calendar library holds.
BORN_TIMESTAMP_MIN = 946_684_800_000
BORN_TIMESTAMP_MAX = 7_258_118_400_000


def check_born_timestamp(ms: int) -> None:
    """``InvalidMessageError`` for a born timestamp outside the years 2000 to 2199: refused at the door (a send's
    answer says why), never stored."""
    if not BORN_TIMESTAMP_MIN <= ms < BORN_TIMESTAMP_MAX:
        raise InvalidMessageError(f"born timestamp {ms} is not between 2000-01-01 and 2200-01-01 (milliseconds since "
                                  "the epoch, UTC): is the producer's clock right?")


def inner_message(topic: str, body: bytes, properties: dict[str, str], flag: int, queue_id: int, sys_flag: int,
                  born_timestamp: int, born_host: tuple[str, int], store_host: tuple[str, int],
                  reconsume_times: int) -> MessageExt:
    """A message a producer sent, as the broker builds it to store (RocketMQ ``MessageExtBrokerInner``): compiled,
    a C call with positional fields where ``MessageExt(...)``'s keywords are parsed per send, and ``properties``
    (the request's freshly decoded dict) taken as the message's own, not copied."""
    m = MessageExt.__new__(MessageExt)
    m._init_message(topic, body, None, None, properties, flag)
    m._init_ext(queue_id, 0, 0, 0, sys_flag, born_timestamp, born_host, 0, store_host, reconsume_times, 0, 0)
    return m


def encode_message(m: MessageExt) -> bytes:
    """Encode ``m`` in RocketMQ's message layout (see the module docstring). Sets nothing on ``m``."""
    return b"".join(message_parts(m))


def message_parts(m: MessageExt, trailer: bytes = b"") -> tuple[bytes, ...]:
    """``encode_message``'s parts, to be joined; with ``trailer`` after them, counted in TOTALSIZE (the store joins
    its record straight into one buffer this way: ``txmq.store.record.encode_record``). Topics and hosts come
    packed from caches: per message only the properties are encoded."""
    topic = _topic_part(m.topic)
    props = properties_to_string(m.properties).encode()
    if len(props) > 32767:
        raise InvalidMessageError(f"properties longer than 32767 bytes ({len(props)})")
    body = m.body
    total = HEAD_SIZE + len(body) + len(topic) + 2 + len(props) + len(trailer)
    born = _packed_host(m.born_host)
    store = _packed_host(m.store_host)
    try:
        head = _pack_head(
            total, MESSAGE_MAGIC_CODE, body_crc(body), m.queue_id, m.flag, m.queue_offset, m.commit_log_offset,
            m.sys_flag, m.born_timestamp, born, m.store_timestamp, store, m.reconsume_times,
            m.prepared_transaction_offset, len(body),
        )  # fmt: skip
    except struct.error as exc:  # a field beyond its width (int32 flag, int64 born timestamp, ...)
        raise InvalidMessageError(f"a field does not fit the message layout: {exc}") from None
    return head, body, topic, _pack_props_len(len(props)), props, trailer


def decode_message(buf: bytes | memoryview, pos: int = 0, *, check_crc: bool = True) -> tuple[MessageExt, int]:
    """Decode one message at ``pos``; return it and the position after it.

    Raises ``RemoteProtocolError`` when the bytes are not a whole, valid message.
    """
    end_of_buf = len(buf)
    if end_of_buf - pos < HEAD_SIZE:
        raise RemoteProtocolError("message truncated before its fixed header")
    (
        total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_ip, born_port,
        store_ts, store_ip, store_port, reconsume, prepared, body_len,
    ) = _HEAD.unpack_from(buf, pos)  # fmt: skip
    if magic != MESSAGE_MAGIC_CODE:
        raise RemoteProtocolError(f"bad message magic {magic:#x}")
    end = pos + total
    if total < HEAD_SIZE + 3 or end > end_of_buf or body_len < 0 or HEAD_SIZE + body_len + 3 > total:
        raise RemoteProtocolError(f"bad message size {total} (body {body_len})")
    p = pos + HEAD_SIZE
    body = bytes(buf[p : p + body_len])
    p += body_len
    topic_len = buf[p]
    p += 1
    topic = bytes(buf[p : p + topic_len])
    p += topic_len
    if p + 2 > end:
        raise RemoteProtocolError("message truncated in its topic")
    props_len = int.from_bytes(buf[p : p + 2], "big")
    p += 2
    if p + props_len != end:
        raise RemoteProtocolError("message sizes do not add up to TOTALSIZE")
    if check_crc and body_crc(body) != crc:
        raise RemoteProtocolError("message body CRC mismatch")
    try:
        props = string_to_properties(bytes(buf[p:end]).decode())
        topic_s = topic.decode()
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError("message topic or properties are not UTF-8") from exc
    msg = MessageExt(
        topic_s, body, props, flag=flag, queue_id=queue_id, queue_offset=queue_offset,
        commit_log_offset=phys, store_size=total, sys_flag=sys_flag, born_timestamp=born_ts,
        born_host=(socket.inet_ntoa(born_ip), born_port), store_timestamp=store_ts,
        store_host=(socket.inet_ntoa(store_ip), store_port), reconsume_times=reconsume,
        prepared_transaction_offset=prepared, body_crc=crc,
    )  # fmt: skip
    return msg, end


def decode_messages(buf: bytes | memoryview, *, check_crc: bool = True) -> list[MessageExt]:
    """Decode a run of messages (a pull response body)."""
    out: list[MessageExt] = []
    pos = 0
    while pos < len(buf):
        msg, pos = decode_message(buf, pos, check_crc=check_crc)
        out.append(msg)
    return out


# --- batches ---------------------------------------------------------------------------------------
#
# A batch send carries several messages of one topic in one body (RocketMQ ``MessageDecoder.encodeMessages``):
# per message TOTALSIZE (4), MAGICCODE (4, unused), BODYCRC (4), FLAG (4), BODY (4+n), PROPERTIES (2+p).

_BATCH_HEAD = struct.Struct(">iiiii")


def encode_batch(messages: Iterable[Message]) -> bytes:
    parts = []
    for m in messages:
        props = properties_to_string(m.properties).encode()
        total = _BATCH_HEAD.size + len(m.body) + 2 + len(props)
        parts += [_BATCH_HEAD.pack(total, 0, body_crc(m.body), m.flag, len(m.body)), m.body,
                  len(props).to_bytes(2, "big"), props]
    return b"".join(parts)


def decode_batch(body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """Returns (flag, body, properties) per message; ``RemoteProtocolError`` when the layout is broken."""
    out = []
    pos = 0
    n = len(body)
    while pos < n:
        if n - pos < _BATCH_HEAD.size:
            raise RemoteProtocolError("batch body truncated")
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(body, pos)
        end = pos + total
        if total < _BATCH_HEAD.size + 2 or end > n or body_len < 0 or _BATCH_HEAD.size + body_len + 2 > total:
            raise RemoteProtocolError(f"bad batch entry size {total}")
        p = pos + _BATCH_HEAD.size
        data = body[p : p + body_len]
        p += body_len
        props_len = int.from_bytes(body[p : p + 2], "big")
        p += 2
        if p + props_len != end:
            raise RemoteProtocolError("batch entry sizes do not add up")
        try:
            props = string_to_properties(body[p:end].decode())
        except UnicodeDecodeError as exc:
            raise RemoteProtocolError("batch entry properties are not UTF-8") from exc
        out.append((flag, data, props))
        pos = end
    return out


# --- ids -------------------------------------------------------------------------------------------


def create_offset_msg_id(store_host: tuple[str, int], commit_log_offset: int) -> str:
    """32 uppercase hex digits: IPv4 (4), port (4), commit-log offset (8, signed) (RocketMQ ``createMessageId``).
    The host's 16 digits are worked out once per host: every stored put asks."""
    host_id = _host_ids.get(store_host)
    if host_id is None:
        host_id = _packed_host(store_host).hex().upper()
        if len(_host_ids) >= _CACHED:
            _host_ids.clear()
        _host_ids[store_host] = host_id
    return host_id + _pack_offset(commit_log_offset).hex().upper()


_host_ids: dict[tuple[str, int], str] = {}


def decode_offset_msg_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """Inverse of ``create_offset_msg_id``: ((ip, port), commit-log offset)."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as exc:
        raise InvalidMessageError(f"not a message id: {msg_id!r}") from exc
    if len(raw) != 16:
        raise InvalidMessageError(f"not a message id: {msg_id!r}")
    port, offset = struct.unpack(">iq", raw[4:])
    return (socket.inet_ntoa(raw[:4]), port), offset


class UniqIdGenerator:
    """Client message ids (``UNIQ_KEY``), also used as transaction ids.

    RocketMQ's ``MessageClientIDSetter`` scheme: a prefix naming the process (IPv4, pid, a random salt) and a
    suffix of 32 bits of ms since the start of the current UTC month and a 16-bit counter. The time field is
    unsigned here (Java casts it to ``int``, which wraps negative after day 24.86; the bytes are the same), so a
    31-day month fits. At each month boundary the field starts again from 0 and the salt moves up by one, so a
    process's ids stay unique and in order across every boundary; a clock that steps back keeps counting on from
    the last id instead, and one stepped back past the start of the month its ids are in counts from that start (the
    field is unsigned: a negative time would wrap to 49.7 days). ``clock_ms`` (epoch ms) is injectable for tests.
    """

    def __init__(self, ip: str = "127.0.0.1", clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000
                 ) -> None:
        try:
            ip_bytes = socket.inet_aton(ip)
        except OSError:
            ip_bytes = b"\x7f\x00\x00\x01"
        self._host = ip_bytes + struct.pack(">H", os.getpid() & 0xFFFF)
        self._salt = int.from_bytes(os.urandom(4)) & 0x7FFFFFFF  # top bit clear: 2^31 month boundaries of headroom
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._month_start = self._next_month_start = 0
        self._start_month(clock_ms())

    def _start_month(self, now_ms: int) -> None:
        self._month_start, self._next_month_start = month_bounds_ms(now_ms)
        self._prefix = (self._host + struct.pack(">I", self._salt)).hex().upper()
        self._last = (-1, 0)

    def next_id(self) -> str:
        with self._lock:
            now = self._clock_ms()
            if now >= self._next_month_start:
                self._salt = (self._salt + 1) & 0xFFFFFFFF
                self._start_month(now)
            key = (max(0, now - self._month_start), next(self._counter) & 0xFFFF)
            if key <= self._last:  # same ms and the counter wrapped, or the clock stepped back
                last_ms, last_seq = self._last
                key = (last_ms + (1 if last_seq == 0xFFFF else 0), (last_seq + 1) & 0xFFFF)
            self._last = key
            return self._prefix + struct.pack(">IH", key[0] & 0xFFFFFFFF, key[1]).hex().upper()


def month_bounds_ms(epoch_ms: int) -> tuple[int, int]:
    """The UTC month holding ``epoch_ms``: (its first ms, the next month's first ms)."""
    day = datetime.datetime.fromtimestamp(epoch_ms / 1000, datetime.UTC)
    start = datetime.datetime(day.year, day.month, 1, tzinfo=datetime.UTC)
    following = datetime.datetime(day.year + day.month // 12, day.month % 12 + 1, 1, tzinfo=datetime.UTC)
    return int(start.timestamp()) * 1000, int(following.timestamp()) * 1000


_default_ids = UniqIdGenerator()


def create_uniq_id() -> str:
    return _default_ids.next_id()
