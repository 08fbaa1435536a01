"""Every number and duration a gRPC request carries is held to the bounds RocketMQ 5's proxy holds it to, answered
with the proxy's code, nothing stored or changed on a refusal; what a peer makes the broker keep per client is
bounded. Raw calls over txmq's own stubs, against the session's server."""

from __future__ import annotations

import os
import queue
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.grpc.test_bad_requests import _peak_rss_kb, message, receive, received
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub
from txmq.grpc.telemetry import (
    OUTBOX_MAX_BYTES,
    STREAMS_PER_CLIENT,
    TOPICS_PER_SETTINGS,
    ClientSessions,
    GrpcCheckSender,
)
from txmq.message import MessageConst, MessageExt

Code = pb.Code
HOUR_S = 3600  # the proxy's maxTransactionRecoverySecond, txmq's default


@pytest.fixture(scope="module")
def stub(server) -> Iterator[tuple[MessagingServiceStub, list[tuple[str, str]]]]:
    channel = grpc.insecure_channel(server.grpc)
    try:
        yield MessagingServiceStub(channel), [("x-mq-client-id", f"bounds-{uuid.uuid4().hex[:8]}")]
    finally:
        channel.close()


def _pending(admin, topic: str) -> int:
    """Pending transactions of ``topic``'s producer group (a 5.x producer's group is its topic)."""
    return sum(len(d["pending"]) for d in admin.tx_list(group=topic).values())


def _half(topic: str, seconds: int, nanos: int = 0) -> pb.Message:
    return message(topic, b"tx", message_type=pb.TRANSACTION,
                   orphaned_transaction_recovery_duration={"seconds": seconds, "nanos": nanos})


