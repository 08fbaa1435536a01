"""Bad input gets a clear error, and loses nothing: refused topics and bodies, and raw sockets that send
garbage or stop mid-frame to the broker and to the name server, which go on serving everyone else."""

from __future__ import annotations

import json
import socket
import struct
import zlib

import pytest

from tests.e2e.helpers import Recorder, addr_of, push_consumer, roundtrip
from txmq import Admin, BrokerError, ClientError, InvalidMessageError, Message, Producer, SendStatus
from txmq.message import MessageSysFlag, encode_batch
from txmq.remoting.codec import encode_command
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand


def _messages(namesrv: str, topic: str) -> int:
    with Admin(namesrv) as admin:
        return sum(int(s["topics"].get(topic, {}).get("messages", 0)) for s in admin.stats().values())


def _closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True when the peer closes the connection (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.fixture
def strict_broker(cluster):
    """A broker that creates no topic by itself and refuses bodies over 4 KiB; topic ``known`` exists."""
    b = cluster.start_broker(conf={"autoCreateTopicEnable": "false", "maxMessageSize": 4096})
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("known", queue_nums=2)
    cluster.wait_route("known")
    return b


def test_unknown_topic_without_auto_create_is_refused_clearly(cluster, strict_broker):
    with Producer("p_unknown", cluster.namesrv_addr, max_message_size=1 << 20) as producer:
        with pytest.raises(ClientError, match="no route for topic nowhere"):
            producer.send(Message("nowhere", b"x"))
        # The broker refuses it too when asked directly (a client with a stale route, say).
        header = {"producerGroup": "p_unknown", "topic": "nowhere", "defaultTopic": "TBW102",
                  "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0", "bornTimestamp": "0",
                  "flag": "0", "properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
        resp = roundtrip(strict_broker.addrs["broker"],
                          RemotingCommand.request(RequestCode.SEND_MESSAGE, header, body=b"x"))
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        assert "nowhere" in (resp.remark or "") and "autoCreateTopicEnable" in (resp.remark or "")
        assert producer.send(Message("known", b"ok")).status == SendStatus.SEND_OK
    with Admin(cluster.namesrv_addr) as admin:
        assert "nowhere" not in admin.list_topics()


@pytest.mark.parametrize("topic", ["has space", "semi;colon", "x" * 128, "", "dot.ted"])
def test_invalid_topic_names_are_refused_before_sending(cluster, topic):
    cluster.start_broker()
    with Producer("p_badname", cluster.namesrv_addr) as producer, pytest.raises(InvalidMessageError):
        producer.send(Message(topic, b"x"))
    with Admin(cluster.namesrv_addr) as admin, pytest.raises(InvalidMessageError):
        admin.create_topic(topic)


def test_invalid_topic_name_sent_raw_gets_an_error_response(cluster):
    broker = cluster.start_broker()
    header = {"producerGroup": "g", "topic": "bad topic!", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
              "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": "",
              "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
    resp = roundtrip(broker.addrs["broker"], RemotingCommand.request(RequestCode.SEND_MESSAGE, header, b"x"))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert "illegal characters" in (resp.remark or "")


def test_oversized_body_is_refused_and_nothing_is_stored(cluster, strict_broker):
    with Producer("p_big", cluster.namesrv_addr, max_message_size=1 << 20) as producer:
        with pytest.raises(BrokerError) as refused:
            producer.send(Message("known", b"x" * 5000))
        assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL
        assert "maxMessageSize" in str(refused.value)
        with pytest.raises(BrokerError):
            producer.send_batch([Message("known", b"y" * 5000)])
        # A body under the limit whose whole record (header, properties) is over it: refused by the store,
        # with a remark that says why.
        with pytest.raises(BrokerError, match=r"record .* must fit maxMessageSize 4096"):
            producer.send(Message("known", b"x" * 4090))
        assert producer.send(Message("known", b"x" * 3000)).status == SendStatus.SEND_OK
    # The producer's own limit refuses before sending.
    with Producer("p_big2", cluster.namesrv_addr, max_message_size=1000) as producer, \
            pytest.raises(InvalidMessageError, match="exceeds max"):
        producer.send(Message("known", b"x" * 1001))
    assert _messages(cluster.namesrv_addr, "known") == 1


def test_a_compressed_body_must_inflate_within_max_message_size(cluster, strict_broker):
    """A body flagged compressed that inflates past maxMessageSize (a few KB of zeros that are megabytes), or does
    not inflate, is refused and not stored: the broker inflates stored bodies for gRPC consumers and every consumer
    does, so one producer's bomb must not reach them. A compressed body within the limit is stored and consumed as
    sent."""

    def send(body: bytes) -> RemotingCommand:
        header = {"producerGroup": "p_zip", "topic": "known", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                  "queueId": "0", "sysFlag": str(int(MessageSysFlag.COMPRESSED)), "bornTimestamp": "0", "flag": "0",
                  "properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
        return roundtrip(strict_broker.addrs["broker"], RemotingCommand.request(RequestCode.SEND_MESSAGE, header,
                                                                                 body=body))

    bomb = zlib.compress(b"\0" * (64 << 20))  # 64 MiB in about 64 KiB: over the 4 KiB limit even compressed
    small_bomb = zlib.compress(b"\0" * 100_000)  # within the limit compressed, 100 KB inflated
    assert len(small_bomb) < 4096
    refused = send(small_bomb)
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL and "inflates to more" in (refused.remark or ""), refused
    assert send(bomb).code == ResponseCode.MESSAGE_ILLEGAL
    broken = send(b"not a zlib stream")
    assert broken.code == ResponseCode.MESSAGE_ILLEGAL and "does not inflate" in (broken.remark or ""), broken
    cut = send(zlib.compress(b"x" * 3000)[:-6])
    assert cut.code == ResponseCode.MESSAGE_ILLEGAL and "cut short" in (cut.remark or ""), cut
    assert send(zlib.compress(b"fits " * 600)).code == ResponseCode.SUCCESS
    assert _messages(cluster.namesrv_addr, "known") == 1
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "g_zip", "known", rec)
    try:
        assert rec.wait_for(1, 20)
        assert rec.bodies() == [b"fits " * 600]
    finally:
        consumer.shutdown()


def test_a_batch_flagged_compressed_must_inflate_within_max_message_size(cluster, strict_broker):
    """A batch's sysFlag is each of its messages' as stored: flagged compressed, each body is inflated by consumers
    as a single message's is, so each must inflate within maxMessageSize as a single send's must."""
    header = {"producerGroup": "p_zip", "topic": "known", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
              "queueId": "0", "sysFlag": str(int(MessageSysFlag.COMPRESSED)), "bornTimestamp": "0", "flag": "0",
              "properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "true"}
    small_bomb = zlib.compress(b"\0" * 100_000)  # within the limit compressed, 100 KB inflated
    resp = roundtrip(strict_broker.addrs["broker"], RemotingCommand.request(
        RequestCode.SEND_BATCH_MESSAGE, header, body=encode_batch([Message("known", small_bomb)])))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL, resp
    assert _messages(cluster.namesrv_addr, "known") == 0


GARBAGE = [
    pytest.param(b"\xff\xff\xff\xff" + b"junk" * 8, id="huge-length"),
    pytest.param(struct.pack(">I", 2) + b"ab", id="too-short-length"),
    pytest.param(struct.pack(">II", 12, 200) + b"{}{}" + b"\0" * 4, id="header-longer-than-frame"),
    pytest.param(struct.pack(">II", 10, 6) + b"not js", id="header-not-json"),
    pytest.param(struct.pack(">II", 10, (7 << 24) | 6) + b"{\"a\":1", id="unknown-serialization"),
    pytest.param(struct.pack(">II", 4 + 11, 11) + b'{"code":"x"}'[:11], id="code-not-int"),
    pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="http"),
]


@pytest.mark.parametrize("garbage", GARBAGE)
def test_garbage_frames_close_the_connection_and_servers_keep_serving(cluster, garbage):
    broker = cluster.start_broker()
    with Producer("p_garbage", cluster.namesrv_addr) as producer:
        before = producer.send(Message("g_t", b"before"))
        for addr in (broker.addrs["broker"], cluster.namesrv_addr):
            with socket.create_connection(addr_of(addr), timeout=5) as s:
                s.sendall(garbage)
                assert _closed_by_peer(s), f"{addr} kept a connection that sent garbage open"
        # The producer's own connections were not disturbed, and new ones work too.
        after = producer.send(Message("g_t", b"after"))
    with Producer("p_garbage2", cluster.namesrv_addr) as producer:
        fresh = producer.send(Message("g_t", b"fresh"))
    assert {r.status for r in (before, after, fresh)} == {SendStatus.SEND_OK}
    assert _messages(cluster.namesrv_addr, "g_t") == 3


def test_half_written_frame_then_disconnect_stores_nothing(cluster):
    broker = cluster.start_broker()
    with Producer("p_half", cluster.namesrv_addr) as producer:
        producer.send(Message("half_t", b"whole"))
        header = {"producerGroup": "p_half", "topic": "half_t", "defaultTopic": "TBW102",
                  "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0",
                  "properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
        frame = encode_command(RemotingCommand.request(RequestCode.SEND_MESSAGE, header, b"P" * 1000))
        for addr in (broker.addrs["broker"], cluster.namesrv_addr):
            for cut in (2, 6, len(frame) // 2, len(frame) - 1):
                with socket.create_connection(addr_of(addr), timeout=5) as s:
                    s.sendall(frame[:cut])
        # A whole frame on a fresh connection works, and the cut ones stored nothing.
        resp = roundtrip(broker.addrs["broker"], RemotingCommand.request(RequestCode.SEND_MESSAGE,
                                                                                header, b"raw"))
        assert resp.code == ResponseCode.SUCCESS
        assert producer.send(Message("half_t", b"after")).status == SendStatus.SEND_OK
    rec = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "g_half", "half_t", rec)
    try:
        assert rec.wait_for(3, 10)
        assert not rec.wait_for(4, 1.0)
    finally:
        consumer.shutdown()
    assert sorted(rec.bodies()) == [b"after", b"raw", b"whole"]


def test_well_framed_nonsense_requests_get_error_answers(cluster):
    broker = cluster.start_broker()
    baddr = broker.addrs["broker"]
    # an unknown request code
    resp = roundtrip(baddr, RemotingCommand.request(9999, {}))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert resp.remark == "request code 9999 is not supported by txmq's broker"
    # a send with fields of the wrong type, or missing
    resp = roundtrip(baddr, RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "t", "queueId": "abc"}))
    assert resp.code != ResponseCode.SUCCESS and resp.remark
    resp = roundtrip(baddr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "t"}))
    assert resp.code != ResponseCode.SUCCESS and resp.remark
    # a heartbeat and a lock request whose bodies are not JSON
    resp = roundtrip(baddr, RemotingCommand.request(RequestCode.HEART_BEAT, body=b"{nope"))
    assert resp.code == ResponseCode.SYSTEM_ERROR
    resp = roundtrip(baddr, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=json.dumps([1]).encode()))
    assert resp.code == ResponseCode.SYSTEM_ERROR
    # a batch whose body is not a batch
    header = {"producerGroup": "g", "topic": "nb_t", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
              "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": "",
              "reconsumeTimes": "0", "unitMode": "false", "batch": "true"}
    resp = roundtrip(baddr, RemotingCommand.request(RequestCode.SEND_MESSAGE, header, b"\x00\x00\x00\x50garbage"))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    # a route request to the name server without a topic, and one for a topic nobody has
    resp = roundtrip(cluster.namesrv_addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {}))
    assert resp.code != ResponseCode.SUCCESS
    resp = roundtrip(cluster.namesrv_addr,
                      RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "nobody"}))
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    # and the broker still serves
    with Producer("p_nonsense", cluster.namesrv_addr) as producer:
        assert producer.send(Message("nb_t", b"ok")).status == SendStatus.SEND_OK
    assert _messages(cluster.namesrv_addr, "nb_t") == 1


def test_queue_locks_only_for_queues_this_broker_serves(cluster, strict_broker):
    """LOCK_BATCH_MQ grants only queues of this broker's own topics (``known`` has 2 queues here): a client naming
    unknown topics, queue ids or brokers gets nothing locked, so the lock table stays bounded by the broker's
    queues. A granted lock holds against another client."""
    baddr = strict_broker.addrs["broker"]

    def lock(client: str, mqs: list[dict[str, object]]) -> list[dict[str, object]]:
        body = json.dumps({"consumerGroup": "lock_g", "clientId": client, "mqSet": mqs}).encode()
        resp = roundtrip(baddr, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        return json.loads(resp.body)["lockOKMQSet"]

    own = {"topic": "known", "brokerName": "broker-a", "queueId": 0}
    foreign = [{"topic": f"nope_{i}", "brokerName": "broker-a", "queueId": 0} for i in range(50)]
    foreign += [{"topic": "known", "brokerName": "broker-a", "queueId": 2},
                {"topic": "known", "brokerName": "broker-a", "queueId": -1},
                {"topic": "known", "brokerName": "broker-zz", "queueId": 1}]
    assert lock("c1", [own, *foreign]) == [own]
    assert lock("c2", [own]) == []  # c1 holds it
