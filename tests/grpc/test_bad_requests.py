"""Requests the official clients would not send, over txmq's own generated stubs: each gets a clear status code.
Also the transaction contract over gRPC (first decision wins, one copy per commit)."""

from __future__ import annotations

import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub

pytestmark = pytest.mark.dated  # run again at a fixed month end by make test (Makefile, DATED_AT)

Code = pb.Code


@pytest.fixture(scope="module")
def stub(server) -> Iterator[tuple[MessagingServiceStub, list[tuple[str, str]]]]:
    channel = grpc.insecure_channel(server.grpc)
    try:
        yield MessagingServiceStub(channel), [("x-mq-client-id", f"raw-{uuid.uuid4().hex[:8]}")]
    finally:
        channel.close()


def message(topic: str, body: bytes = b"x", **sp) -> pb.Message:
    return pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=pb.SystemProperties(
        message_id=uuid.uuid4().hex.upper(), body_encoding=pb.IDENTITY, **sp))


def receive(stub, md, topic: str, group: str, invisible_s: int = 30, poll_ms: int = 500) -> list:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=32,
        invisible_duration={"seconds": invisible_s},
        long_polling_timeout={"seconds": poll_ms // 1000, "nanos": (poll_ms % 1000) * 1_000_000})
    return list(stub.ReceiveMessage(req, metadata=md, timeout=10))


def received(responses: list) -> list[pb.Message]:
    """The messages of a ReceiveMessage answer (without its status and delivery timestamp)."""
    return [x.message for x in responses if x.HasField("message")]


def _gzip_of_zeros(size: int) -> bytes:
    """A GZIP stream of ``size`` zero bytes (about a thousandth of that), made without holding them."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(min(size, 1 << 20))
    return b"".join(z.compress(chunk) for _ in range(size // len(chunk))) + z.flush()


def _peak_rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


def test_a_gzip_body_is_unzipped_no_further_than_the_largest_message(server, stub, topic):
    """A GZIP body was unzipped whole before its size was checked: 128 KB unzipping to 128 MB took twice that of
    the broker's memory (the largest request, 4 MB, about 8 GB). Now it is unzipped no further than
    maxMessageSize, and refused as too large; a body that unzips within it is stored."""
    s, md = stub
    bomb = message(topic, _gzip_of_zeros(128 << 20))
    bomb.system_properties.body_encoding = pb.GZIP
    Path(f"/proc/{server.pid}/clear_refs").write_text("5")  # the peak RSS starts again from the current RSS
    before = _peak_rss_kb(server.pid)
    r = s.SendMessage(spb.SendMessageRequest(messages=[bomb]), metadata=md, timeout=30)
    assert r.status.code == Code.MESSAGE_BODY_TOO_LARGE, r.status
    assert _peak_rss_kb(server.pid) - before < 32 * 1024
    zipped = message(topic, _gzip_of_zeros(64 << 10))  # within the server's maxMessageSize
    zipped.system_properties.body_encoding = pb.GZIP
    assert s.SendMessage(spb.SendMessageRequest(messages=[zipped]), metadata=md, timeout=10).status.code == Code.OK


def _pulled_until_stalled(pulled: list[int], total: int, stall_s: float = 2.0) -> None:
    """Wait until the client's stream has sent ``total`` commands, or sent none more for ``stall_s`` (held back by
    HTTP/2 flow control: the server reads no further)."""
    seen, since = -1, time.monotonic()
    while pulled[0] < total and time.monotonic() - since < stall_s:
        if pulled[0] != seen:
            seen, since = pulled[0], time.monotonic()
        time.sleep(0.05)


def test_a_telemetry_stream_that_never_reads_holds_one_settings_answer(server, stub):
    """A client that sends Settings on its Telemetry stream and never reads the answers: each answer (a copy of its
    Settings, publishing topics and all) was queued for the stream, up to 1,024 of them, so 100 Settings of 850 KB
    took the broker 170 MB, held while the stream stayed open. Now a stream reads its next command once its last
    Settings is answered: the client's sends wait on HTTP/2 flow control and the broker holds one answer."""
    s, _ = stub
    topics = [pb.Resource(name=f"t{i:05d}" + "x" * 60) for i in range(12_000)]
    settings = spb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER,
                                                         publishing=pb.Publishing(topics=topics)))
    total, pulled, release = 100, [0], threading.Event()

    def commands() -> Iterator[spb.TelemetryCommand]:
        for _ in range(total):
            pulled[0] += 1
            yield settings
        release.wait(30)

    Path(f"/proc/{server.pid}/clear_refs").write_text("5")  # the peak RSS starts again from the current RSS
    before = _peak_rss_kb(server.pid)
    call = s.Telemetry(commands(), metadata=[("x-mq-client-id", "never-reads")])
    try:
        _pulled_until_stalled(pulled, total)
        # One answer held: the peak grows 14-35 MB over runs (a Settings parsed and answered, the transport's
        # buffers, the allocator); answers queued per stream grew it 165 MB
        assert _peak_rss_kb(server.pid) - before < 64 * 1024
    finally:
        release.set()
        call.cancel()

