"""protobuf <-> txmq: statuses (the broker core's refusals among them), born hosts, messages and transaction ids.
No IO here.

A transaction id names the half message: ``commit-log offset`` and ``half queue offset`` as 16 hex digits each
(what END_TRANSACTION carries over remoting as ``commitLogOffset`` and ``tranStateTableOffset``).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import time
import zlib

from google.protobuf import duration_pb2, timestamp_pb2

from txmq.broker.core.refusal import Kind, Refusal
from txmq.broker.core.send import BROKER_PROPERTIES
from txmq.broker.timer import TIMER_DELIVER_MS, TIMER_PROPERTIES
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.message import MessageConst, MessageExt, MessageSysFlag
from txmq.store import PutMessageStatus

Code = pb.Code

# Properties the gRPC surface carries in its own fields: never copied into user_properties.
_HIDDEN_PROPERTIES = MessageConst.SYSTEM_KEYS | TIMER_PROPERTIES
# Refused in a client's user_properties: those, and the properties only the broker sets (refused by every protocol).
_RESERVED_PROPERTIES = _HIDDEN_PROPERTIES | frozenset(BROKER_PROPERTIES)

PUT_STATUS_CODES = {
    PutMessageStatus.PUT_OK: Code.OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    PutMessageStatus.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: Code.MESSAGE_PROPERTIES_TOO_LARGE,
    PutMessageStatus.NOT_ACKNOWLEDGED: Code.HA_NOT_AVAILABLE,
}


# The broker core's refusals in gRPC's terms.
REFUSAL_CODES: dict[Kind, int] = {
    Kind.NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    Kind.ILLEGAL_TOPIC: Code.ILLEGAL_TOPIC,
    Kind.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    Kind.ILLEGAL_QUEUE: Code.BAD_REQUEST,
    Kind.NO_PERMISSION: Code.FORBIDDEN,
    Kind.BODY_TOO_LARGE: Code.MESSAGE_BODY_TOO_LARGE,
    Kind.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    Kind.RESERVED_PROPERTY: Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
    Kind.ILLEGAL_DELIVERY_TIME: Code.ILLEGAL_DELIVERY_TIME,
    Kind.BUSY: Code.TOO_MANY_REQUESTS,
    Kind.INVALID_HANDLE: Code.INVALID_RECEIPT_HANDLE,
    Kind.MESSAGE_GONE: Code.MESSAGE_NOT_FOUND,
    Kind.STORE_FAILED: Code.INTERNAL_SERVER_ERROR,
}


class GrpcStatusError(Exception):
    """A request the endpoint refuses, with the ``apache.rocketmq.v2.Code`` to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status(code: int = Code.OK, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)  # type: ignore[arg-type]


def refusal_status(refusal: Refusal) -> pb.Status:
    """The status that answers a refusal of the broker core."""
    return status(REFUSAL_CODES[refusal.kind], refusal.message)


# The OK of the hot paths (a send's entry, EndTransaction), copied into each response: protobuf copies a message
# given to a constructor or to ``CopyFrom``, so no response ever holds this one to change it.
STATUS_OK = status()


