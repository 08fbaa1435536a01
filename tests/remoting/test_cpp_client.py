"""The real RocketMQ C++ client (PyPI rocketmq==0.4.4) against a bare RemotingServer.

The server plays name server and broker on one port with canned answers: enough to show that the C++
client's frames decode here and that it reads our responses (JSON header, string extFields, flag, opaque).
Runs the client in a child process with its own HOME (it writes logs under $HOME/logs).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import orjson

from txmq.remoting.codes import LanguageCode, RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.server import RemotingServer
from txmq.remoting.transport import Connection, new_event_loop

DRIVER = """
import sys
from rocketmq.client import Producer, Message
p = Producer("cpp_group", timeout=3000)
p.set_namesrv_addr(sys.argv[1])
p.start()
try:
    m = Message("orders")
    m.set_keys("k1")
    m.set_tags("t1")
    m.set_body(b"hello txmq")
    r = p.send_sync(m)
    print("RESULT", int(r.status), r.msg_id, r.offset, flush=True)
finally:
    p.shutdown()
"""


class FakeNameServerAndBroker:
    def __init__(self) -> None:
        self.port = 0
        self.seen: list[RemotingCommand] = []

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.seen.append(cmd)
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            if cmd.ext_fields.get("topic") != "orders":
                return RemotingCommand.response_to(cmd, ResponseCode.TOPIC_NOT_EXIST, "no such topic")
            route = {
                "orderTopicConf": "",
                "queueDatas": [
                    {
                        "brokerName": "b0",
                        "readQueueNums": 1,
                        "writeQueueNums": 1,
                        "perm": 6,
                        "topicSynFlag": 0,
                    }
                ],
                "brokerDatas": [
                    {"cluster": "c", "brokerName": "b0", "brokerAddrs": {"0": f"127.0.0.1:{self.port}"}}
                ],
                "filterServerTable": {},
            }
            return RemotingCommand.response_to(cmd, body=orjson.dumps(route))
        if cmd.code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            return RemotingCommand.response_to(
                cmd,
                ext_fields={
                    "msgId": "7F00000100002A9F00000000000004D2",
                    "queueId": "0",
                    "queueOffset": "1234",
                    "transactionId": "",
                },
            )
        return RemotingCommand.response_to(cmd)


def test_cpp_producer_sends_through_our_transport(tmp_path: Path) -> None:
    fake = FakeNameServerAndBroker()

    async def main() -> str:
        server = RemotingServer(fake)
        await server.start()
        fake.port = server.port
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", DRIVER, f"127.0.0.1:{server.port}",
                env={**os.environ, "HOME": str(tmp_path)},
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                out, err = await asyncio.wait_for(proc.communicate(), 60)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                raise
            assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
            return out.decode()
        finally:
            await server.close()

    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        out = runner.run(main())
    line = next(x for x in out.splitlines() if x.startswith("RESULT"))
    _, status, msg_id, offset = line.split()
    assert status == "0"
    assert msg_id  # the client reports its own UNIQ_KEY
    assert offset == "1234"  # read from our stringified extFields
    codes = {c.code for c in fake.seen}
    assert RequestCode.GET_ROUTEINFO_BY_TOPIC in codes and RequestCode.SEND_MESSAGE in codes
    send = next(c for c in fake.seen if c.code == RequestCode.SEND_MESSAGE)
    assert send.language is LanguageCode.CPP and send.body == b"hello txmq"
    assert send.ext_fields["topic"] == "orders" and send.ext_fields["producerGroup"] == "cpp_group"