def test_unknown_topic(stub):
    s, md = stub
    r = s.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="no_such_topic")), metadata=md, timeout=5)
    assert r.status.code == Code.TOPIC_NOT_FOUND
    r = s.SendMessage(spb.SendMessageRequest(messages=[message("no_such_topic")]), metadata=md, timeout=5)
    assert r.status.code == Code.TOPIC_NOT_FOUND
    assert r.entries[0].status.code == Code.TOPIC_NOT_FOUND
    r = s.SendMessage(spb.SendMessageRequest(messages=[message("bad topic!")]), metadata=md, timeout=5)
    assert r.status.code == Code.ILLEGAL_TOPIC
    r = s.SendMessage(spb.SendMessageRequest(messages=[message("RMQ_SYS_TRANS_HALF_TOPIC")]), metadata=md, timeout=5)
    assert r.status.code == Code.FORBIDDEN


def test_route_is_what_the_clients_need(stub, topic, server):
    s, md = stub
    r = s.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=md, timeout=5)
    assert r.status.code == Code.OK
    assert [q.id for q in r.message_queues] == [0, 1, 2, 3]
    q = r.message_queues[0]
    assert q.permission == pb.READ_WRITE and q.broker.id == 0
    assert pb.TRANSACTION in q.accept_message_types
    host, port = server.grpc.rsplit(":", 1)
    assert (q.broker.endpoints.scheme, q.broker.endpoints.addresses[0].host,
            q.broker.endpoints.addresses[0].port) == (pb.IPv4, host, int(port))


def test_oversized_body(stub, topic):
    s, md = stub
    r = s.SendMessage(spb.SendMessageRequest(messages=[message(topic, b"x" * (262144 + 1))]), metadata=md, timeout=5)
    assert r.status.code == Code.MESSAGE_BODY_TOO_LARGE


def test_a_refused_message_of_a_send_leaves_its_neighbours_and_later_answers_ok(stub, topic):
    """Each message of a SendMessage gets its own status; the OK answers after a refusal are still exactly OK
    (the servicer copies one shared OK status into them: a refusal must not have changed it)."""
    s, md = stub
    big = message(topic, b"x" * (262144 + 1))
    r = s.SendMessage(spb.SendMessageRequest(messages=[message(topic, b"a"), big, message(topic, b"b")]),
                      metadata=md, timeout=5)
    assert [e.status.code for e in r.entries] == [Code.OK, Code.MESSAGE_BODY_TOO_LARGE, Code.OK]
    assert r.status.code == Code.MULTIPLE_RESULTS
    refused = r.entries[1]
    assert "maxMessageSize" in refused.status.message and not refused.message_id and not refused.offset
    assert [e.status.message for e in r.entries[::2]] == ["OK", "OK"] and r.entries[2].offset == r.entries[0].offset + 1
    for _ in range(2):
        r = s.SendMessage(spb.SendMessageRequest(messages=[message(topic, b"c", queue_id=0)]), metadata=md, timeout=5)
        assert r.status == pb.Status(code=Code.OK, message="OK") == r.entries[0].status
        bad = s.EndTransaction(spb.EndTransactionRequest(topic=pb.Resource(name=topic), transaction_id="x" * 32,
                                                         resolution=pb.COMMIT), metadata=md, timeout=5)
        assert bad.status.code == Code.INVALID_TRANSACTION_ID
    r = s.SendMessage(spb.SendMessageRequest(messages=[message(topic, b"tx", message_type=pb.TRANSACTION)]),
                      metadata=md, timeout=5)
    end = s.EndTransaction(spb.EndTransactionRequest(topic=pb.Resource(name=topic), transaction_id=r.entries[0]
                                                     .transaction_id, resolution=pb.COMMIT), metadata=md, timeout=5)
    assert end.status == pb.Status(code=Code.OK, message="OK")


def test_fifo_needs_a_message_group(stub, topic):
    s, md = stub
    r = s.SendMessage(spb.SendMessageRequest(messages=[message(topic, message_type=pb.FIFO)]), metadata=md,
                      timeout=5)
    assert r.status.code == Code.ILLEGAL_MESSAGE_GROUP


