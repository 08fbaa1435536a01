"""The HA wire protocol: a handshake, then RocketMQ's transfer frames.

Handshake (txmq's; RocketMQ has none), all integers big-endian:

    slave -> master   HELLO    "TXHA" | version H | broker id I | segment size q | max offset q | tail 8s
                               | cluster H+utf8 | broker name H+utf8
    master -> slave   WELCOME  "TXHA" | status B (0 accepted, 1 refused) | max offset q | min offset q
                               | tail 8s | remark H+utf8

``tail`` is the 8 bytes of the sender's log before an offset (the slave's: before its max offset; the
master's: before min(slave's max, master's max)): the last record's trailer CRC, so equal tails mean both
logs end with the same record there. Then, as RocketMQ's HAConnection/HAClient:

    slave -> master   offset q                       the slave's max offset (first one: where to start)
    master -> slave   offset q | size i | confirm q | data
                                                     the log from ``offset``; size 0 is a keep-alive

``confirm`` (version 2) is the master's confirm offset (RocketMQ's AutoSwitchHAConnection sends its confirmOffset
in the same place): in controller mode, what every SyncStateSet member has; the slave bounds its own consumers'
reads by it (capped at its own log's end). -1: the master has no bound (not in controller mode), nor the slave.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

MAGIC = b"TXHA"
VERSION = 2  # 2: the confirm offset in every transfer header
MAX_NAME = 255
MAX_REMARK = 1024
HELLO = struct.Struct(">4sHIqq8s")
WELCOME = struct.Struct(">4sBqq8s")
TRANSFER_HEADER = struct.Struct(">qiq")  # RocketMQ: phyOffset + bodySize, then confirmOffset
REPORT = struct.Struct(">q")  # RocketMQ: the slave's max offset
_LEN = struct.Struct(">H")


class HandshakeError(Exception):
    """The peer is not a txmq HA peer of this group, or broke the protocol."""


@dataclass(frozen=True, slots=True)
class Hello:
    broker_id: int
    segment_size: int
    max_offset: int
    tail: bytes
    cluster: str
    broker_name: str
    version: int = VERSION  # a peer of another version is refused with a Welcome saying so (same layout in 1)

    def encode(self) -> bytes:
        head = HELLO.pack(MAGIC, self.version, self.broker_id, self.segment_size, self.max_offset, self.tail)
        return head + _text(self.cluster) + _text(self.broker_name)


@dataclass(frozen=True, slots=True)
class Welcome:
    accepted: bool
    max_offset: int
    min_offset: int
    tail: bytes
    remark: str = ""

    def encode(self) -> bytes:
        head = WELCOME.pack(MAGIC, 0 if self.accepted else 1, self.max_offset, self.min_offset, self.tail)
        return head + _text(self.remark[:MAX_REMARK])


def _text(value: str) -> bytes:
    raw = value.encode()
    return _LEN.pack(len(raw)) + raw


async def _read_text(reader: asyncio.StreamReader, limit: int) -> str:
    (n,) = _LEN.unpack(await reader.readexactly(_LEN.size))
    if n > limit:
        raise HandshakeError(f"a name of {n} bytes (at most {limit})")
    try:
        return (await reader.readexactly(n)).decode()
    except UnicodeDecodeError as exc:
        raise HandshakeError("a name that is not UTF-8") from exc


async def read_hello(reader: asyncio.StreamReader) -> Hello:
    magic, version, broker_id, segment_size, max_offset, tail = HELLO.unpack(await reader.readexactly(HELLO.size))
    if magic != MAGIC:
        raise HandshakeError(f"not a txmq HA hello (first bytes {magic!r})")
    if max_offset < 0 or segment_size <= 0:
        raise HandshakeError(f"impossible offsets (max {max_offset}, segment size {segment_size})")
    cluster = await _read_text(reader, MAX_NAME)
    name = await _read_text(reader, MAX_NAME)
    return Hello(broker_id, segment_size, max_offset, tail, cluster, name, version)


async def read_welcome(reader: asyncio.StreamReader) -> Welcome:
    magic, status, max_offset, min_offset, tail = WELCOME.unpack(await reader.readexactly(WELCOME.size))
    if magic != MAGIC or status not in (0, 1) or not 0 <= min_offset <= max_offset:
        raise HandshakeError("not a txmq HA master's answer")
    remark = await _read_text(reader, MAX_REMARK)
    return Welcome(status == 0, max_offset, min_offset, tail, remark)