def timestamp_ms(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def ms_of_timestamp(ts: timestamp_pb2.Timestamp, what: str = "timestamp") -> int:
    """Milliseconds since the epoch; BAD_REQUEST beyond what the message layout holds (a signed 64-bit ms)."""
    ms = ts.seconds * 1000 + ts.nanos // 1_000_000
    if not -(1 << 63) <= ms < 1 << 63:
        raise GrpcStatusError(Code.BAD_REQUEST, f"{what} {ts.seconds} s is out of range")
    return ms


def duration_ms(d: duration_pb2.Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


# A well-formed protobuf Duration: within 10,000 years either way, its nanos of its seconds' sign (the Java side's
# ``Durations.checkValid``, which RocketMQ's proxy applies when it reads one).
_DURATION_MAX_S = 315_576_000_000
_NANOS_MAX = 999_999_999


def bounded_ms(d: duration_pb2.Duration, what: str, code: int, low: int, high: int | None) -> int:
    """A duration a client sent, in ms; ``GrpcStatusError`` ``code`` unless it is well-formed and within ``low`` to
    ``high`` ms (None: no upper bound), so that no request stores or waits on a duration the broker never meant to
    take (2^62 ms, a negative one)."""
    s, n = d.seconds, d.nanos
    if abs(s) > _DURATION_MAX_S or abs(n) > _NANOS_MAX or s > 0 > n or s < 0 < n:
        raise GrpcStatusError(code, f"{what} is not a well-formed duration ({s} s, {n} ns)")
    ms = duration_ms(d)
    if ms < low or (high is not None and ms > high):
        bound = f"{low} ms or more" if high is None else f"{low} to {high} ms"
        raise GrpcStatusError(code, f"{what} of {ms} ms is out of range: {bound}")
    return ms


def duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def delivery_ms(ts: timestamp_pb2.Timestamp) -> int:
    """A delivery timestamp in ms. ``rocketmq-python-client`` 5.1.2 writes milliseconds into ``seconds``: a value
    past the year 5000 in seconds is read as milliseconds."""
    if ts.seconds > 100_000_000_000:
        return ts.seconds
    return ms_of_timestamp(ts)


def now_ms() -> int:
    return int(time.time() * 1000)


def peer_host(peer: str) -> tuple[str, int]:
    """A client's address from grpcio's peer string (``ipv4:host:port``); 0.0.0.0:0 for any other kind."""
    if peer.startswith("ipv4:"):
        host, _, port = peer[5:].rpartition(":")
        with contextlib.suppress(ValueError):
            return host, int(port)
    return ("0.0.0.0", 0)


class BornHosts:
    """The born host of a client's messages by grpcio's peer string, parsed once: a connection sends all its
    messages from one peer string. At most ``limit`` are kept (a memo, not a table of clients: past the limit it
    starts again)."""

    __slots__ = ("_hosts", "limit")

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._hosts: dict[str, tuple[str, int]] = {}

    def of(self, peer: str) -> tuple[str, int]:
        host = self._hosts.get(peer)
        if host is None:
            if len(self._hosts) >= self.limit:
                self._hosts.clear()
            host = self._hosts[peer] = peer_host(peer)
        return host

    def __len__(self) -> int:
        return len(self._hosts)


# --- transaction ids ------------------------------------------------------------------


def transaction_id(commit_log_offset: int, half_offset: int) -> str:
    return f"{commit_log_offset:016X}{half_offset:016X}"


def parse_transaction_id(text: str) -> tuple[int, int]:
    """(commit-log offset, half queue offset); raises ``GrpcStatusError`` INVALID_TRANSACTION_ID."""
    if len(text) != 32:
        raise GrpcStatusError(Code.INVALID_TRANSACTION_ID, f"transaction id {text!r} is not one txmq gave out")
    try:
        return int(text[:16], 16), int(text[16:], 16)
    except ValueError:
        raise GrpcStatusError(Code.INVALID_TRANSACTION_ID,
                              f"transaction id {text!r} is not one txmq gave out") from None


# --- messages -----------------------------------------------------------------------------------------------


def body_digest(body: bytes, md5: bool = False) -> pb.Digest:
    """CRC32 as 8 uppercase hex digits (what RocketMQ's proxy sends, and the Java and Python clients check), or
    MD5 as uppercase hex for clients that check CRC32 in another format (the Node.js client 1.0.8 compares
    it with a decimal string and discards every message in its PushConsumer)."""
    if md5:
        return pb.Digest(type=pb.MD5, checksum=hashlib.md5(body).hexdigest().upper())
    return pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(body) & 0xFFFFFFFF:08X}")


def decode_body(m: pb.Message, limit: int) -> bytes:
    """The message's body, a GZIP one unzipped to at most ``limit`` bytes (maxMessageSize): a few KB of a peer's
    may unzip to gigabytes, so unzipping stops there and the body is refused as too large."""
    enc = m.system_properties.body_encoding
    if enc == pb.GZIP:
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(m.body)) as unzipped:
                body = unzipped.read(limit + 1)
        except (OSError, EOFError, zlib.error):
            raise GrpcStatusError(Code.MESSAGE_CORRUPTED, "body_encoding GZIP but the body does not unzip") from None
        if len(body) > limit:
            raise GrpcStatusError(Code.MESSAGE_BODY_TOO_LARGE, f"the message body size over max value, MAX: {limit} "
                                                               "(maxMessageSize; this GZIP body unzips to more)")
        return body
    return bytes(m.body)


