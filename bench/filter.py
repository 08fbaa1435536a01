"""Pull throughput with and without a broker-side filter: no filter (``*``), a SQL92 expression that selects every
message, a selective one (10 %), and a selective tag filter (10 %) for comparison, in one run, rounds rotating
the order.

    .venv/bin/python bench/filter.py [-n 50000] [--size 256] [--batch 32] [--rounds 5] [--json]

It starts one ``txmq server`` (ASYNC_FLUSH, gRPC and console off, temporary store), stores N messages of SIZE
bytes on 4 queues, each with a property ``a`` = i mod 100 and the tag ``x`` (i mod 10 = 0) or ``y``, then, per
round and case, pulls every queue from offset 0 to its end with one ``PullConsumer`` (BATCH messages a pull,
bodies left undecoded: the broker's side is what is measured). Each case checks it got exactly the messages its
filter selects. It prints, per case, the median of offsets passed per second (the rate at which the queues are
read) and of broker CPU microseconds per offset, and each against no filter. Every process it starts is stopped.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from txmq import bench  # noqa: E402
from txmq.launch import ServerProcess, free_port, txmq_command  # noqa: E402

TOPIC = "bench_filter"
QUEUES = 4
# name -> (tag expression, SQL92 expression or None, which of the n messages it selects)
CASES: dict[str, tuple[str, str | None, Any]] = {
    "none": ("*", None, lambda i: True),
    "sql-all": ("*", "a >= 0 AND TAGS IS NOT NULL", lambda i: True),
    "sql-10%": ("*", "a < 10 AND TAGS IN ('x', 'y')", lambda i: i % 100 < 10),
    "tag-10%": ("x", None, lambda i: i % 10 == 0),
}


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


def start(root: Path) -> ServerProcess:
    conf = root / "broker.conf"
    conf.write_text("flushDiskType=ASYNC_FLUSH\n")
    args = txmq_command("server", "--store", str(root / "store"), "--port", str(free_port()), "--namesrv-port",
                        str(free_port()), "--grpc-port", "-1", "--console-port", "-1", "-c", str(conf))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), HOME=str(root), PYTHONUNBUFFERED="1")
    return ServerProcess(args, root / "server.log", env).start(30)


def fill(namesrv: str, n: int, size: int) -> None:
    """N messages in batches of 100, one queue after another."""
    from txmq.client.producer import Producer
    from txmq.message import Message

    body = bench.filler(size)
    with Producer("bench_filter_p", namesrv) as producer:
        queues = producer.publish_queues(TOPIC)
        for start_i in range(0, n, 100):
            msgs = [Message(TOPIC, body, tags="x" if i % 10 == 0 else "y", properties={"a": str(i % 100),
                                                                                       "i": str(i)})
                    for i in range(start_i, min(n, start_i + 100))]
            producer.send_batch(msgs, queues[(start_i // 100) % len(queues)])
    if bench.stored_messages(namesrv, TOPIC) != n:
        raise bench.BenchError(f"the broker does not hold the {n} messages sent")


def pull_all(namesrv: str, pid: int, case: str, batch: int, n: int) -> dict[str, Any]:
    """Every queue from 0 to its end; checks the messages got are the ones the case selects."""
    from txmq.client.pull_consumer import PullConsumer
    from txmq.message import decode_messages

    tags, sql, selects = CASES[case]
    got: list[int] = []
    with PullConsumer(f"bench_filter_{case.replace('%', 'pct')}", namesrv) as pc:
        mqs = pc.fetch_subscribe_message_queues(TOPIC)
        ends = {mq: pc.max_offset(mq) for mq in mqs}
        bodies: list[bytes] = []
        cpu0, t0 = bench.process_cpu_s(pid), time.perf_counter()
        for mq in mqs:
            offset = 0
            while offset < ends[mq]:
                r = pc.pull(mq, tags, offset, batch, decode=False, sql=sql)
                if r.body:
                    bodies.append(r.body)
                offset = r.next_begin_offset
        elapsed, cpu1 = time.perf_counter() - t0, bench.process_cpu_s(pid)
    for body in bodies:  # after the clock: what is measured is reading the queues
        got += (int(m.properties["i"]) for m in decode_messages(body, check_crc=False)
                if tags == "*" or m.tags == tags)
    want = [i for i in range(n) if selects(i)]
    if sorted(got) != want:
        raise bench.BenchError(f"{case}: got {len(got)} messages, the filter selects {len(want)}")
    cpu = (cpu1 or 0.0) - (cpu0 or 0.0)
    return {"case": case, "offsets_s": round(n / elapsed), "delivered": len(got),
            "broker_cpu_us_per_offset": round(cpu / n * 1e6, 2), "elapsed_s": round(elapsed, 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=50_000, help="messages stored (default 50000)")
    p.add_argument("--size", type=int, default=256, help="message body bytes (default 256)")
    p.add_argument("--batch", type=int, default=32, help="messages a pull asks for (default 32)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, each pulling everything once per case (5)")
    p.add_argument("--json", action="store_true", help="print the rows and medians as JSON")
    a = p.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="txmq-bench-filter-") as tmp:
        server = start(Path(tmp))
        try:
            bench.ensure_topic(server.namesrv, TOPIC, QUEUES)
            fill(server.namesrv, a.n, a.size)
            names = list(CASES)
            pull_all(server.namesrv, server.pid, "none", a.batch, a.n)  # warm: page cache, connections
            for r in range(a.rounds):
                for case in names[r % len(names):] + names[:r % len(names)]:
                    row = pull_all(server.namesrv, server.pid, case, a.batch, a.n)
                    log(f"round {r + 1} {case:8}: {row['offsets_s']:,} offsets/s, "
                        f"{row['broker_cpu_us_per_offset']} broker CPU us/offset, {row['delivered']:,} delivered")
                    rows.append({"round": r + 1, **row})
        finally:
            server.stop()
    medians = {case: {"offsets_s": statistics.median(r["offsets_s"] for r in rows if r["case"] == case),
                      "broker_cpu_us_per_offset": statistics.median(r["broker_cpu_us_per_offset"] for r in rows
                                                                    if r["case"] == case)}
               for case in CASES}
    base = medians["none"]
    for m in medians.values():
        m["rate_vs_none"] = round(m["offsets_s"] / base["offsets_s"], 3)
        m["cpu_vs_none"] = round(m["broker_cpu_us_per_offset"] / base["broker_cpu_us_per_offset"], 3)
    summary = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
               "n": a.n, "size": a.size, "batch": a.batch, "rounds": a.rounds, "medians": medians}
    if a.json:
        print(json.dumps({"rows": rows, **summary}, indent=2))
    else:
        print(f"{a.n:,} messages of {a.size} B, pulls of {a.batch}, medians of {a.rounds} rounds:")
        print("| case | offsets/s | vs none | broker CPU us/offset | vs none |")
        print("|---|---|---|---|---|")
        for case, m in medians.items():
            print(f"| {case} | {m['offsets_s']:,.0f} | {m['rate_vs_none']:.2f} | {m['broker_cpu_us_per_offset']} | "
                  f"{m['cpu_vs_none']:.2f} |")
    return 0


if __name__ == "__main__":
    bench.run(main)