def test_a_message_group_has_one_delivery_in_flight(stub, topic):
    """A receive delivered every message of a group it read in one batch (A0, A1, A2): a PushConsumer consumes a
    batch concurrently (the endpoint's settings say fifo=false, the broker keeps the order), so A1 could be consumed
    before A0, and acked while A0 failed and came back after it. A group's next message is delivered once the one
    in flight is acked."""
    s, md = stub
    sent = [message(topic, f"A{i}".encode(), message_type=pb.FIFO, message_group="A") for i in range(3)]
    assert s.SendMessage(spb.SendMessageRequest(messages=sent), metadata=md, timeout=5).status.code == Code.OK
    order = []
    for _ in range(3):
        got = received(receive(s, md, topic, "one_in_flight"))
        assert len(got) == 1, [m.body for m in got]
        order.append(got[0].body)
        assert received(receive(s, md, topic, "one_in_flight")) == []  # its group has it in flight
        ack = spb.AckMessageRequest(group=pb.Resource(name="one_in_flight"), topic=pb.Resource(name=topic), entries=[
            spb.AckMessageEntry(message_id=got[0].system_properties.message_id,
                                receipt_handle=got[0].system_properties.receipt_handle)])
        assert s.AckMessage(ack, metadata=md, timeout=5).status.code == Code.OK
    assert order == [b"A0", b"A1", b"A2"]

def test_malformed_receipt_handle(stub, topic):
    s, md = stub
    for handle in ("garbage", "1 0 0 0 0", "1 a b c d topic", ""):
        r = s.AckMessage(spb.AckMessageRequest(group=pb.Resource(name="g"), topic=pb.Resource(name=topic), entries=[
            spb.AckMessageEntry(message_id="m", receipt_handle=handle)]), metadata=md, timeout=5)
        assert r.status.code == Code.INVALID_RECEIPT_HANDLE
        assert r.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
        r = s.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="g"), topic=pb.Resource(name=topic), receipt_handle=handle, message_id="m",
            invisible_duration={"seconds": 5}), metadata=md, timeout=5)
        assert r.status.code == Code.INVALID_RECEIPT_HANDLE


def test_stale_receipt_handle_after_redelivery(stub, topic):
    s, md = stub
    assert s.SendMessage(spb.SendMessageRequest(messages=[message(topic, b"once")]), metadata=md,
                         timeout=5).status.code == Code.OK
    first = received(receive(s, md, topic, "stale", invisible_s=1))
    assert [m.body for m in first] == [b"once"]
    time.sleep(1.2)
    again = received(receive(s, md, topic, "stale", invisible_s=30))
    assert [m.system_properties.delivery_attempt for m in again] == [2]
    ack = spb.AckMessageRequest(group=pb.Resource(name="stale"), topic=pb.Resource(name=topic), entries=[
        spb.AckMessageEntry(message_id=first[0].system_properties.message_id,
                            receipt_handle=first[0].system_properties.receipt_handle)])
    assert s.AckMessage(ack, metadata=md, timeout=5).status.code == Code.INVALID_RECEIPT_HANDLE
    ack.entries[0].receipt_handle = again[0].system_properties.receipt_handle
    assert s.AckMessage(ack, metadata=md, timeout=5).status.code == Code.OK
    assert s.AckMessage(ack, metadata=md, timeout=5).status.code == Code.OK  # acking twice is harmless
    empty = receive(s, md, topic, "stale")
    assert [x.status.code for x in empty] == [Code.MESSAGE_NOT_FOUND]


def test_transaction_first_decision_wins_and_commits_once(stub, topic):
    s, md = stub
    r = s.SendMessage(spb.SendMessageRequest(messages=[message(topic, b"tx", message_type=pb.TRANSACTION)]),
                      metadata=md, timeout=5)
    assert r.status.code == Code.OK
    tid, mid = r.entries[0].transaction_id, r.entries[0].message_id
    assert receive(s, md, topic, "txg")[0].status.code == Code.MESSAGE_NOT_FOUND  # a half message is invisible

    def end(resolution, source=pb.SOURCE_CLIENT):
        return s.EndTransaction(spb.EndTransactionRequest(topic=pb.Resource(name=topic), message_id=mid,
                                                          transaction_id=tid, resolution=resolution, source=source),
                                metadata=md, timeout=5).status

    assert end(pb.COMMIT).code == Code.OK
    assert end(pb.COMMIT, pb.SOURCE_SERVER_CHECK).code == Code.OK  # a repeat changes nothing
    refused = end(pb.ROLLBACK)
    assert refused.code == Code.PRECONDITION_FAILED and "first decision wins" in refused.message
    got = [m.body for m in received(receive(s, md, topic, "txg"))]
    assert got == [b"tx"]
    bad = s.EndTransaction(spb.EndTransactionRequest(topic=pb.Resource(name=topic), message_id=mid,
                                                     transaction_id="not-a-transaction", resolution=pb.COMMIT),
                           metadata=md, timeout=5)
    assert bad.status.code == Code.INVALID_TRANSACTION_ID


