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

    .venv/bin/python bench/grpc.py --official [--count 20000] [--window 1000] [--runs 3]

instead compares the official RocketMQ 5 Python client (``rocketmq-python-client`` in ``.venv-rmq5``: ``send_async``
with at most ``--window`` unanswered, tests/grpc/drivers/rmq5_py.py) with single-message SEND_MESSAGE frames over
remoting as RocketMQ 4's clients send them (``bench/raw_frames.py``'s client, the same window), alternating, a
fresh 4-queue topic per run: messages per second and the broker's CPU per message of each, and their ratios.
Each run also drives the official client against a servicer that answers at once and stores nothing (``--floor``,
in a process of its own on grpcio's asyncio server and txmq's event loop, as the broker runs its endpoint): the
client's rate there is the most any broker could give that client on this machine, the servicer's CPU per call is
grpcio's own cost of a unary call, and the client's CPU per send is printed for every gRPC case.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
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

from txmq import LocalTransactionState, Message, Producer, TransactionListener, TransactionProducer  # noqa: E402
from txmq.client.admin import Admin  # noqa: E402
from txmq.grpc.protocol import definition_pb2 as pb  # noqa: E402
from txmq.grpc.protocol import service_pb2 as spb  # noqa: E402
from txmq.grpc.protocol.service_pb2_grpc import (  # noqa: E402
    MessagingServiceServicer,
    MessagingServiceStub,
    add_MessagingServiceServicer_to_server,
)
from txmq.launch import ServerProcess, txmq_command  # noqa: E402

sys.path.append(_HERE)  # the other benches, now that grpc is imported
import raw_frames  # noqa: E402

from txmq import bench  # noqa: E402
from txmq.remoting.transport import new_event_loop  # noqa: E402

RMQ5_PYTHON = Path(_HERE).parent / ".venv-rmq5" / "bin" / "python"
RMQ5_DRIVER = Path(_HERE).parent / "tests" / "grpc" / "drivers" / "rmq5_py.py"


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


# --- the official client against raw remoting frames (issue 15) ---------------------------------------------

def official_send(root: Path, endpoint: str, topic: str, count: int, window: int, size: int,
                  meter: bench.Meter) -> tuple[float, float]:
    """Seconds the official client's ``send_async`` took for ``count`` messages (its own process and HOME), and
    the client process's CPU seconds meanwhile; ``meter`` runs from its first send to its last receipt, after the
    client's start-up (routes, session)."""
    home = root / "rmq5-home"
    home.mkdir(exist_ok=True)
    proc = subprocess.Popen([str(RMQ5_PYTHON), str(RMQ5_DRIVER), json.dumps({
        "cmd": "send_async", "endpoint": endpoint, "topic": topic, "count": count, "window": window, "size": size,
        "timeout": 30})], env=dict(os.environ, HOME=str(home)), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    events = []
    client_cpu = [0.0, 0.0]
    try:
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            events.append(json.loads(line))
            if events[-1]["event"] == "ready":
                meter.start()
                client_cpu[0] = bench.process_cpu_s(proc.pid) or 0.0
                proc.stdin.write("go\n")
                proc.stdin.flush()
            elif events[-1]["event"] == "sent":
                meter.stop()
                client_cpu[1] = bench.process_cpu_s(proc.pid) or 0.0
            elif events[-1]["event"] == "done":
                break
    finally:
        proc.stdin.close()
        if proc.wait(timeout=60):
            proc.kill()
    sent = next((e for e in events if e["event"] == "sent"), None)
    if sent is None or sent["failures"]:
        raise bench.BenchError(f"official client failed: {sent or events[-1:]}")
    return float(sent["seconds"]), client_cpu[1] - client_cpu[0]


class FloorServicer(MessagingServiceServicer):
    """What the official producer asks (its route, heartbeat and settings, then its sends), answered at once,
    nothing stored: the least a broker could do per call behind grpcio."""

    def __init__(self) -> None:
        self.port = 0

    async def QueryRoute(self, request, context):  # type: ignore[no-untyped-def]
        ok = pb.Status(code=pb.OK, message="OK")
        broker = pb.Broker(name="floor", id=0, endpoints=pb.Endpoints(
            scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=self.port)]))
        return spb.QueryRouteResponse(status=ok, message_queues=[pb.MessageQueue(
            topic=request.topic, id=i, permission=pb.READ_WRITE, broker=broker, accept_message_types=[pb.NORMAL])
            for i in range(raw_frames.QUEUES)])

    async def Heartbeat(self, request, context):  # type: ignore[no-untyped-def]
        return spb.HeartbeatResponse(status=pb.Status(code=pb.OK, message="OK"))

    async def SendMessage(self, request, context):  # type: ignore[no-untyped-def]
        ok = pb.Status(code=pb.OK, message="OK")
        return spb.SendMessageResponse(status=ok, entries=[spb.SendResultEntry(
            status=ok, message_id=m.system_properties.message_id, offset=0) for m in request.messages])

    async def Telemetry(self, request_iterator, context):  # type: ignore[no-untyped-def]
        async for command in request_iterator:
            if command.HasField("settings"):
                yield spb.TelemetryCommand(status=pb.Status(code=pb.OK, message="OK"), settings=command.settings)


