"""Clients connected over gRPC: one session per account and ``x-mq-client-id``, with the settings its Telemetry
stream sent and an outbox per open stream for what the broker sends on it (the answers to that stream's own
Settings, and commands the broker pushes to the client, such as check-backs).

``GrpcCheckSender`` is the check-back's way to reach gRPC producers: a transaction's producer group is its topic
(as with RocketMQ's proxy, where a 5.x producer registers under each topic it declares), so a check goes to a
live producer session whose settings list that topic, as a ``RecoverOrphanedTransactionCommand``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from txmq.broker.config import BrokerConfig
from txmq.grpc.convert import Code, GrpcStatusError, status, to_pb_message, transaction_id
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.message import MessageConst, MessageExt
from txmq.refusals import RefusalLog

log = logging.getLogger("txmq.grpc")

# What one Telemetry stream's outbox holds: commands, and bytes of check-backs (each carries its half message's
# body); and the check-back bytes of every outbox together. A check-back that does not fit is not sent: the check
# pass tries it again at its next check (``GrpcCheckSender``).
OUTBOX_LIMIT = 1024
OUTBOX_MAX_BYTES = 4 * 1024 * 1024
OUTBOXES_MAX_BYTES = 64 * 1024 * 1024
# Telemetry streams one client id may have open at once, whatever its account (with ACL off too): an official
# client keeps one per endpoint, and a second while it reconnects.
STREAMS_PER_CLIENT = 16
DEFAULT_SESSIONS_PER_ACCOUNT = BrokerConfig.grpc_max_sessions_per_account
MAX_SESSIONS = 65536  # every account's together (and every client's with ACL off)
# Publishing topics a producer's Settings may name, and that every session keeps together: a Settings is at most a
# message's size (4 MiB), a million short names, and each session kept its own set of them.
TOPICS_PER_SETTINGS = 1024
MAX_PUBLISHING_TOPICS = 262_144


class OutboxBytes:
    """The check-back bytes every outbox of an endpoint holds, at most ``limit`` (one idle outbox excepted: see
    ``_fits``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0


def _fits(held: int, size: int, limit: int) -> bool:
    """Room for ``size`` more bytes where ``held`` are: within ``limit``, or any size where none are (a check-back
    of a message larger than the bound still reaches a stream that keeps up)."""
    return held == 0 or held + size <= limit


Sending = tuple[spb.TelemetryCommand, int]  # a command and the check-back bytes it counts for (0: an answer)


class Outbox:
    """What one Telemetry stream sends: at most OUTBOX_LIMIT commands, the check-backs among them at most
    ``max_bytes`` and, with every other outbox's, ``total.limit``. A check-back counts from its push until its
    stream has written it (``sent``) or closed (``release``): a stream that does not read holds what fits, no more.
    ``None`` in the queue ends the stream."""

    def __init__(self, total: OutboxBytes, max_bytes: int = OUTBOX_MAX_BYTES) -> None:
        self.queue: asyncio.Queue[Sending | None] = asyncio.Queue(OUTBOX_LIMIT)
        self.total = total
        self.max_bytes = max_bytes
        self.bytes = 0  # check-back bytes pushed and not yet written

    def answer(self, cmd: spb.TelemetryCommand) -> bool:
        """Queue the answer to the stream's own command (one at a time: the stream reads its next command once
        this is written), counted with the check-backs' bytes until written; False when the outbox is full."""
        size = cmd.ByteSize()
        try:
            self.queue.put_nowait((cmd, size))
        except asyncio.QueueFull:
            return False
        self._count(size)
        return True

    def room_for(self, size: int) -> bool:
        """Whether an answer of ``size`` bytes fits what every outbox holds together (any size where none holds
        anything): a Settings answer echoes the client's settings, so each stream's one answer, times every
        stream, is bounded with the check-backs."""
        return _fits(self.total.held, size, self.total.limit)

    def push(self, cmd: spb.TelemetryCommand) -> bool:
        """Queue a command the broker pushes (a check-back) when it fits; False when it does not."""
        size = cmd.ByteSize()
        if self.queue.full() or not _fits(self.bytes, size, self.max_bytes) \
                or not _fits(self.total.held, size, self.total.limit):
            return False
        self.queue.put_nowait((cmd, size))
        self._count(size)
        return True

    def sent(self, size: int) -> None:
        """A command counting ``size`` bytes was written to the stream."""
        self._count(-size)

    def end(self) -> None:
        """End the stream; when the outbox is full its oldest command goes (the stream is ending)."""
        if self.queue.full():
            dropped = self.queue.get_nowait()
            if dropped is not None:
                self.sent(dropped[1])
        self.queue.put_nowait(None)

    def release(self) -> None:
        """The stream closed: what it had not written goes and counts no more. Its reader may end it after (``end``):
        left queued, a full outbox's oldest command would be dropped then and counted written a second time."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self._count(-self.bytes)

    def _count(self, size: int) -> None:
        self.bytes += size
        self.total.held += size


@dataclass(eq=False)
class ClientSession:
    client_id: str
    owner: str = ""  # the access key that opened it ("" with ACL off)
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    topics: frozenset[str] = frozenset()  # publishing topics (producers)
    group: str = ""  # consumer group (consumers)
    language: int = pb.LANGUAGE_UNSPECIFIED
    last_seen: float = field(default_factory=time.monotonic)
    outboxes: list[Outbox] = field(default_factory=list)  # one per open Telemetry stream of this client

    @property
    def streams(self) -> int:
        return len(self.outboxes)

    def push(self, cmd: spb.TelemetryCommand) -> bool:
        """Send ``cmd`` on one of the client's streams, its newest with room; False when none has."""
        return any(outbox.push(cmd) for outbox in reversed(self.outboxes))


class ClientSessions:
    """Sessions by (account, client id): a client id names a session only within the account that uses it, so
    no account reaches another's session by claiming its id, nor keeps the id from its owner by using it first.

    Bounded whatever clients send: ``per_account`` sessions and as many open Telemetry streams per account (with
    ACL on; ``grpcMaxSessionsPerAccount``), ``STREAMS_PER_CLIENT`` streams per session, ``limit`` sessions and
    ``limit`` streams in all (with ACL off, every client is the one account ""), ``TOPICS_PER_SETTINGS``
    publishing topics per session and ``max_topics`` kept by every session together. Past a bound a new session,
    stream or set of topics is refused with TOO_MANY_REQUESTS (BAD_REQUEST for a Settings naming too many topics),
    logged once per account and host and ``RefusalLog`` period."""

    def __init__(self, per_account: int = DEFAULT_SESSIONS_PER_ACCOUNT, limit: int = MAX_SESSIONS, *,
                 outbox_max_bytes: int = OUTBOX_MAX_BYTES, outboxes_max_bytes: int = OUTBOXES_MAX_BYTES,
                 max_topics: int = MAX_PUBLISHING_TOPICS) -> None:
        self.per_account = per_account
        self.limit = limit
        self.max_topics = max_topics
        self.topics = 0  # publishing topics every session keeps
        self.outbox_max_bytes = outbox_max_bytes
        self.outbox_bytes = OutboxBytes(outboxes_max_bytes)
        self.sessions: dict[tuple[str, str], ClientSession] = {}
        self._sessions_of: Counter[str] = Counter()
        self._streams_of: Counter[str] = Counter()
        self.streams = 0  # open Telemetry streams, every session's
        self.refusals = RefusalLog(log, "gRPC endpoint refused a client")

    def find(self, owner: str, client_id: str) -> ClientSession | None:
        return self.sessions.get((owner, client_id))

    def get(self, owner: str, client_id: str, host: str) -> ClientSession:
        """The session, opened when new; ``GrpcStatusError`` TOO_MANY_REQUESTS past a bound."""
        key = (owner, client_id)
        s = self.sessions.get(key)
        if s is None:
            if len(self.sessions) >= self.limit:
                self._refuse(host, f"{self.limit} sessions are open, the endpoint's most")
            self._bound(owner, self._sessions_of[owner], "sessions", host)
            s = self.sessions[key] = ClientSession(client_id, owner)
            self._sessions_of[owner] += 1
        s.last_seen = time.monotonic()
        return s

    def open_stream(self, session: ClientSession, host: str) -> Outbox:
        """A new Telemetry stream of ``session``, its outbox; ``GrpcStatusError`` TOO_MANY_REQUESTS past the
        bound."""
        if self.streams >= self.limit:
            self._refuse(host, f"{self.limit} Telemetry streams are open, the endpoint's most")
        if session.streams >= STREAMS_PER_CLIENT:
            self._refuse(host, f"client {session.client_id[:64]!r} has {session.streams} Telemetry streams open, "
                               "the most one client may have")
        self._bound(session.owner, self._streams_of[session.owner], "Telemetry streams", host)
        outbox = Outbox(self.outbox_bytes, self.outbox_max_bytes)
        session.outboxes.append(outbox)
        self._streams_of[session.owner] += 1
        self.streams += 1
        return outbox

    def close_stream(self, session: ClientSession, outbox: Outbox) -> None:
        session.outboxes.remove(outbox)
        outbox.release()
        session.last_seen = time.monotonic()
        _uncount(self._streams_of, session.owner)
        self.streams -= 1

    def check_named(self, named: int, host: str) -> None:
        """``GrpcStatusError`` BAD_REQUEST when a Settings names more than ``TOPICS_PER_SETTINGS`` publishing topics
        (repeats counted): checked before anything reads the names, so a refused one costs no work per name."""
        if named > TOPICS_PER_SETTINGS:
            self.refusals.refused(host, f"a Settings named {named} publishing topics")
            raise GrpcStatusError(Code.BAD_REQUEST, f"a Settings names at most {TOPICS_PER_SETTINGS} publishing "
                                                    f"topics, not {named}")

    def publish(self, session: ClientSession, topics: frozenset[str], host: str) -> None:
        """``topics`` (of a Settings ``check_named`` passed) are what ``session`` publishes from now on (its
        check-backs follow them); ``GrpcStatusError`` past a bound, the session's topics as they were. A session
        removed (NotifyClientTermination) while a stream of it still reads keeps nothing: no check-back finds it,
        and nothing would give back what it counted."""
        self.check_named(len(topics), host)
        if self.sessions.get((session.owner, session.client_id)) is not session:
            return
        held = self.topics - len(session.topics) + len(topics)
        if held > self.max_topics:
            self._refuse(host, f"the endpoint's sessions keep {self.topics} publishing topics, "
                               f"{self.max_topics} at most")
        session.topics = topics
        self.topics = held

    def _bound(self, owner: str, count: int, what: str, host: str) -> None:
        if owner and count >= self.per_account:
            self._refuse(host, f"AccessKey {owner} has {count} gRPC {what} open, the most one account may have "
                               f"(grpcMaxSessionsPerAccount)")

    def _refuse(self, host: str, reason: str) -> None:
        self.refusals.refused(host, reason)
        raise GrpcStatusError(Code.TOO_MANY_REQUESTS, reason)

    def remove(self, owner: str, client_id: str) -> None:
        s = self.sessions.pop((owner, client_id), None)
        if s is None:
            return
        self.topics -= len(s.topics)
        _uncount(self._sessions_of, owner)
        for outbox in s.outboxes:
            outbox.end()

    def close_all(self) -> None:
        for owner, client_id in list(self.sessions):
            self.remove(owner, client_id)

    def producers_of(self, topic: str) -> list[ClientSession]:
        return [s for s in self.sessions.values()
                if s.client_type == pb.PRODUCER and s.streams > 0 and topic in s.topics]

    def scan_expired(self, expired_s: float) -> None:
        now = time.monotonic()
        for key in [k for k, s in self.sessions.items() if s.streams <= 0 and now - s.last_seen > expired_s]:
            self.topics -= len(self.sessions.pop(key).topics)
            _uncount(self._sessions_of, key[0])


def _uncount(counts: Counter[str], owner: str) -> None:
    """One less for ``owner``, dropping it at zero (the counters hold only accounts with something open)."""
    counts[owner] -= 1
    if counts[owner] <= 0:
        del counts[owner]


class GrpcCheckSender:
    """A ``CheckSender`` (``txmq.broker.transaction.check_service``) for producers connected over gRPC."""

    def __init__(self, sessions: ClientSessions) -> None:
        self.sessions = sessions
        self._rr = itertools.count()

    def send_check(self, group: str, half: MessageExt, half_offset: int) -> bool:
        candidates = self.sessions.producers_of(group)
        if not candidates:
            return False
        real_topic = half.properties.get(MessageConst.REAL_TOPIC, half.topic)
        tid = transaction_id(half.commit_log_offset, half_offset)
        message = to_pb_message(half, topic=real_topic,
                                queue_id=int(half.properties.get(MessageConst.REAL_QUEUE_ID, "0")))
        cmd = spb.TelemetryCommand(
            status=status(),
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(message=message,
                                                                                       transaction_id=tid))
        start = next(self._rr)
        for i in range(len(candidates)):
            s = candidates[(start + i) % len(candidates)]
            if s.push(cmd):
                log.debug("check of transaction %s sent to gRPC client %s", tid, s.client_id)
                return True
        return False

    def held_up(self, group: str) -> bool:
        """Never: a stream whose outbox is full counts as no producer, for a stream stays open (and its session
        with it) whether or not its client reads, and nothing else would let its group's transactions go."""
        return False
