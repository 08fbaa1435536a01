"""What the campaign puts in flight on a broker whose clock it steps, and how it judges what came back, in real
elapsed time (this process's monotonic clock: the test process is never under the fake clock).

A round sends, at once: transactions whose producer answers UNKNOWN to the first check and COMMIT to the second;
delayed messages (level 1); messages a gRPC consumer receives without acknowledging. ``Probe.finish`` waits for
each to come back and asserts: first checks no earlier than transactionTimeOut and no later than timeout +
interval + slack, the second one interval later, each committed message consumed once; delayed messages no
earlier than their delay and no later than delay + the scheduler's tick + slack, once; a gRPC message received
again no earlier than its invisible duration and no later than that + slack, and never after its ack. After a
restart the bounds count from the moment the producer could be reached again (its reconnection), no earlier.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import grpc

from txmq import (
    ConsumeFromWhere,
    ConsumeStatus,
    LocalTransactionState,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    TransactionProducer,
)
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub

TIMEOUT_S = 2.0  # transactionTimeOut
INTERVAL_S = 1.0  # transactionCheckInterval
DELAY_S = 2.0  # delay level 1
TICK_S = 1.0  # the scheduler's longest wait between looks
INVISIBLE_S = 3
SLACK_S = 3.0  # a loaded 2-core machine: a check pass, a client's callback, a pull's round trip
# How late a check may reach the client's callback on a loaded machine after the broker sent it: the gap between
# two checks is timed at their arrivals, so a first check held up that long shortens it by as much (seen: 0.90 s).
# A step of the clock that brought a check forward would shorten it by seconds.
ARRIVAL_JITTER_S = 0.25
BROKER_CONF: dict[str, object] = {
    "transactionTimeOut": int(TIMEOUT_S * 1000), "transactionCheckInterval": int(INTERVAL_S * 1000),
    "transactionCheckMax": 100, "transactionSnapshotInterval": 1000, "messageDelayLevel": "2s 5s 10s",
    "flushConsumerOffsetInterval": 200, "mappedFileSizeCommitLog": 64 * 1024, "cleanResourceInterval": 500,
}

COMMIT, UNKNOWN = LocalTransactionState.COMMIT, LocalTransactionState.UNKNOWN


class _Checks:
    """A listener: UNKNOWN when the half is stored and at its first check, COMMIT from the second on; the time of
    every check, by body."""

    def __init__(self) -> None:
        self.at: dict[str, list[float]] = defaultdict(list)
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return UNKNOWN

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        now = time.monotonic()
        with self.lock:
            seen = self.at[msg.body.decode()]
            seen.append(now)
            return UNKNOWN if len(seen) == 1 else COMMIT


class _Arrivals:
    """A push listener: the times each body arrived, and how far its store timestamp was from this process's wall
    clock then (seconds; the broker's fake clock is that plus its offset)."""

    def __init__(self) -> None:
        self.at: dict[str, list[float]] = defaultdict(list)
        self.stamp_ahead: dict[str, float] = {}
        self.lock = threading.Lock()

    def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        now, wall = time.monotonic(), time.time()
        with self.lock:
            for m in msgs:
                self.at[m.body.decode()].append(now)
                self.stamp_ahead[m.body.decode()] = m.store_timestamp / 1000 - wall
        return ConsumeStatus.SUCCESS


@dataclass
class Round:
    name: str
    sent: dict[str, float] = field(default_factory=dict)  # body -> when sent
    received: dict[str, float] = field(default_factory=dict)  # gRPC message id -> when its first receive was asked
    grpc_bodies: dict[str, str] = field(default_factory=dict)  # gRPC message id -> body
    reachable: float = 0.0  # after a restart: when the producer reached the broker again
    no_earlier: bool = True  # gRPC redelivery judged against the invisible duration (no restart between)


class Probe:
    """The clients of one broker (remoting through the name server, gRPC straight to the broker)."""

    def __init__(self, namesrv: str, grpc_addr: str | None, tag: str) -> None:
        """``grpc_addr`` None: no gRPC consumer (a round then receives nothing over gRPC)."""
        self.tag = tag
        self.tx_topic, self.delay_topic, self.grpc_topic = f"{tag}_tx", f"{tag}_delay", f"{tag}_grpc"
        self.checks = _Checks()
        self.tx = TransactionProducer(f"p_{tag}_tx", self.checks, namesrv).start()
        self.plain = Producer(f"p_{tag}_plain", namesrv).start()
        self.arrivals = _Arrivals()
        self.consumer = PushConsumer(f"c_{tag}", namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                     rebalance_interval_s=1.0)
        self.consumer.subscribe(self.tx_topic, "*")
        self.consumer.subscribe(self.delay_topic, "*")
        self.consumer.register_listener(self.arrivals)
        self.consumer.start()
        self.channel = grpc.insecure_channel(grpc_addr) if grpc_addr else None
        self.stub = MessagingServiceStub(self.channel) if self.channel else None
        self.md = [("x-mq-client-id", f"clock-{uuid.uuid4().hex[:8]}")]
        self.acked: dict[str, float] = {}  # gRPC message id -> when acked
        self.grpc_seen: dict[str, list[float]] = defaultdict(list)  # message id -> when each receive got it
        self.rounds: list[Round] = []

    def close(self) -> None:
        self.consumer.shutdown()
        self.tx.shutdown()
        self.plain.shutdown()
        if self.channel is not None:
            self.channel.close()

    # --- sending -----------------------------------------------------------------------------------------

    def start_round(self, name: str, transactions: int = 2, delayed: int = 2, grpc_messages: int = 2) -> Round:
        if self.stub is None:
            grpc_messages = 0
        r = Round(name)
        self.rounds.append(r)
        for i in range(transactions):
            body = f"{name}-tx-{i}"
            r.sent[body] = time.monotonic()
            result = self.tx.send_message_in_transaction(Message(self.tx_topic, body.encode()))
            assert result.local_transaction_state == UNKNOWN, result
        for i in range(delayed):
            body = f"{name}-delay-{i}"
            m = Message(self.delay_topic, body.encode())
            m.delay_time_level = 1
            r.sent[body] = time.monotonic()
            self.plain.send(m)
        for i in range(grpc_messages):
            self.plain.send(Message(self.grpc_topic, f"{name}-grpc-{i}".encode()))
        deadline = time.monotonic() + 10
        while len(r.received) < grpc_messages and time.monotonic() < deadline:
            asked = time.monotonic()
            for msg_id, body, _ in self._receive():  # not acknowledged: back after its invisible duration
                if body.startswith(f"{name}-grpc-") and msg_id not in r.received:
                    r.received[msg_id] = asked
                    r.grpc_bodies[msg_id] = body
        assert len(r.received) == grpc_messages, f"round {name}: {len(r.received)} gRPC messages received"
        return r

    def _receive(self, poll_ms: int = 300) -> list[tuple[str, str, str]]:
        if self.stub is None:
            time.sleep(poll_ms / 1000)
            return []
        req = spb.ReceiveMessageRequest(
            group=pb.Resource(name=f"g_{self.tag}"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=self.grpc_topic), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=16,
            invisible_duration={"seconds": INVISIBLE_S}, long_polling_timeout={"nanos": poll_ms * 1_000_000})
        out = []
        try:
            for x in self.stub.ReceiveMessage(req, metadata=self.md, timeout=5):
                if x.HasField("message"):
                    m = x.message
                    self.grpc_seen[m.system_properties.message_id].append(time.monotonic())
                    out.append((m.system_properties.message_id, m.body.decode(), m.system_properties.receipt_handle))
        except grpc.RpcError:
            pass  # the broker restarting: asked again on the next poll
        return out

    def reconnected(self) -> float:
        """After a restart: one send makes each producer reach the broker again (a new connection heartbeats at
        once, so check-backs find the transaction producer). When that happened."""
        for producer in (self.tx, self.plain):
            deadline = time.monotonic() + 20
            while True:
                try:
                    producer.send(Message(f"{self.tag}_ping", b"ping"))
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    threading.Event().wait(0.2)
        return time.monotonic()

    # --- judging -----------------------------------------------------------------------------------------

    def finish(self, r: Round, timeout: float = 25.0) -> None:
        """Wait for everything of round ``r`` to come back, acknowledging gRPC messages once received again; then
        assert its timing and counts (module docstring)."""
        deadline = time.monotonic() + timeout
        tx = [b for b in r.sent if "-tx-" in b]
        delayed = [b for b in r.sent if "-delay-" in b]
        while time.monotonic() < deadline:
            for msg_id, _, handle in self._receive():
                if msg_id in r.received and msg_id not in self.acked:
                    self._ack(msg_id, handle)
            with self.checks.lock, self.arrivals.lock:
                done = all(len(self.checks.at[b]) >= 2 and self.arrivals.at[b] for b in tx) and \
                    all(self.arrivals.at[b] for b in delayed)
            if done and all(m in self.acked for m in r.received):
                break
        else:
            checks = {b: self._rel(r, b, self.checks.at[b]) for b in tx}
            arrivals = {b: self._rel(r, b, self.arrivals.at[b]) for b in tx + delayed}
            grpc_seen = {m: [round(t - r.received[m], 2) for t in self.grpc_seen[m]] for m in r.received}
            raise AssertionError(f"round {r.name} did not come back in {timeout}s: checks {checks}, arrivals "
                                 f"{arrivals}, gRPC {grpc_seen}")
        self._judge(r, tx, delayed)

    def _ack(self, msg_id: str, handle: str) -> None:
        assert self.stub is not None
        entry = spb.AckMessageEntry(message_id=msg_id, receipt_handle=handle)
        resp = self.stub.AckMessage(spb.AckMessageRequest(group=pb.Resource(name=f"g_{self.tag}"),
                                                          topic=pb.Resource(name=self.grpc_topic), entries=[entry]),
                                    metadata=self.md, timeout=5)
        assert resp.status.code == pb.Code.OK, resp
        self.acked[msg_id] = time.monotonic()

    @staticmethod
    def _rel(r: Round, body: str, times: list[float]) -> list[float]:
        return [round(t - r.sent[body], 2) for t in times]

    def _judge(self, r: Round, tx: list[str], delayed: list[str]) -> None:
        late = max(r.reachable - min(r.sent.values()), 0.0)  # a restart's gap: what was due meanwhile comes after
        for b in tx:
            first, second = self.checks.at[b][:2]
            waited = first - r.sent[b]
            assert waited >= TIMEOUT_S, f"{r.name}: {b} checked {waited:.2f}s after it was sent (transactionTimeOut " \
                f"{TIMEOUT_S}s)"
            assert waited <= max(TIMEOUT_S, late) + INTERVAL_S + SLACK_S, f"{r.name}: {b} first checked after " \
                f"{waited:.2f}s (timeout {TIMEOUT_S}s, interval {INTERVAL_S}s, restart gap {late:.2f}s)"
            assert INTERVAL_S - 0.05 - ARRIVAL_JITTER_S <= second - first <= INTERVAL_S + 1 + SLACK_S + late, \
                f"{r.name}: {b} checked again {second - first:.2f}s after its first check"
            assert len(self.arrivals.at[b]) == 1, f"{r.name}: committed {b} consumed {len(self.arrivals.at[b])} times"
        for b in delayed:
            waited = self.arrivals.at[b][0] - r.sent[b]
            assert DELAY_S <= waited <= max(DELAY_S, late) + TICK_S + SLACK_S, \
                f"{r.name}: {b} delivered {waited:.2f}s after it was sent (delay {DELAY_S}s, restart gap {late:.2f}s)"
            assert len(self.arrivals.at[b]) == 1, f"{r.name}: {b} delivered {len(self.arrivals.at[b])} times"
        for msg_id, asked in r.received.items():
            seen = self.grpc_seen[msg_id]
            assert len(seen) >= 2, f"{r.name}: gRPC {r.grpc_bodies[msg_id]} never received again"
            if r.no_earlier:  # no earlier than its invisible duration after the receive was asked for
                assert seen[1] - asked >= INVISIBLE_S and seen[1] - seen[0] <= INVISIBLE_S + SLACK_S, \
                    f"{r.name}: gRPC {r.grpc_bodies[msg_id]} received again {seen[1] - seen[0]:.2f}s after its " \
                    f"first receive (invisible {INVISIBLE_S}s)"

    def no_delivery_after_ack(self, quiet_s: float = INVISIBLE_S + 1.0) -> None:
        """Nothing acknowledged comes back (a duplicate), polled for ``quiet_s``."""
        end = time.monotonic() + quiet_s
        while time.monotonic() < end:
            self._receive()
        late = {m: t for m, t in self.acked.items() if any(s > t for s in self.grpc_seen[m])}
        assert not late, f"gRPC messages received after their ack: {late}"

    def timings_since(self, first_round: int = 0) -> dict[str, list[float]]:
        """Per kind, how long after sending each came back (first checks, delayed deliveries) and how long after
        its first receive was asked for a gRPC message was received again, in the rounds from ``first_round`` on:
        the figures of docs/reliability.md."""
        out: dict[str, list[float]] = {"first check": [], "delayed": [], "grpc again": []}
        for r in self.rounds[first_round:]:
            for b, sent in r.sent.items():
                if "-tx-" in b and self.checks.at[b]:
                    out["first check"].append(self.checks.at[b][0] - sent)
                elif "-delay-" in b and self.arrivals.at[b]:
                    out["delayed"].append(self.arrivals.at[b][0] - sent)
            if r.no_earlier:
                for m, asked in r.received.items():
                    seen = self.grpc_seen[m]
                    if len(seen) >= 2:
                        out["grpc again"].append(seen[1] - asked)
        return out
