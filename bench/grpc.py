"""Send and transaction rates over the RocketMQ 5 gRPC endpoint beside RocketMQ 4 remoting, one broker.

    .venv/bin/python bench/grpc.py [--count 4000] [--window 64] [--body 256]

Starts ``txmq server`` (ASYNC_FLUSH, free ports, a temporary store) in a child process, then from this process:

* remoting: txmq's ``Producer.send`` and ``TransactionProducer.send_message_in_transaction`` (COMMIT), one caller
  (window 1) and ``--window`` threads;
* gRPC: ``SendMessage`` and ``SendMessage(TRANSACTION)`` + ``EndTransaction(COMMIT)`` with txmq's generated stubs on
  a ``grpc.aio`` channel, one call in flight (window 1) and ``--window`` in flight.

Prints one line per case (messages or transactions per second). The client side is Python in both cases, so the
numbers compare the protocols' cost through this broker, not the official clients (whose send loop is slower
than either).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# This file is named like the grpc package: take its folder off the path before importing grpc.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.join(_HERE, "..", "src"))

import grpc  # noqa: E402

from txmq import (  # noqa: E402
    LocalTransactionState,
    Message,
    Producer,
    TransactionListener,
    TransactionProducer,
    bench,
)
from txmq.client.admin import Admin  # noqa: E402
from txmq.grpc.protocol import definition_pb2 as pb  # noqa: E402
from txmq.grpc.protocol import service_pb2 as spb  # noqa: E402
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub  # noqa: E402
from txmq.launch import ServerProcess, txmq_command  # noqa: E402


def start_server(root: Path) -> ServerProcess:
    env = dict(os.environ, HOME=str(root), PYTHONUNBUFFERED="1")
    args = txmq_command("server", "--store", str(root / "store"), "--port", "0", "--namesrv-port", "0",
                        "--grpc-port", "0")
    return ServerProcess(args, root / "server.log", env).start(30)


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:9,.0f}/s".replace(",", " ")


# --- remoting -----------------------------------------------------------------------------------------------

def timed(send: Callable[[], object], count: int, window: int) -> float:
    """Seconds for ``count`` calls of ``send`` after one warm-up call (routes), ``window`` at a time."""
    send()
    started = time.perf_counter()
    if window == 1:
        for _ in range(count):
            send()
    else:
        with ThreadPoolExecutor(window) as ex:
            list(ex.map(lambda _: send(), range(count)))
    return time.perf_counter() - started


def remoting_send(namesrv: str, topic: str, count: int, window: int, body: bytes) -> float:
    with Producer("bench_grpc_remoting", namesrv=namesrv) as p:
        return timed(lambda: p.send(Message(topic, body)), count, window)


class Commit(TransactionListener):
    def execute_local_transaction(self, msg, arg):  # type: ignore[no-untyped-def]
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, msg):  # type: ignore[no-untyped-def]
        return LocalTransactionState.COMMIT


def remoting_tx(namesrv: str, topic: str, count: int, window: int, body: bytes) -> float:
    p = TransactionProducer("bench_grpc_tx", Commit(), namesrv=namesrv)
    p.start()
    try:
        return timed(lambda: p.send_message_in_transaction(Message(topic, body)), count, window)
    finally:
        p.shutdown()


# --- gRPC ---------------------------------------------------------------------------------------------------

def grpc_message(topic: str, body: bytes, kind: int) -> spb.SendMessageRequest:
    return spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=(
        pb.SystemProperties(message_id=uuid.uuid4().hex.upper(), body_encoding=pb.IDENTITY, message_type=kind)))])


async def grpc_run(addr: str, topic: str, count: int, window: int, body: bytes, tx: bool) -> float:
    md = (("x-mq-client-id", f"bench-{uuid.uuid4().hex[:8]}"),)
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = MessagingServiceStub(channel)

        async def one() -> None:
            r = await stub.SendMessage(grpc_message(topic, body, pb.TRANSACTION if tx else pb.NORMAL), metadata=md)
            assert r.status.code == pb.OK, r.status
            if tx:
                e = r.entries[0]
                end = await stub.EndTransaction(spb.EndTransactionRequest(
                    topic=pb.Resource(name=topic), message_id=e.message_id, transaction_id=e.transaction_id,
                    resolution=pb.COMMIT, source=pb.SOURCE_CLIENT), metadata=md)
                assert end.status.code == pb.OK, end.status

        await one()
        left = count

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await one()

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(window)))
        return time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=4000)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--body", type=int, default=256)
    args = ap.parse_args()
    body = b"x" * args.body
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp))
        addrs = server.addrs
        try:
            with Admin(addrs["namesrv"]) as admin:
                admin.create_topic("bench_grpc", 8)
            time.sleep(0.5)
            print(f"txmq server {addrs}; {args.count} messages of {args.body} B per case", flush=True)
            for window in (1, args.window):
                n = args.count if window > 1 else args.count // 4
                t = remoting_send(addrs["namesrv"], "bench_grpc", n, window, body)
                print(f"remoting send         window {window:3d}: {rate(n, t)}", flush=True)
                t = asyncio.run(grpc_run(addrs["grpc"], "bench_grpc", n, window, body, tx=False))
                print(f"gRPC     send         window {window:3d}: {rate(n, t)}", flush=True)
                t = remoting_tx(addrs["namesrv"], "bench_grpc", n, window, body)
                print(f"remoting transaction  window {window:3d}: {rate(n, t)}", flush=True)
                t = asyncio.run(grpc_run(addrs["grpc"], "bench_grpc", n, window, body, tx=True))
                print(f"gRPC     transaction  window {window:3d}: {rate(n, t)}", flush=True)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    bench.run(main)
