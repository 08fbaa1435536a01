"""The cost of metrics on the send path: the send rate of one broker with ``metricsExporterType=PROM`` (scraped
every second) against the same broker with metrics off, in one run, rounds alternating on and off.

    .venv/bin/python bench/metrics_overhead.py [-n 30000] [--size 256] [--window 1000] [--rounds 5] [--json]

Each round starts a fresh ``txmq server`` (ASYNC_FLUSH, gRPC and console off, temporary store) per setting,
produces N messages through a window (``txmq.bench.produce``), checks the broker holds N, and stops it. With
metrics on, a thread fetches ``/metrics`` every second during the produce, as a Prometheus scraping every second
would. The medians of the two settings and their ratio are printed. Every process it starts is stopped on exit.
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
import threading
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from txmq import bench  # noqa: E402
from txmq.launch import ServerProcess, free_port, txmq_command  # noqa: E402


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


def start(root: Path, metrics: bool) -> ServerProcess:
    root.mkdir(parents=True)
    conf = root / "broker.conf"
    conf.write_text("flushDiskType=ASYNC_FLUSH\n" + (
        f"metricsExporterType=PROM\nmetricsPromExporterPort={free_port()}\n" if metrics else ""))
    args = txmq_command("server", "--store", str(root / "store"), "--port", str(free_port()), "--namesrv-port",
                        str(free_port()), "--grpc-port", "-1", "--console-port", "-1", "-c", str(conf))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), HOME=str(root), PYTHONUNBUFFERED="1")
    return ServerProcess(args, root / "server.log", env).start(30)


def scrape_every_second(addr: str, stop: threading.Event, count: list[int]) -> None:
    while not stop.wait(1.0):
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
            if b"rocketmq_messages_in_total" in r.read():
                count[0] += 1


def one(root: Path, metrics: bool, a: argparse.Namespace, i: int) -> dict[str, Any]:
    server = start(root / f"{'on' if metrics else 'off'}-{i}", metrics)
    stop, scrapes = threading.Event(), [0]
    scraper = None
    try:
        topic = f"bench_metrics_{i}"
        bench.ensure_topic(server.namesrv, topic, 4)
        if metrics:
            scraper = threading.Thread(target=scrape_every_second, args=(server.addrs["metrics"], stop, scrapes))
            scraper.start()
        r = bench.produce(server.namesrv, topic, a.n, size=a.size, window=a.window, broker_pid=server.pid,
                          progress=False)
        stop.set()
        if scraper is not None:
            scraper.join()
        if bench.stored_messages(server.namesrv, topic) != a.n:
            raise bench.BenchError(f"the broker does not hold the {a.n} messages sent")
    finally:
        stop.set()
        server.stop()
    row = {"metrics": metrics, "round": i, "msgs_s": round(r.rate), "broker_cpu_s": r.broker_cpu_s,
           "scrapes": scrapes[0] if metrics else None}
    log(f"round {i} metrics {'on ' if metrics else 'off'}: {row['msgs_s']:,} msg/s, broker CPU {r.broker_cpu_s} s"
        + (f", {scrapes[0]} scrapes" if metrics else ""))
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=30_000, help="messages per produce (default 30000)")
    p.add_argument("--size", type=int, default=256, help="message size in bytes (default 256)")
    p.add_argument("--window", type=int, default=1000, help="unanswered sends at most (default 1000)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, each one produce off and one on (default 5)")
    p.add_argument("--json", action="store_true", help="print the rows and medians as JSON")
    a = p.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="txmq-bench-metrics-") as tmp:
        for i in range(1, a.rounds + 1):
            order = (False, True) if i % 2 else (True, False)  # alternate which goes first
            rows.extend(one(Path(tmp), m, a, i) for m in order)
    off = statistics.median(r["msgs_s"] for r in rows if not r["metrics"])
    on = statistics.median(r["msgs_s"] for r in rows if r["metrics"])
    cpu_off = statistics.median(r["broker_cpu_s"] for r in rows if not r["metrics"])
    cpu_on = statistics.median(r["broker_cpu_s"] for r in rows if r["metrics"])
    summary = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
               "n": a.n, "size": a.size, "rounds": a.rounds, "median_off_msgs_s": off, "median_on_msgs_s": on,
               "on_over_off": round(on / off, 4), "median_broker_cpu_off_s": cpu_off,
               "median_broker_cpu_on_s": cpu_on}
    if a.json:
        print(json.dumps({"rows": rows, **summary}, indent=2))
    else:
        print(f"metrics off: median {off:,.0f} msg/s; metrics on (scraped every second): median {on:,.0f} msg/s; "
              f"on/off {on / off:.1%}; broker CPU seconds per produce, medians: off {cpu_off:.2f}, on {cpu_on:.2f} "
              f"({a.rounds} rounds of {a.n:,} messages of {a.size} B)")
    return 0


if __name__ == "__main__":
    bench.run(main)
