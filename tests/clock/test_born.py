"""Born timestamps a producer's broken clock (or a forged request) sets far outside any sane date: refused at the
door with the reason, through remoting (a message, a batch) and gRPC; and a log that holds such values anyway
(written before the broker refused them, or by another program) is printed by every tool instead of killing it
with a traceback (``txmq admin queryMsgById`` died on a born timestamp of 2^62)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid

import grpc
import pytest

from tests.clock.conftest import Faked, utc
from txmq import Admin, PullConsumer, PullStatus
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub
from txmq.launch import free_port
from txmq.message import Message, MessageExt, create_offset_msg_id, encode_batch
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import SendMessageRequestHeader
from txmq.remoting.transport import RemotingClient
from txmq.store import DefaultMessageStore, StoreConfig

TOPIC = "born"
INSANE = [2**62, 253_402_300_800_000, -5, 946_684_799_999]  # 2^62 ms, the year 10000, before 1970, 1999


async def _send(addr: str, born: int, batch: bool) -> RemotingCommand:
    header = SendMessageRequestHeader(producer_group="p_born", topic=TOPIC, default_topic="TBW102",
                                      default_topic_queue_nums=1, queue_id=0, sys_flag=0, born_timestamp=born, flag=0,
                                      properties="", reconsume_times=0, batch=batch)
    code, body = RequestCode.SEND_MESSAGE_V2, b"hello"
    if batch:
        code, body = RequestCode.SEND_BATCH_MESSAGE, encode_batch([Message(TOPIC, b"a"), Message(TOPIC, b"b")])
    async with RemotingClient() as client:
        return await client.invoke(addr, RemotingCommand.request(code, header.to_v2_ext(), body=body), 10.0)


def test_born_timestamps_outside_2000_to_2200_are_refused_at_the_door(faked: Faked) -> None:
    faked.start({}, {TOPIC: 1})
    assert faked.broker is not None
    addr = faked.broker.addrs["broker"]
    for born in INSANE:
        for batch in (False, True):
            answer = asyncio.run(_send(addr, born, batch))
            assert answer.code == ResponseCode.MESSAGE_ILLEGAL and "born timestamp" in (answer.remark or ""), \
                (born, batch, answer.code, answer.remark)
    for born in (0, int(time.time() * 1000)):  # 0: none given (the broker's time is taken), and a sane one
        assert asyncio.run(_send(addr, born, False)).code == ResponseCode.SUCCESS
    channel = grpc.insecure_channel(faked.grpc_addr)
    try:
        stub = MessagingServiceStub(channel)
        md = [("x-mq-client-id", f"born-{uuid.uuid4().hex[:8]}")]
        for seconds in (2**62 // 1000, 253_402_300_800, -5):
            msg = pb.Message(topic=pb.Resource(name=TOPIC), body=b"x", system_properties=pb.SystemProperties(
                message_id=uuid.uuid4().hex.upper(), body_encoding=pb.IDENTITY,
                born_timestamp={"seconds": seconds}))
            resp = stub.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=md, timeout=10)
            entry = resp.entries[0].status
            assert entry.code == pb.Code.BAD_REQUEST and "born timestamp" in entry.message, (seconds, resp)
    finally:
        channel.close()
    assert stored(faked) == 2  # the two sane ones, nothing else


def test_a_broker_whose_clock_is_before_2000_takes_sends_that_give_no_born_timestamp(faked: Faked) -> None:
    """Born timestamp 0 (none given): the broker's own time is taken, and is not the producer's to be blamed for
    when the broker's clock is wrong (a board whose clock was reset): a batch was taken, a single send refused with
    "is the producer's clock right?". A gRPC send without a born timestamp, likewise."""
    faked.clock.at(utc("1999-12-31T23:58:00"), settle=False)
    faked.start({}, {TOPIC: 1})
    assert faked.broker is not None
    addr = faked.broker.addrs["broker"]
    for batch in (True, False):
        answer = asyncio.run(_send(addr, 0, batch))
        assert answer.code == ResponseCode.SUCCESS, (batch, answer.code, answer.remark)
    channel = grpc.insecure_channel(faked.grpc_addr)
    try:
        msg = pb.Message(topic=pb.Resource(name=TOPIC), body=b"x", system_properties=pb.SystemProperties(
            message_id=uuid.uuid4().hex.upper(), body_encoding=pb.IDENTITY))
        resp = MessagingServiceStub(channel).SendMessage(
            spb.SendMessageRequest(messages=[msg]), metadata=[("x-mq-client-id", f"born-{uuid.uuid4().hex[:8]}")],
            timeout=10)
        assert resp.entries[0].status.code == pb.Code.OK, resp
    finally:
        channel.close()
    assert stored(faked) == 4


def stored(faked: Faked) -> int:
    """How many messages the topic holds, through a pull consumer."""
    with PullConsumer("c_born", faked.namesrv) as pc:
        [mq] = pc.fetch_subscribe_message_queues(TOPIC)
        got = pc.pull(mq, "*", 0, 32)
        return len(got.msgs) if got.status == PullStatus.FOUND else 0


@pytest.mark.parametrize("born", [2**62, -(2**62), -1, 2**63 - 1])
def test_every_tool_prints_any_stored_born_timestamp(faked: Faked, born: int) -> None:
    """A record stored with such a born timestamp (written here straight into the broker's store, as a broker
    before the door check did): queryMsgById and printMsg print it, and the broker serves it."""
    port = free_port()
    store_dir = faked.cluster.root / "broker-a"

    async def write() -> int:
        config = StoreConfig(store_path_root_dir=str(store_dir), store_host=("127.0.0.1", port))
        async with DefaultMessageStore(config) as store:
            result = await store.put_message(MessageExt(TOPIC, b"from a broken clock", {}, born_timestamp=born,
                                                        born_host=("127.0.0.1", 1)))
            assert result.ok and result.append_result is not None
            return result.append_result.wrote_offset

    offset = asyncio.run(write())
    faked.cluster.start_namesrv()
    faked.broker = faked.cluster.broker("broker-a", {"grpcPort": -1}, port=port).start()
    with Admin(faked.namesrv) as admin:
        admin.create_topic(TOPIC, 1)
    faked.cluster.wait_route(TOPIC)
    msg_id = create_offset_msg_id(("127.0.0.1", port), offset)
    for args in (["queryMsgById", "-i", msg_id], ["printMsg", "-t", TOPIC]):
        out = subprocess.run([sys.executable, "-m", "txmq.cli", "-n", faked.namesrv, "admin", *args],
                             capture_output=True, text=True, timeout=60)  # the tool on the real clock
        assert out.returncode == 0 and "Traceback" not in out.stderr, (args, out.stdout, out.stderr)
        assert "from a broken clock" in out.stdout, out.stdout
        if args[0] == "queryMsgById":  # prints the born timestamp: the number, or the date it is
            assert str(born) in out.stdout or "1969-12-31" in out.stdout, out.stdout