def test_an_orphaned_transaction_recovery_duration_past_the_proxys_bound_is_refused_and_stores_nothing(
        stub, topic, admin):
    """A half message's recovery duration of 2^62 ms was taken as its CHECK_IMMUNITY_TIME_IN_SECONDS (a check
    that never comes); RocketMQ's proxy refuses more than ``maxTransactionRecoverySecond`` (an hour) with
    BAD_REQUEST. A negative or malformed duration is refused the same way; an hour is taken."""
    s, md = stub
    for seconds, nanos in (((1 << 62) // 1000, 0), (HOUR_S + 1, 0), (-5, 0), (5, -1)):
        r = s.SendMessage(spb.SendMessageRequest(messages=[_half(topic, seconds, nanos)]), metadata=md, timeout=5)
        assert r.status.code == Code.BAD_REQUEST, (seconds, nanos, r.status)
        assert "orphaned transaction recovery duration" in r.status.message
        assert not r.entries[0].transaction_id
    assert _pending(admin, topic) == 0
    r = s.SendMessage(spb.SendMessageRequest(messages=[_half(topic, HOUR_S)]), metadata=md, timeout=5)
    assert r.status.code == Code.OK and r.entries[0].transaction_id
    assert _pending(admin, topic) == 1


def _receive_request(topic: str, group: str, *, invisible_ms: int, poll_ms: int) -> spb.ReceiveMessageRequest:
    return spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=32,
        invisible_duration={"seconds": invisible_ms // 1000, "nanos": invisible_ms % 1000 * 1_000_000},
        long_polling_timeout={"seconds": poll_ms // 1000, "nanos": poll_ms % 1000 * 1_000_000})


def test_a_long_polling_timeout_past_the_proxys_bound_is_held_to_it(stub, topic):
    """RocketMQ's proxy holds a receive at most ``grpcClientConsumerMaxLongPollingTimeoutMillis`` (20 s) whatever
    the request asks: a receive asking 60 s of an empty topic is answered MESSAGE_NOT_FOUND within about 20 s."""
    s, md = stub
    start = time.monotonic()
    answer = list(s.ReceiveMessage(_receive_request(topic, "poll", invisible_ms=30_000, poll_ms=60_000),
                                   metadata=md, timeout=90))
    took = time.monotonic() - start
    assert [a.status.code for a in answer] == [Code.MESSAGE_NOT_FOUND]
    assert 19 <= took < 30, took


def test_a_long_polling_timeout_is_held_to_the_calls_deadline(stub, topic):
    """A receive was held for its whole long polling timeout (up to 20 s) even when the call's deadline came first:
    the client saw DEADLINE_EXCEEDED, and a message that arrived meanwhile was taken by a call nobody read. As the
    proxy, a receive now waits no longer than its deadline (less ``longPollingReserveTimeInMillis``) and is
    answered; with less than ``grpcClientConsumerMinLongPollingTimeoutMillis`` (5 s) left it is answered
    ILLEGAL_POLLING_TIME at once."""
    s, md = stub
    request = _receive_request(topic, "deadline", invisible_ms=30_000, poll_ms=20_000)
    start = time.monotonic()
    answer = list(s.ReceiveMessage(request, metadata=md, timeout=7))
    took = time.monotonic() - start
    assert [a.status.code for a in answer] == [Code.MESSAGE_NOT_FOUND]
    assert 6 <= took < 7, took
    start = time.monotonic()
    answer = list(s.ReceiveMessage(request, metadata=md, timeout=3))
    assert [a.status.code for a in answer] == [Code.ILLEGAL_POLLING_TIME]
    assert "deadline" in answer[0].status.message and time.monotonic() - start < 1
    for seconds, timeout in ((1, 3), (0, 0.4)):  # what the deadline leaves room for is taken
        request.long_polling_timeout.seconds = seconds
        answer = list(s.ReceiveMessage(request, metadata=md, timeout=timeout))
        assert [a.status.code for a in answer] == [Code.MESSAGE_NOT_FOUND], seconds


def test_invisible_durations_out_of_range_change_nothing(stub, topic):
    """A receive or a change of invisible duration past ``maxInvisibleTimeMills`` (12 h), below its minimum, or
    malformed answers ILLEGAL_INVISIBLE_TIME and neither delivers nor changes anything."""
    s, md = stub
    assert s.SendMessage(spb.SendMessageRequest(messages=[message(topic, b"m")]), metadata=md,
                         timeout=5).status.code == Code.OK
    for ms in (1 << 62, 12 * 3600 * 1000 + 1, 0, -1000):
        answer = list(s.ReceiveMessage(_receive_request(topic, "inv", invisible_ms=ms, poll_ms=0), metadata=md,
                                       timeout=5))
        assert [a.status.code for a in answer] == [Code.ILLEGAL_INVISIBLE_TIME], ms
    got = received(receive(s, md, topic, "inv", invisible_s=1))
    assert [m.body for m in got] == [b"m"]
    handle = got[0].system_properties.receipt_handle
    for seconds in ((1 << 62) // 1000, -1):
        r = s.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="inv"), topic=pb.Resource(name=topic), receipt_handle=handle,
            message_id=got[0].system_properties.message_id, invisible_duration={"seconds": seconds}),
            metadata=md, timeout=5)
        assert r.status.code == Code.ILLEGAL_INVISIBLE_TIME, seconds
    time.sleep(1.2)  # unchanged: visible again after its 1 s
    assert [m.system_properties.delivery_attempt for m in received(receive(s, md, topic, "inv"))] == [2]


def test_an_ack_naming_another_message_acks_nothing(stub, topic):
    """An ack's message id must be the receipt handle's message's: an ack naming message A with B's handle acked B.
    Now it answers INVALID_RECEIPT_HANDLE and B is delivered again; a change of invisible duration and a forward to
    the dead letters are held to the same rule."""
    s, md = stub
    for body in (b"A", b"B"):
        assert s.SendMessage(spb.SendMessageRequest(messages=[message(topic, body)]), metadata=md,
                             timeout=5).status.code == Code.OK
    a, b = received(receive(s, md, topic, "mid", invisible_s=2))
    a_id, b_handle = a.system_properties.message_id, b.system_properties.receipt_handle
    group, res = pb.Resource(name="mid"), pb.Resource(name=topic)
    r = s.AckMessage(spb.AckMessageRequest(group=group, topic=res, entries=[
        spb.AckMessageEntry(message_id=a_id, receipt_handle=b_handle)]), metadata=md, timeout=5)
    assert r.status.code == Code.INVALID_RECEIPT_HANDLE and "another message" in r.status.message
    r = s.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
        group=group, topic=res, receipt_handle=b_handle, message_id=a_id, invisible_duration={"seconds": 60}),
        metadata=md, timeout=5)
    assert r.status.code == Code.INVALID_RECEIPT_HANDLE
    r = s.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
        group=group, topic=res, receipt_handle=b_handle, message_id=a_id), metadata=md, timeout=5)
    assert r.status.code == Code.INVALID_RECEIPT_HANDLE
    time.sleep(2.2)
    again = received(receive(s, md, topic, "mid"))
    assert sorted(m.body for m in again) == [b"A", b"B"]


