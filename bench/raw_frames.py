"""txmq as RocketMQ's own clients use it: one SEND_MESSAGE frame per message, and transactions as the Java client
runs them (a half message, then END_TRANSACTION oneway), written as raw remoting frames over TCP.

    .venv/bin/python bench/raw_frames.py [-n 50000] [--size 256] [--window 1000] [--conns 1,8] [--runs 3]
        [--modes SYNC_FLUSH,ASYNC_FLUSH] [--tx 20000] [--peers OUTDIR | --no-peers] [--json]
    .venv/bin/python bench/raw_frames.py --pending 1000000 [--modes ASYNC_FLUSH]

Per flush mode this starts its own ``txmq server`` (as ``bench/produce_consume.py`` does: free ports, temporary
store, stopped at the end), creates a topic of 4 queues, and per run:

* **send**: N single-message SEND_MESSAGE requests (256-byte bodies, the ext fields the Java client writes), at
  most ``window`` unanswered over all connections, spread round-robin over ``conns`` connections and the 4
  queues; every answer must be SUCCESS. Clock from the first frame to the last answer.
* **tx** (``--tx``): half messages (``TRAN_MSG=true``) with at most ``window`` unanswered; each answer is
  followed at once by its END_TRANSACTION (COMMIT, oneway, as the Java client sends it). The clock stops when
  the topic holds every committed message (polled through the name server), so it covers whole transactions.

``--pending N`` instead sends N half messages and never ends them, and prints the broker's RSS (``VmRSS``) at
0 and after each quarter (a broker with ``transactionTimeOut`` of an hour: no check-back runs meanwhile).

Broker CPU per message (user + system from /proc, over the timed part) is printed with each run, with the CPU
other processes used meanwhile (the peers kit's disturbance rule).

Unless ``--no-peers``, the peers kit runs right after with the same -n, --size, --window and --runs (see
bench/produce_consume.py for what it needs), and the ratios of txmq's medians to the peers' publish rates are
printed: SYNC_FLUSH sends and transactions against RabbitMQ classic, ASYNC_FLUSH sends against NATS JetStream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from produce_consume import run_peers, start_txmq  # noqa: E402

from txmq import bench  # noqa: E402
from txmq.remoting.codes import RequestCode, ResponseCode  # noqa: E402
from txmq.remoting.command import FLAG_ONEWAY  # noqa: E402
from txmq.remoting.transport import new_event_loop, parse_address  # noqa: E402

QUEUES = 4
_PREFIX = struct.Struct(">II")  # LENGTH, HEADER_FIELD (JSON: high byte 0)
GROUP = "raw_bench_tx"


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


def frame(code: int, opaque: int, ext: dict[str, str], body: bytes = b"", oneway: bool = False) -> bytes:
    """One remoting frame with a JSON header, written directly (the client's own cost stays small: a Java
    client's per-message cost is far below a Python one's, and the two share this machine)."""
    header = orjson.dumps({"code": code, "language": "JAVA", "version": 399, "opaque": opaque,
                           "flag": FLAG_ONEWAY if oneway else 0, "extFields": ext})
    return _PREFIX.pack(4 + len(header) + len(body), len(header)) + header + body


def send_frame(topic: str, queue_id: int, body: bytes, opaque: int, half: bool) -> bytes:
    props = f"UNIQ_KEY\x01RAW{opaque:024X}\x02WAIT\x01true\x02"
    if half:
        props += f"TRAN_MSG\x01true\x02PGROUP\x01{GROUP}\x02"
    return frame(RequestCode.SEND_MESSAGE, opaque, {
        "producerGroup": GROUP if half else "raw_bench", "topic": topic, "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4", "queueId": str(queue_id), "sysFlag": "4" if half else "0",
        "bornTimestamp": str(int(time.time() * 1000)), "flag": "0", "properties": props,
        "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
    }, body)


def end_frame(ext: dict[str, str], opaque: int) -> bytes:
    """The END_TRANSACTION (COMMIT, oneway) for the answer ``ext`` to a half message, as the Java client sends it."""
    return frame(RequestCode.END_TRANSACTION, opaque, {
        "producerGroup": GROUP, "tranStateTableOffset": ext["queueOffset"],
        "commitLogOffset": str(int(ext["msgId"][16:], 16)), "commitOrRollback": "8",
        "fromTransactionCheck": "false", "msgId": ext["msgId"], "transactionId": ext.get("transactionId", ""),
    }, oneway=True)


class RawClient(asyncio.Protocol):
    """One connection: writes frames, reads answers (code, remark, ext fields), tells the driver about each."""

    def __init__(self, on_answer: Any) -> None:
        self.buf = bytearray()
        self.on_answer = on_answer
        self.transport: asyncio.Transport | None = None
        self.out: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        while len(buf) - pos >= 8:
            length, header_field = _PREFIX.unpack_from(buf, pos)
            if len(buf) - pos < 4 + length:
                break
            header = orjson.loads(bytes(buf[pos + 8 : pos + 8 + (header_field & 0xFFFFFF)]))
            pos += 4 + length
            self.on_answer(self, header["code"], header.get("remark"), header.get("extFields") or {})
        del buf[:pos]
        self.flush()

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def flush(self) -> None:
        if self.out and self.transport is not None:
            self.transport.writelines(self.out)
            self.out.clear()


async def drive(addr: str, topic: str, n: int, size: int, window: int, conns: int, half: bool,
                end: bool = True) -> float:
    """Send ``n`` messages (halves followed by their commits when ``half`` and ``end``); seconds until the last
    answer."""
    loop = asyncio.get_running_loop()
    host, port = parse_address(addr)
    body = bench.filler(size)
    done = loop.create_future()
    sent = answered = 0
    opaque = 1 << 20

    def next_frame(client: RawClient) -> None:
        nonlocal sent, opaque
        opaque += 1
        client.write(send_frame(topic, sent % QUEUES, body, opaque, half))
        sent += 1

    def on_answer(client: RawClient, code: int, remark: str | None, ext: dict[str, str]) -> None:
        nonlocal answered, opaque
        if code != ResponseCode.SUCCESS:
            if not done.done():
                done.set_exception(bench.BenchError(f"answer {code}: {remark}"))
            return
        answered += 1
        if half and end:
            opaque += 1
            client.write(end_frame(ext, opaque))
        if sent < n:
            next_frame(client)
        if answered == n and not done.done():
            done.set_result(None)

    clients = []
    for _ in range(conns):
        _, proto = await loop.create_connection(lambda: RawClient(on_answer), host, port)
        clients.append(proto)
    start = time.perf_counter()
    for i in range(min(window, n)):
        next_frame(clients[i % conns])
    for c in clients:
        c.flush()
    try:
        await done
        return time.perf_counter() - start
    finally:
        for c in clients:
            c.flush()
            if c.transport is not None:
                c.transport.close()


def one_run(server: Any, topic: str, n: int, a: argparse.Namespace, conns: int, half: bool) -> dict[str, Any]:
    bench.ensure_topic(server.namesrv, topic, QUEUES)
    meter = bench.Meter(server.pid)
    meter.start()
    loop = new_event_loop()
    try:
        loop.run_until_complete(drive(server.addrs["broker"], topic, n, a.size, a.window, conns, half))
    finally:
        loop.close()
    if half:
        bench.wait_for(lambda: bench.stored_messages(server.namesrv, topic) >= n, 60, "committed messages")
    meter.stop()
    stored = bench.stored_messages(server.namesrv, topic)
    if stored != n:
        raise bench.BenchError(f"{topic} holds {stored} messages, not {n}")
    return {"per_s": round(n / meter.elapsed), "seconds": round(meter.elapsed, 3),
            "broker_us_per_msg": round((meter.broker_cpu or 0) / n * 1e6, 1),
            "client_us_per_msg": round((meter.client_cpu or 0) / n * 1e6, 1),
            "other_cpu_s": round(meter.other_cpu or 0, 2)}


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1024


def pending_rss(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """RSS of a broker holding 0, N/4, N/2, 3N/4 and N pending transactions (halves never ended), and the broker
    CPU each quarter's halves cost (logged: a half must cost the same with many pending as with few)."""
    mode = a.modes.split(",")[0]
    server = start_txmq(mode, tmp, conf="transactionTimeOut=3600000\n")
    out: dict[str, Any] = {}
    try:
        topic = "raw_pending"
        bench.ensure_topic(server.namesrv, topic, QUEUES)
        assert server.pid is not None
        out["0"] = round(rss_mb(server.pid), 1)
        log(f"pending 0: RSS {out['0']} MB")
        quarter = a.pending // 4
        for q in range(1, 5):
            loop = new_event_loop()
            cpu = bench.process_cpu_s(server.pid) or 0.0
            try:
                loop.run_until_complete(drive(server.addrs["broker"], topic, quarter, a.size, a.window, 1, True,
                                              end=False))
            finally:
                loop.close()
            cpu = (bench.process_cpu_s(server.pid) or 0.0) - cpu
            out[str(q * quarter)] = round(rss_mb(server.pid), 1)
            log(f"pending {q * quarter}: RSS {out[str(q * quarter)]} MB, broker {cpu / quarter * 1e6:.1f} µs a half "
                "over this quarter")
    finally:
        server.kill(15)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=50000)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--window", type=int, default=1000)
    p.add_argument("--conns", default="1,8", help="connections of the send runs, comma-separated (\"\": none)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--modes", default="SYNC_FLUSH,ASYNC_FLUSH")
    p.add_argument("--tx", type=int, default=20000, help="transactions per run (0: none)")
    p.add_argument("--pending", type=int, default=0, help="measure RSS with this many pending transactions")
    p.add_argument("--peers", metavar="OUTDIR", help="where the peers kit writes its JSON (default: a temp dir)")
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "loadavg": os.getloadavg()}
    if a.pending:
        with tempfile.TemporaryDirectory(prefix="txmq-raw-") as tmp:
            results["pending_rss_mb"] = pending_rss(a, Path(tmp))
        print(json.dumps(results, indent=1))
        return
    with tempfile.TemporaryDirectory(prefix="txmq-raw-") as tmp:
        for mode in a.modes.split(","):
            server = start_txmq(mode, Path(tmp))
            log(f"== txmq {mode}: pid {server.pid}")
            try:
                cases = [(f"send x{c}", c, False, a.n) for c in (int(x) for x in a.conns.split(",") if x)]
                if a.tx:
                    cases.append(("tx x1", 1, True, a.tx))
                for name, conns, half, n in cases:
                    runs = []
                    for i in range(a.runs):
                        topic = f"raw_{mode.lower()}_{name.replace(' ', '_')}_{i}"
                        r = one_run(server, topic, n, a, conns, half)
                        runs.append(r)
                        log(f"{mode} {name} run {i + 1}: {r['per_s']:,}/s, broker {r['broker_us_per_msg']} µs/msg, "
                            f"client {r['client_us_per_msg']} µs/msg"
                            f" (other CPU {r['other_cpu_s']} s in {r['seconds']} s)")
                    results[f"{mode} {name}"] = {
                        "median_per_s": statistics.median(r["per_s"] for r in runs),
                        "median_broker_us_per_msg": statistics.median(r["broker_us_per_msg"] for r in runs),
                        "runs": runs}
            finally:
                server.kill(15)
    if not a.no_peers:
        peers = run_peers(a)
        results["peers"] = {k: v["median"] for k, v in peers.items()}
        results["ratios"] = peer_ratios(results, peers)
    if a.json:
        print(json.dumps(results, indent=1))
    else:
        for key, value in results.items():
            if isinstance(value, dict) and "median_per_s" in value:
                print(f"{key:24s} {value['median_per_s']:>10,.0f}/s  broker {value['median_broker_us_per_msg']} µs/msg")
        for key, publish in results.get("peers", {}).items():
            print(f"{key:24s} {publish['publish_msgs_s']:>10,.0f}/s  (publish)")
        for key, ratio in results.get("ratios", {}).items():
            print(f"{key:48s} {ratio:.2f}x")


def peer_ratios(results: dict[str, Any], peers: dict[str, Any]) -> dict[str, float]:
    """txmq's medians over the peers' publish medians: the comparisons the single-frame figures are read by."""
    pairs = [("SYNC_FLUSH send x1", "rabbitmq"), ("SYNC_FLUSH send x8", "rabbitmq"), ("SYNC_FLUSH tx x1", "rabbitmq"),
             ("ASYNC_FLUSH send x1", "nats"), ("ASYNC_FLUSH send x8", "nats")]
    return {f"{case} / {peer} publish":
            round(results[case]["median_per_s"] / peers[peer]["median"]["publish_msgs_s"], 2)
            for case, peer in pairs if case in results and peer in peers}


if __name__ == "__main__":
    bench.run(main)