def serve_floor() -> int:
    """``--floor``: serve ``FloorServicer`` on a free port (printed on the first line) until stdin closes."""
    async def serve() -> None:
        servicer = FloorServicer()
        server = grpc.aio.server()
        add_MessagingServiceServicer_to_server(servicer, server)
        servicer.port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(servicer.port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await server.stop(0)

    loop = new_event_loop()
    try:
        loop.run_until_complete(serve())
    finally:
        loop.close()
    return 0


def official_vs_remoting(server: ServerProcess, floor: subprocess.Popen[str], root: Path,
                         args: argparse.Namespace) -> None:
    """Alternate remoting frames, the official client on txmq's endpoint and on the floor servicer."""
    assert floor.stdout is not None
    floor_addr = f"127.0.0.1:{floor.stdout.readline().strip()}"
    # (msg/s, server µs/msg, client µs/msg) per kind; the server is the broker, or the floor servicer
    rows: dict[str, list[tuple[float, float, float]]] = {"remoting": [], "grpc": [], "floor": []}
    for run in range(args.runs):
        for kind in ("remoting", "grpc", "floor") if run % 2 == 0 else ("floor", "grpc", "remoting"):
            topic = f"bench_official_{kind}_{run}"
            if kind != "floor":  # the floor servicer routes any topic itself
                bench.ensure_topic(server.addrs["namesrv"], topic, raw_frames.QUEUES)
            meter = bench.Meter(floor.pid if kind == "floor" else server.pid)
            client = 0.0
            if kind != "remoting":
                seconds, client = official_send(root, floor_addr if kind == "floor" else server.addrs["grpc"],
                                                topic, args.count, args.window, args.body, meter)
            else:
                loop = new_event_loop()
                try:
                    meter.start()
                    seconds = loop.run_until_complete(raw_frames.drive(
                        server.addrs["broker"], topic, args.count, args.body, args.window, 1, False))
                    meter.stop()
                finally:
                    loop.close()
                client = meter.client_cpu or 0.0
            row = (args.count / seconds, (meter.broker_cpu or 0) / args.count * 1e6, client / args.count * 1e6)
            rows[kind].append(row)
            print(f"run {run + 1} {kind:8s}: {row[0]:9,.0f}/s, server {row[1]:5.1f} µs/msg, client {row[2]:5.1f} "
                  f"µs/msg (wall {seconds:.2f} s)", flush=True)
    med = {k: tuple(statistics.median(r[i] for r in v) for i in range(3)) for k, v in rows.items()}
    for kind, (per_s, server_us, client_us) in med.items():
        print(f"median {kind:8s}: {per_s:9,.0f}/s, server {server_us:5.1f} µs/msg, client {client_us:5.1f} µs/msg",
              flush=True)
    print(f"gRPC (official client) / remoting: {med['grpc'][0] / med['remoting'][0]:.2f}x msg/s, "
          f"{med['grpc'][1] / med['remoting'][1]:.2f}x broker CPU per message", flush=True)
    print(f"the official client's ceiling here (floor servicer) / remoting: "
          f"{med['floor'][0] / med['remoting'][0]:.2f}x msg/s", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=4000)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--body", type=int, default=256)
    ap.add_argument("--official", action="store_true", help="the official RocketMQ 5 client against raw remoting")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--floor", action="store_true", help="serve the floor servicer (started by --official)")
    args = ap.parse_args()
    body = b"x" * args.body
    if args.floor:
        return serve_floor()
    if args.official:
        with tempfile.TemporaryDirectory() as tmp:
            server = start_server(Path(tmp))
            floor = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--floor"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
            try:
                official_vs_remoting(server, floor, Path(tmp), args)
            finally:
                server.stop()
                assert floor.stdin is not None
                floor.stdin.close()
                try:
                    floor.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    floor.kill()
                    floor.wait()
        return 0
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