def _settings(kind: int = pb.PRODUCER, topics: tuple[str, ...] = ("t",)) -> spb.TelemetryCommand:
    return spb.TelemetryCommand(settings=pb.Settings(
        client_type=kind, publishing=pb.Publishing(topics=[pb.Resource(name=t) for t in topics])))


class _Stream:
    """One Telemetry stream: commands in through a queue, answers read as they come."""

    def __init__(self, stub: MessagingServiceStub, client_id: str) -> None:
        self.outgoing: queue.Queue[spb.TelemetryCommand | None] = queue.Queue()
        self.call = stub.Telemetry(iter(self.outgoing.get, None), metadata=[("x-mq-client-id", client_id)],
                                   timeout=30)

    def ask(self, cmd: spb.TelemetryCommand) -> spb.TelemetryCommand:
        self.outgoing.put(cmd)
        return next(self.call)

    def close(self) -> None:
        self.outgoing.put(None)
        self.call.cancel()


def test_telemetry_streams_of_one_client_are_bounded_with_acl_off(stub):
    """With ACL off a client could open any number of Telemetry streams under one client id (each an outbox and a
    task in the broker). Now one client id has at most STREAMS_PER_CLIENT open: the next is answered
    TOO_MANY_REQUESTS, and closing one makes room."""
    s, _ = stub
    cid = f"streams-{uuid.uuid4().hex[:8]}"
    streams = [_Stream(s, cid) for _ in range(STREAMS_PER_CLIENT)]
    try:
        for st in streams:
            assert st.ask(_settings()).status.code == Code.OK
        extra = _Stream(s, cid)
        answer = extra.ask(_settings())
        assert answer.status.code == Code.TOO_MANY_REQUESTS and "Telemetry streams" in answer.status.message
        extra.close()
        streams.pop().close()
        time.sleep(0.3)  # the broker sees the stream end
        again = _Stream(s, cid)
        streams.append(again)
        assert again.ask(_settings()).status.code == Code.OK
    finally:
        for st in streams:
            st.close()


