"""Round trips per second of small send-like requests over loopback, with a window of requests in flight.

    .venv/bin/python bench/remoting.py [--seconds 3] [--windows 1,16,128] [--body 256] [--loop uvloop|asyncio]

The server runs in a child process (its own core), the client in this one. Each request looks like a
RocketMQ SEND_MESSAGE (JSON header with the usual ext fields, a 256-byte body); the server answers
synchronously with a send-like response. Prints one line per window.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from txmq import bench
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.server import RemotingServer
from txmq.remoting.transport import Connection, RemotingClient


def _loop_factory(name: str):  # type: ignore[no-untyped-def]
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    queue_id = cmd.ext_int("queueId", 0)
    return RemotingCommand.response_to(
        cmd,
        ResponseCode.SUCCESS,
        ext_fields={
            "msgId": "7F00000100002A9F0000000000000000",
            "queueId": str(queue_id),
            "queueOffset": "12345",
            "transactionId": "",
        },
    )


def serve(loop_name: str, port_queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    async def main() -> None:
        server = RemotingServer(handler)
        await server.start()
        port_queue.put(server.port)
        try:
            await asyncio.Event().wait()
        finally:
            await server.close()

    with (
        asyncio.Runner(loop_factory=_loop_factory(loop_name)) as runner,
        contextlib.suppress(KeyboardInterrupt),
    ):
        runner.run(main())


def request(body: bytes) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.SEND_MESSAGE,
        {
            "producerGroup": "bench_group",
            "topic": "bench",
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4",
            "queueId": "1",
            "sysFlag": "0",
            "bornTimestamp": str(int(time.time() * 1000)),
            "flag": "0",
            "properties": "UNIQ_KEY\x017F0000010000ABCDEF\x02WAIT\x01true\x02",
            "reconsumeTimes": "0",
            "unitMode": "false",
            "batch": "false",
        },
        body,
    )


async def measure(addr: str, window: int, seconds: float, body: bytes) -> tuple[int, float]:
    client = RemotingClient()
    done = 0
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            resp = await client.invoke(addr, request(body), 5)
            assert resp.code == ResponseCode.SUCCESS
            done += 1

    try:
        await client.invoke(addr, request(body), 5)  # connect first
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(window)))
        return done, time.perf_counter() - start
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--windows", default="1,16,128")
    parser.add_argument("--body", type=int, default=256)
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    port_queue = ctx.Queue()
    proc = ctx.Process(target=serve, args=(args.loop, port_queue), daemon=True)
    proc.start()
    try:
        addr = f"127.0.0.1:{port_queue.get(timeout=10)}"
        body = os.urandom(args.body)
        print(f"loop={args.loop} body={args.body}B seconds={args.seconds} (server in a child process)")
        for window in (int(w) for w in args.windows.split(",")):
            with asyncio.Runner(loop_factory=_loop_factory(args.loop)) as runner:
                done, elapsed = runner.run(measure(addr, window, args.seconds, body))
            print(f"window={window:4d}  round_trips={done:8d}  per_s={done / elapsed:10.0f}")
    finally:
        proc.terminate()
        proc.join(5)


if __name__ == "__main__":
    bench.run(main)
