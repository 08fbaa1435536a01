"""The HA wire protocol: an authentication exchange, a handshake, then RocketMQ's transfer frames.

Opening (txmq's; RocketMQ has none), all integers big-endian, ``H+utf8`` a length-prefixed string:

    slave -> master   OPEN       "TXHA" | version H | broker id I | nonce 32s | access key H+utf8
    master -> slave   CHALLENGE  "TXHA" | mode B (0 authenticate, 2 open) | nonce 32s
                      or a refusing WELCOME (mode 1, below), which a slave of any version reads
    slave -> master   PROOF      32s                  (mode 0 only)
    master -> slave   PROOF      32s                  (mode 0 only, once the slave's proof is checked)

An empty access key: the slave does not authenticate. Mode 0 (the master has aclEnable): each side proves it
holds the secretKey of the slave's account (``txmq.store.ha.auth``); a slave's proof that fails ends the
connection without another byte. Mode 2 (aclEnable off): no proofs, the handshake follows at once. Then:

    slave -> master   HELLO      "TXHA" | version H | broker id I | segment size q | max offset q | tail 8s
                                 | cluster H+utf8 | broker name H+utf8
    master -> slave   WELCOME    "TXHA" | status B (0 accepted, 1 refused) | max offset q | min offset q
                                 | tail 8s | remark H+utf8

``tail`` is the 8 bytes of the sender's log before an offset (the slave's: before its max offset; the
master's: before min(slave's max, master's max)): the last record's trailer CRC, so equal tails mean both
logs end with the same record there. Then, as RocketMQ's HAConnection/HAClient:

    slave -> master   offset q                       the slave's max offset (first one: where to start)
    master -> slave   offset q | size i | confirm q | data
                                                     the log from ``offset``; size 0 is a keep-alive

``confirm`` (since version 2) is the master's confirm offset (RocketMQ's AutoSwitchHAConnection sends its
confirmOffset in the same place): in controller mode, what every SyncStateSet member has; the slave bounds its own
consumers' reads by it (capped at its own log's end). -1: the master has no bound (not in controller mode).

Since version 4 a transfer frame goes on with the master's store clock (``txmq.store.clock``), what the slave needs
to age each record from the moment its master wrote it:

                                 ... | account q | count H | count x (anchor offset q | skew q | since q)

``account``: the master's elapsed-time account as it sends the frame; the anchors: those of its time line that map
the frame's records (the one ``offset`` is under, then those before ``offset + size``), ``since`` ``NO_SINCE``
for none. A master speaks the version of the slave's OPEN (3 or 4); a slave refused by a master of version 3
(whose refusal names it) opens again speaking 3, and ages its master's records as version 3 did.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import struct
from dataclasses import dataclass

MAGIC = b"TXHA"
VERSION = 4  # 2: the confirm offset in every transfer header; 3: OPEN and the proofs before the HELLO; 4: the clock
SPOKEN = (3, 4)  # the versions this member speaks: a master answers each slave in the version of its OPEN
CLOCK_VERSION = 4  # from this version on, transfer frames carry the master's account and anchors
HANDSHAKE_TIMEOUT_S = 3.0  # from the OPEN to the WELCOME (the proofs and the HELLO); a TLS handshake has as long again
MAX_NAME = 255
MAX_REMARK = 1024
NONCE_SIZE = 32
PROOF_SIZE = 32  # HMAC-SHA256
PREFIX = struct.Struct(">4sH")  # what every version's first message starts with: magic, version
OPEN = struct.Struct(f">I{NONCE_SIZE}s")  # after the prefix
CHALLENGE = struct.Struct(f">4sB{NONCE_SIZE}s")
AUTHENTICATE, REFUSED, OPEN_MODE = 0, 1, 2  # CHALLENGE modes (1: the WELCOME of a refusal)
HELLO = struct.Struct(">4sHIqq8s")
WELCOME = struct.Struct(">4sBqq8s")
TRANSFER_HEADER = struct.Struct(">qiq")  # RocketMQ: phyOffset + bodySize, then confirmOffset
CLOCK_HEADER = struct.Struct(">qH")  # after TRANSFER_HEADER (version 4): the master's account, its anchors' count
ANCHOR = struct.Struct(">qqq")  # offset, skew, since
NO_SINCE = -(1 << 63)
# What a real clock can send: an account of at most a century, anchors' skews (wall minus account) within three, the
# wall clock's millisecond count before 2200 (broker.conf's rule for stamps): more is a broken or hostile master,
# whose values would age every copied record as ancient (retention deleting them) or overflow a promoted slave's own
# frames. Such a frame is refused as any malformed one: the slave reconnects. An anchor's ``since`` may be below zero
# by up to a century: a promoted slave maps its old master's records on its own account, and those written before
# that account began (the slave's store opened after them) were written before its zero.
MAX_ACCOUNT_MS = 100 * 365 * 86_400_000
MAX_SKEW_MS = 3 * MAX_ACCOUNT_MS
REPORT = struct.Struct(">q")  # RocketMQ: the slave's max offset
_REFUSED_VERSION = re.compile(r"HA protocol version \d+, this member (\d+)")
_LEN = struct.Struct(">H")


class HandshakeError(Exception):
    """The peer is not a txmq HA peer of this group, or broke the protocol."""


class VersionMismatch(HandshakeError):
    """The peer speaks another version of the protocol (answered with a WELCOME saying which is spoken here; the
    wording is what a slave reads the master's version from, ``older_master``)."""

    def __init__(self, version: int) -> None:
        super().__init__(f"peer speaks HA protocol version {version}, this member {VERSION}: upgrade it")
        self.version = version


class OlderMaster(HandshakeError):
    """The master refused this slave's version and speaks ``version``, which this slave speaks too."""

    def __init__(self, version: int) -> None:
        super().__init__(f"the master speaks HA protocol version {version}")
        self.version = version


def older_master(remark: str) -> OlderMaster | None:
    """A master's refusal that names a version this slave speaks (older than its own)."""
    found = _REFUSED_VERSION.search(remark)
    spoken = int(found.group(1)) if found else 0
    return OlderMaster(spoken) if spoken in SPOKEN and spoken < VERSION else None


@dataclass(frozen=True, slots=True)
class Open:
    broker_id: int
    nonce: bytes
    access_key: str = ""  # empty: this slave does not authenticate
    version: int = VERSION

    def encode(self) -> bytes:
        return PREFIX.pack(MAGIC, self.version) + OPEN.pack(self.broker_id, self.nonce) + _text(self.access_key)


@dataclass(frozen=True, slots=True)
class Challenge:
    authenticate: bool  # False: the master does not authenticate (aclEnable off)
    nonce: bytes

    def encode(self) -> bytes:
        return CHALLENGE.pack(MAGIC, AUTHENTICATE if self.authenticate else OPEN_MODE, self.nonce)


@dataclass(frozen=True, slots=True)
class Hello:
    broker_id: int
    segment_size: int
    max_offset: int
    tail: bytes
    cluster: str
    broker_name: str
    version: int = VERSION

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


Anchor = tuple[int, int, int | None]  # a store clock's (offset, skew, since)


@dataclass(frozen=True, slots=True)
class Transfer:
    """One transfer frame's header: ``size`` bytes of the log from ``offset`` follow it. ``account`` None: a
    version 3 frame (no clock)."""

    offset: int
    size: int
    confirm: int
    account: int | None = None
    anchors: tuple[Anchor, ...] = ()

    def encode(self) -> bytes:
        head = TRANSFER_HEADER.pack(self.offset, self.size, self.confirm)
        if self.account is None:
            return head
        return head + CLOCK_HEADER.pack(self.account, len(self.anchors)) + b"".join(
            ANCHOR.pack(at, skew, NO_SINCE if since is None else since) for at, skew, since in self.anchors)


async def read_transfer(reader: asyncio.StreamReader, version: int) -> Transfer:
    """A transfer frame's header as a master of ``version`` sends it."""
    offset, size, confirm = TRANSFER_HEADER.unpack(await reader.readexactly(TRANSFER_HEADER.size))
    if version < CLOCK_VERSION:
        return Transfer(offset, size, confirm)
    account, count = CLOCK_HEADER.unpack(await reader.readexactly(CLOCK_HEADER.size))
    raw = await reader.readexactly(count * ANCHOR.size)
    anchors = tuple((at, skew, None if since == NO_SINCE else since) for at, skew, since in ANCHOR.iter_unpack(raw))
    if any(b[0] <= a[0] for a, b in itertools.pairwise(anchors)):
        raise HandshakeError("a transfer frame's anchors are not in offset order")
    if not 0 <= account <= MAX_ACCOUNT_MS or any(
            at < 0 or abs(skew) > MAX_SKEW_MS or not (since is None or -MAX_ACCOUNT_MS <= since <= account)
            for at, skew, since in anchors):
        raise HandshakeError("a transfer frame's account or anchors are out of any real clock's range")
    return Transfer(offset, size, confirm, account, anchors)


def refusal(remark: str) -> bytes:
    """A refusing WELCOME: what a slave of any version reads as "refused, because ``remark``"."""
    return Welcome(False, 0, 0, bytes(8), remark).encode()


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


async def read_open(reader: asyncio.StreamReader) -> Open:
    magic, version = PREFIX.unpack(await reader.readexactly(PREFIX.size))
    if magic != MAGIC:
        raise HandshakeError(f"not a txmq HA peer (first bytes {magic!r})")
    if version not in SPOKEN:
        raise VersionMismatch(version)
    broker_id, nonce = OPEN.unpack(await reader.readexactly(OPEN.size))
    return Open(broker_id, nonce, await _read_text(reader, MAX_NAME), version)


async def read_challenge(reader: asyncio.StreamReader) -> Challenge | Welcome:
    """The master's answer to an OPEN: its challenge, or a refusal."""
    head = await reader.readexactly(5)
    if head[:4] != MAGIC or head[4] not in (AUTHENTICATE, REFUSED, OPEN_MODE):
        raise HandshakeError("not a txmq HA master's answer")
    if head[4] == REFUSED:
        return await _read_welcome_after(head, reader)
    nonce = await reader.readexactly(NONCE_SIZE)
    return Challenge(head[4] == AUTHENTICATE, nonce)


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
    return await _read_welcome_after(b"", reader)


async def _read_welcome_after(head: bytes, reader: asyncio.StreamReader) -> Welcome:
    raw = head + await reader.readexactly(WELCOME.size - len(head))
    magic, status, max_offset, min_offset, tail = WELCOME.unpack(raw)
    if magic != MAGIC or status not in (0, 1) or not 0 <= min_offset <= max_offset:
        raise HandshakeError("not a txmq HA master's answer")
    remark = await _read_text(reader, MAX_REMARK)
    return Welcome(status == 0, max_offset, min_offset, tail, remark)