def test_settings_are_checked_and_the_broker_sets_the_consumers_bounds(stub):
    """A Settings naming an illegal topic or consumer group is answered ILLEGAL_TOPIC / ILLEGAL_CONSUMER_GROUP, as
    the proxy answers, one naming more than 1,024 publishing topics BAD_REQUEST, and the session keeps none of it;
    a consumer is told the broker's receive batch and long polling timeout (the proxy's), not the ones it proposed
    (2^62 ms was echoed)."""
    s, _ = stub
    st = _Stream(s, f"settings-{uuid.uuid4().hex[:8]}")
    try:
        assert st.ask(_settings(topics=("ok", "bad topic"))).status.code == Code.ILLEGAL_TOPIC
        # counted before any name is read: one illegal name among too many is not what the answer names
        many = st.ask(_settings(topics=("bad topic", *(f"t{i}" for i in range(TOPICS_PER_SETTINGS)))))
        assert many.status.code == Code.BAD_REQUEST and "at most 1024 publishing topics" in many.status.message
        sub = pb.Subscription(group=pb.Resource(name="%RETRY%x y"), receive_batch_size=1 << 30,
                              long_polling_timeout={"seconds": (1 << 62) // 1000})
        bad = spb.TelemetryCommand(settings=pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=sub))
        assert st.ask(bad).status.code == Code.ILLEGAL_CONSUMER_GROUP
        bad.settings.subscription.group.name = "fine"  # the command holds a copy of ``sub``
        answer = st.ask(bad)
        assert answer.status.code == Code.OK
        assert answer.settings.subscription.receive_batch_size == 32
        assert answer.settings.subscription.long_polling_timeout.seconds == 20
    finally:
        st.close()


def _halves(stub, md, topic: str, count: int, size: int) -> list[str]:
    """``count`` half messages of ``size`` random bytes each, sent a few to a request; their transaction ids."""
    tids = []
    for _ in range(0, count, 4):
        sent = [message(topic, os.urandom(size), message_type=pb.TRANSACTION) for _ in range(4)]
        r = stub.SendMessage(spb.SendMessageRequest(messages=sent), metadata=md, timeout=10)
        assert r.status.code == Code.OK, r.status
        tids += [e.transaction_id for e in r.entries]
    return tids


def _checks(stream: _Stream, count: int) -> set[str]:
    """The transaction ids of the next ``count`` check-backs ``stream`` reads."""
    got = set()
    while len(got) < count:
        cmd = next(stream.call)
        if cmd.HasField("recover_orphaned_transaction_command"):
            got.add(cmd.recover_orphaned_transaction_command.transaction_id)
    return got


def test_check_backs_to_a_stream_that_never_reads_are_bounded_in_bytes(server, stub, topic):
    """A check-back carries its half message's body, and a stream's outbox held up to 1,024 of them: a producer
    whose stream never reads made the broker hold 1,024 bodies per stream (4 GiB of the largest messages; here 27 MB
    more in three check passes, 3.7 MB now). Now what a stream's outbox holds is bounded in bytes
    (OUTBOX_MAX_BYTES); a check that does not fit is not sent and is tried again at the next pass, so a stream that
    reads gets every one."""
    s, md = stub
    size = 250_000
    tids = _halves(s, md, topic, 64, size)  # no producer of the topic yet: checked once one is there
    stuck = _Stream(s, f"stuck-{uuid.uuid4().hex[:8]}")
    reader = None
    try:
        Path(f"/proc/{server.pid}/clear_refs").write_text("5")  # the peak RSS starts again from the current RSS
        before = _peak_rss_kb(server.pid)
        assert stuck.ask(_settings(topics=(topic,))).status.code == Code.OK  # then it never reads again
        time.sleep(3.5)  # three check passes (transactionCheckInterval 1 s)
        grown = _peak_rss_kb(server.pid) - before
        assert grown < 3 * OUTBOX_MAX_BYTES // 1024, f"{grown} KB"
        reader = _Stream(s, f"reader-{uuid.uuid4().hex[:8]}")
        assert reader.ask(_settings(topics=(topic,))).status.code == Code.OK
        assert _checks(reader, len(tids)) == set(tids)  # the stuck stream kept none of them from the reader
    finally:
        stuck.close()
        if reader is not None:
            reader.close()
        for tid in tids:  # no more checks of them for the rest of the session
            s.EndTransaction(spb.EndTransactionRequest(topic=pb.Resource(name=topic), transaction_id=tid,
                                                       resolution=pb.ROLLBACK), metadata=md, timeout=5)


def _checked_half(n: int, size: int) -> MessageExt:
    """The ``n``th half message of topic t, of ``size`` bytes, as a check pass reads it."""
    return MessageExt("RMQ_SYS_TRANS_HALF_TOPIC", bytes(size), {
        MessageConst.REAL_TOPIC: "t", MessageConst.REAL_QUEUE_ID: "0",
        MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"{n:032X}"}, commit_log_offset=n * 2 * size)


def test_check_backs_every_outbox_holds_together_are_bounded():
    """Each stream's bound alone would let every stream allowed (65,536) hold its share: what all outboxes hold
    together is bounded too. A check that fits nowhere is not sent (the check pass tries it again), a stream that
    writes one makes room, and a check larger than a stream's bound still reaches a stream holding none."""
    sessions = ClientSessions(outbox_max_bytes=100_000, outboxes_max_bytes=250_000)
    for i in range(5):
        session = sessions.get("", f"producer-{i}", "127.0.0.1")
        session.client_type, session.topics = pb.PRODUCER, frozenset({"t"})
        sessions.open_stream(session, "127.0.0.1")
    sender = GrpcCheckSender(sessions)
    pushed = sum(sender.send_check("t", _checked_half(n, 40_000), n) for n in range(40))
    outboxes = [o for session in sessions.sessions.values() for o in session.outboxes]
    assert pushed == 6 and sessions.outbox_bytes.held == sum(o.bytes for o in outboxes) <= 250_000
    assert max(o.bytes for o in outboxes) <= 100_000
    for outbox in outboxes:  # every stream writes what it holds
        while not outbox.queue.empty():
            outbox.sent(outbox.queue.get_nowait()[1])
    assert sessions.outbox_bytes.held == 0
    assert sender.send_check("t", _checked_half(40, 150_000), 40)
    assert sum(sender.send_check("t", _checked_half(n, 40_000), n) for n in range(41, 44)) == 2  # 270 KB in all: no


def test_settings_answers_count_with_the_check_backs_every_outbox_holds():
    """A Settings answer echoes the client's settings (its publishing topics: up to a message's size) and waits in
    its stream's outbox until written: one per stream, but every stream's together were held without bound. They
    count with the check-backs until written, and a stream is told it has no room when the endpoint has none."""
    sessions = ClientSessions(outbox_max_bytes=100_000, outboxes_max_bytes=250_000)
    outboxes = []
    for i in range(3):
        session = sessions.get("", f"producer-{i}", "127.0.0.1")
        outboxes.append(sessions.open_stream(session, "127.0.0.1"))
    settings = pb.Settings(publishing=pb.Publishing(topics=[pb.Resource(name=f"t{n:05d}") for n in range(20_000)]))
    answer = spb.TelemetryCommand(settings=settings)
    size = answer.ByteSize()
    assert 125_000 < size < 250_000  # one fits the endpoint's bound, two do not
    assert outboxes[0].room_for(size) and outboxes[0].answer(answer)  # the endpoint held nothing
    assert sessions.outbox_bytes.held == size
    assert not outboxes[1].room_for(size)  # a second such answer would pass the endpoint's bound
    _, counted = outboxes[0].queue.get_nowait()
    outboxes[0].sent(counted)  # written: room again
    assert sessions.outbox_bytes.held == 0 and outboxes[1].room_for(size)


def test_a_stream_closed_with_a_full_outbox_gives_back_what_it_held_once():
    """A Telemetry stream closes (its outbox released) before its reader ends it (``end``); with the outbox full,
    ``end`` dropped its oldest command and counted it written, after the release had already given it back: every
    such stream left the endpoint's count lower by one command, so that outboxes together held past their bound."""
    sessions = ClientSessions()
    session = sessions.get("", "producer", "127.0.0.1")
    outbox = sessions.open_stream(session, "127.0.0.1")
    answer = spb.TelemetryCommand(settings=pb.Settings(publishing=pb.Publishing(topics=[pb.Resource(name="t")])))
    assert outbox.answer(answer)
    check = spb.TelemetryCommand(recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
        message=pb.Message(body=bytes(100)), transaction_id="tid"))
    while outbox.push(check):
        pass
    assert outbox.queue.full()
    sessions.close_stream(session, outbox)  # the stream's end, as the writer sees it
    outbox.end()  # then its reader's
    assert sessions.outbox_bytes.held == 0