def test_an_end_transaction_decides_the_half_its_transaction_id_names(stub, topic, admin):
    """As RocketMQ's proxy (the transaction found by producer group and transaction id) and broker
    (EndTransactionProcessor checks the group and offsets, not msgId), the transaction id alone names the half: a
    commit naming A's message id with B's transaction id commits B, and A stays pending (docs/grpc.md)."""
    s, md = stub
    r = s.SendMessage(spb.SendMessageRequest(messages=[message(topic, body, message_type=pb.TRANSACTION)
                                                       for body in (b"A", b"B")]), metadata=md, timeout=5)
    a, b = r.entries

    def end(message_id: str, tid: str, resolution: int) -> pb.Status:
        return s.EndTransaction(spb.EndTransactionRequest(topic=pb.Resource(name=topic), message_id=message_id,
                                                          transaction_id=tid, resolution=resolution),
                                metadata=md, timeout=5).status

    assert end(a.message_id, b.transaction_id, pb.COMMIT).code == Code.OK
    assert [m.body for m in received(receive(s, md, topic, "by_tid"))] == [b"B"]
    assert sum(len(d["pending"]) for d in admin.tx_list(group=topic).values()) == 1
    assert end(a.message_id, a.transaction_id, pb.ROLLBACK).code == Code.OK


def test_other_refusals(stub, topic):
    s, md = stub
    assert s.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER), timeout=5).status.code == \
        Code.CLIENT_ID_REQUIRED
    assert s.RecallMessage(spb.RecallMessageRequest(topic=pb.Resource(name=topic), recall_handle="x"),
                           metadata=md, timeout=5).status.code == Code.BAD_REQUEST  # not a recall handle
    req = spb.ReceiveMessageRequest(group=pb.Resource(name="g"), message_queue=pb.MessageQueue(
        topic=pb.Resource(name=topic)), filter_expression=pb.FilterExpression(type=pb.SQL, expression="a >"))
    refused = list(s.ReceiveMessage(req, metadata=md, timeout=5))
    assert [x.status.code for x in refused] == [Code.ILLEGAL_FILTER_EXPRESSION]
    assert "line 1, column 4" in refused[0].status.message
    req = spb.ReceiveMessageRequest(group=pb.Resource(name=""), message_queue=pb.MessageQueue(
        topic=pb.Resource(name=topic)))
    assert [x.status.code for x in s.ReceiveMessage(req, metadata=md, timeout=5)] == [Code.ILLEGAL_CONSUMER_GROUP]


def test_duplicated_security_headers(stub):
    """Two values of one security header are two readings of one call: refused, with ACL off too."""
    s, _ = stub
    for header in ("x-mq-client-id", "x-mq-date-time", "authorization", "x-mq-namespace"):
        md = [("x-mq-client-id", "dup-1"), (header, "a"), (header, "b")]
        r = s.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER), metadata=md, timeout=5)
        assert r.status.code == Code.BAD_REQUEST and f"header {header} is given more than once" in r.status.message


def test_a_request_that_is_not_its_protobuf_is_answered_bad_request_in_one_log_line(server, stub):
    _, md = stub
    """Bytes that do not parse as the method's request are answered as every bad request is (BAD_REQUEST in the
    response's status; for Telemetry, a status command, then the stream ends), and a flood of them is one log line
    per host and 10 s, not a traceback each."""
    channel = grpc.insecure_channel(server.grpc)
    raw: dict[str, Any] = {"request_serializer": lambda b: b, "response_deserializer": lambda b: b}
    garbage = b"\xff\xff\xff\xff\x0f"
    try:
        before = server.log_path.read_text().count("Wire format was corrupt")
        route = channel.unary_unary("/apache.rocketmq.v2.MessagingService/QueryRoute", **raw)
        for _ in range(20):
            answer = spb.QueryRouteResponse.FromString(route(garbage, metadata=md, timeout=10))
            assert answer.status.code == Code.BAD_REQUEST, answer.status
        receive = channel.unary_stream("/apache.rocketmq.v2.MessagingService/ReceiveMessage", **raw)
        answers = [spb.ReceiveMessageResponse.FromString(b) for b in receive(garbage, metadata=md, timeout=10)]
        assert [a.status.code for a in answers] == [Code.BAD_REQUEST], answers
        telemetry = channel.stream_stream("/apache.rocketmq.v2.MessagingService/Telemetry", **raw)
        commands = [spb.TelemetryCommand.FromString(b) for b in telemetry(iter([garbage]), metadata=md, timeout=10)]
        assert [c.status.code for c in commands] == [Code.BAD_REQUEST], commands
        time.sleep(0.5)  # the server's log lines of the calls above
        text = server.log_path.read_text()
        assert text.count("Wire format was corrupt") - before <= 3, text[-3000:]
    finally:
        channel.close()
