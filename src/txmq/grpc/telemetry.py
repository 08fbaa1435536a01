"""Clients connected over gRPC: one session per ``x-mq-client-id``, with the settings its Telemetry stream sent and
an outbox for commands the broker pushes on that stream.

``GrpcCheckSender`` is the check-back's way to reach gRPC producers: a transaction's producer group is its topic
(as with RocketMQ's proxy, where a 5.x producer registers under each topic it declares), so a check goes to a
live producer session whose settings list that topic, as a ``RecoverOrphanedTransactionCommand``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass, field

from txmq.grpc.convert import status, to_pb_message, transaction_id
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.message import MessageConst, MessageExt

log = logging.getLogger("txmq.grpc")

OUTBOX_LIMIT = 1024


@dataclass(eq=False)
class ClientSession:
    client_id: str
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    topics: frozenset[str] = frozenset()  # publishing topics (producers)
    group: str = ""  # consumer group (consumers)
    language: int = pb.LANGUAGE_UNSPECIFIED
    last_seen: float = field(default_factory=time.monotonic)
    outbox: asyncio.Queue[spb.TelemetryCommand | None] = field(
        default_factory=lambda: asyncio.Queue(OUTBOX_LIMIT))
    streams: int = 0  # open Telemetry streams of this client

    def push(self, cmd: spb.TelemetryCommand) -> bool:
        if self.streams <= 0:
            return False
        try:
            self.outbox.put_nowait(cmd)
        except asyncio.QueueFull:
            return False
        return True


class ClientSessions:
    def __init__(self) -> None:
        self.sessions: dict[str, ClientSession] = {}

    def get(self, client_id: str) -> ClientSession:
        s = self.sessions.get(client_id)
        if s is None:
            s = self.sessions[client_id] = ClientSession(client_id)
        s.last_seen = time.monotonic()
        return s

    def remove(self, client_id: str) -> None:
        s = self.sessions.pop(client_id, None)
        if s is not None:
            for _ in range(s.streams):
                try:
                    s.outbox.put_nowait(None)
                except asyncio.QueueFull:
                    break

    def producers_of(self, topic: str) -> list[ClientSession]:
        return [s for s in self.sessions.values()
                if s.client_type == pb.PRODUCER and s.streams > 0 and topic in s.topics]

    def scan_expired(self, expired_s: float) -> None:
        now = time.monotonic()
        for cid in [c for c, s in self.sessions.items() if s.streams <= 0 and now - s.last_seen > expired_s]:
            del self.sessions[cid]


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