def message_type_of(m: MessageExt) -> int:
    if m.properties.get(MessageConst.SHARDING_KEY):
        return pb.FIFO
    if m.properties.get(TIMER_DELIVER_MS):
        return pb.DELAY
    if MessageSysFlag.transaction_value(m.sys_flag) == MessageSysFlag.TRANSACTION_COMMIT_TYPE \
            or m.properties.get(MessageConst.TRANSACTION_PREPARED) == "true":
        return pb.TRANSACTION
    return pb.NORMAL


def to_pb_message(m: MessageExt, *, topic: str | None = None, queue_id: int | None = None,
                  queue_offset: int | None = None, receipt_handle: str | None = None,
                  invisible_ms: int | None = None, delivery_attempt: int | None = None,
                  md5_digest: bool = False) -> pb.Message:
    """A stored message as the 5.x clients expect it (receipt handle, message id, IDENTITY
    encoding, CRC32 digest)."""
    body = m.body
    if m.sys_flag & MessageSysFlag.COMPRESSED:
        body = zlib.decompress(body)
    props = m.properties
    sp = pb.SystemProperties(
        message_id=m.msg_id,
        body_digest=body_digest(body, md5_digest),
        body_encoding=pb.IDENTITY,
        message_type=message_type_of(m),  # type: ignore[arg-type]
        born_timestamp=timestamp_ms(m.born_timestamp),
        born_host=m.born_host[0],
        store_timestamp=timestamp_ms(m.store_timestamp),
        store_host=f"{m.store_host[0]}:{m.store_host[1]}",
        queue_id=m.queue_id if queue_id is None else queue_id,
        queue_offset=m.queue_offset if queue_offset is None else queue_offset,
    )
    tags = props.get(MessageConst.TAGS)
    if tags:
        sp.tag = tags
    keys = props.get(MessageConst.KEYS)
    if keys:
        sp.keys.extend(k for k in keys.split(MessageConst.KEY_SEPARATOR) if k)
    group = props.get(MessageConst.SHARDING_KEY)
    if group:
        sp.message_group = group
    deliver = props.get(TIMER_DELIVER_MS)
    if deliver and deliver.isdigit():
        sp.delivery_timestamp.CopyFrom(timestamp_ms(int(deliver)))
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    if invisible_ms is not None:
        sp.invisible_duration.CopyFrom(duration(invisible_ms))
    if delivery_attempt is not None:
        sp.delivery_attempt = delivery_attempt
    user = {k: v for k, v in props.items() if k not in _HIDDEN_PROPERTIES}
    return pb.Message(topic=pb.Resource(name=topic or m.topic), user_properties=user, system_properties=sp,
                      body=body)


def from_pb_message(m: pb.Message, body: bytes) -> tuple[str, dict[str, str]]:
    """Topic and txmq properties of a message a 5.x client sends (type-specific ones are added by the caller)."""
    sp = m.system_properties
    user = m.user_properties
    # By key: protobuf's map has no C ``items()`` (``Mapping.items`` in Python costs twice as much); none is commonest.
    props: dict[str, str] = {key: user[key] for key in user} if user else {}
    if props and not _RESERVED_PROPERTIES.isdisjoint(props):
        key = next(k for k in props if k in _RESERVED_PROPERTIES)
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                              f"user property {key!r} is a system property (set by the broker or its own field)")
    if sp.HasField("tag"):
        if not sp.tag.strip() or "|" in sp.tag:
            raise GrpcStatusError(Code.ILLEGAL_MESSAGE_TAG, f"illegal tag {sp.tag!r}")
        props[MessageConst.TAGS] = sp.tag
    if sp.keys:
        for k in sp.keys:
            if not k.strip() or MessageConst.KEY_SEPARATOR in k:
                raise GrpcStatusError(Code.ILLEGAL_MESSAGE_KEY, f"illegal message key {k!r}")
        props[MessageConst.KEYS] = MessageConst.KEY_SEPARATOR.join(sp.keys)
    if sp.message_id:
        props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = sp.message_id
    return m.topic.name, props
