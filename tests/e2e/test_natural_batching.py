"""Natural batching over real TCP: requests that arrive in one read become one store put, and each still gets its
own answer (offset, id, status) or its own error. Single-message SEND_MESSAGE frames, as RocketMQ's clients send
them; half messages and END_TRANSACTIONs the same; a connection closed with its requests still in the broker."""

from __future__ import annotations

import socket
import time

import pytest

from tests.e2e.helpers import addr_of
from txmq import Admin, bench
from txmq.message import MessageConst, properties_to_string
from txmq.remoting.codec import FrameDecoder, encode_command
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import FLAG_ONEWAY, RemotingCommand

TOPIC = "nb"
GROUP = "p_nb"


def send(opaque: int, body: bytes, queue_id: int, topic: str = TOPIC, half: bool = False) -> RemotingCommand:
    props = {MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"NB{opaque:030X}"}
    if half:
        props |= {MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: GROUP}
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, {
        "producerGroup": GROUP, "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "3",
        "queueId": str(queue_id), "sysFlag": "4" if half else "0", "bornTimestamp": "0", "flag": "0",
        "properties": properties_to_string(props), "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
    }, body)
    cmd.opaque = opaque
    return cmd


def end(opaque: int, answer: RemotingCommand, commit_log_offset: int | None = None,
        oneway: bool = False, commit: bool = True) -> RemotingCommand:
    ext = answer.ext_fields
    cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, {
        "producerGroup": GROUP, "tranStateTableOffset": ext["queueOffset"],
        "commitLogOffset": str(int(ext["msgId"][16:], 16) if commit_log_offset is None else commit_log_offset),
        "commitOrRollback": "8" if commit else "12", "fromTransactionCheck": "false", "msgId": ext["msgId"],
    })
    cmd.opaque = opaque
    if oneway:
        cmd.flag |= FLAG_ONEWAY
    return cmd


def exchange(sock: socket.socket, cmds: list[RemotingCommand], answers: int) -> dict[int, RemotingCommand]:
    """Write every command with one sendall (one read for the broker), then read ``answers`` answers by opaque."""
    sock.sendall(b"".join(encode_command(c) for c in cmds))
    decoder, got = FrameDecoder(), {}
    while len(got) < answers:
        data = sock.recv(1 << 16)
        assert data, "connection closed before every answer"
        decoder.receive_data(data)
        while (resp := decoder.next_command()) is not None:
            if resp.is_response:
                got[resp.opaque] = resp
    return got


@pytest.fixture
def broker(cluster):
    b = cluster.start_broker(conf={"flushDiskType": "SYNC_FLUSH", "maxMessageSize": 8192})
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(TOPIC, queue_nums=3)
    cluster.wait_route(TOPIC)
    return b


def test_one_read_of_sends_each_answered_alone_in_queue_order(cluster, broker):
    cmds = [send(1000 + i, b"x" * (10_000 if i == 40 else 16), i % 3) for i in range(120)]
    cmds.insert(70, send(2000, b"y", 0, topic="SCHEDULE_TOPIC_XXXX"))  # a system topic: refused alone
    cmds.insert(90, send(2001, b"z", 7))  # no queue 7: refused alone
    with socket.create_connection(addr_of(broker.addrs["broker"]), timeout=10) as sock:
        got = exchange(sock, cmds, len(cmds))
    assert got[1040].code == ResponseCode.MESSAGE_ILLEGAL  # over maxMessageSize
    assert got[2000].code == ResponseCode.NO_PERMISSION
    assert got[2001].code == ResponseCode.SYSTEM_ERROR
    ok = [i for i in range(120) if i != 40]
    assert all(got[1000 + i].code == ResponseCode.SUCCESS for i in ok)
    for q in range(3):  # each stored send has its own queue offset, consecutive in the order sent
        offsets = [int(got[1000 + i].ext_fields["queueOffset"]) for i in ok if i % 3 == q]
        assert offsets == list(range(len(offsets)))
    ids = {got[1000 + i].ext_fields["msgId"] for i in ok}
    assert len(ids) == len(ok)  # and its own id
    assert bench.stored_messages(cluster.namesrv_addr, TOPIC) == len(ok)


def test_a_connection_closed_mid_batch_leaves_its_sends_whole(cluster, broker):
    with socket.create_connection(addr_of(broker.addrs["broker"]), timeout=10) as sock:
        sock.sendall(b"".join(encode_command(send(3000 + i, b"c" * 64, i % 3)) for i in range(200)))
    # Closed before any answer: every send the broker read is stored once, and the broker serves on.
    deadline = time.monotonic() + 10
    while bench.stored_messages(cluster.namesrv_addr, TOPIC) < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert bench.stored_messages(cluster.namesrv_addr, TOPIC) == 200
    with socket.create_connection(addr_of(broker.addrs["broker"]), timeout=10) as sock:
        assert exchange(sock, [send(1, b"after", 0)], 1)[1].code == ResponseCode.SUCCESS


def test_halves_and_end_transactions_of_one_read_each_answered_alone(cluster, broker):
    with socket.create_connection(addr_of(broker.addrs["broker"]), timeout=10) as sock:
        halves = exchange(sock, [send(4000 + i, f"t{i}".encode(), i % 3, half=True) for i in range(50)], 50)
        assert all(a.code == ResponseCode.SUCCESS for a in halves.values())
        ends = [end(5000 + i, halves[4000 + i]) for i in range(50)]
        ends.append(end(6000, halves[4007]))  # the same decision again, in the same read
        ends.append(end(6001, halves[4008], commit_log_offset=1 << 40))  # no half there
        got = exchange(sock, ends, len(ends))
        assert all(got[5000 + i].code == ResponseCode.SUCCESS for i in range(50))
        assert got[6000].code == ResponseCode.SUCCESS and "already committed" in (got[6000].remark or "")
        assert got[6001].code == ResponseCode.SYSTEM_ERROR
        # Java's way: END_TRANSACTION oneway, right behind more halves; COMMITs and ROLLBACKs in one read (one
        # put with their op records), and the connection closed at once, its decisions still in the broker. The
        # last ten ask for an answer, which then has no connection to go to: they stand all the same.
        more = exchange(sock, [send(7000 + i, b"o", 0, half=True) for i in range(40)], 40)
        sock.sendall(b"".join(encode_command(end(8000 + i, more[7000 + i], oneway=i < 30, commit=i < 20 or i >= 30))
                              for i in range(40)))
    deadline = time.monotonic() + 10
    while bench.stored_messages(cluster.namesrv_addr, TOPIC) < 80 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert bench.stored_messages(cluster.namesrv_addr, TOPIC) == 80  # each commit stored once, no rollback
    with socket.create_connection(addr_of(broker.addrs["broker"]), timeout=10) as sock:  # every decision stands
        again = exchange(sock, [end(9000 + i, more[7000 + i], commit=20 <= i < 30) for i in range(0, 40, 5)], 8)
    assert [again[9000 + i].code for i in range(0, 40, 5)] == [ResponseCode.TRANSACTION_SHOULD_COMMIT] * 4 + \
        [ResponseCode.TRANSACTION_SHOULD_ROLLBACK] * 2 + [ResponseCode.TRANSACTION_SHOULD_COMMIT] * 2
