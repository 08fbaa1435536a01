"""End-to-end latency of the Spark connector with the shortest micro-batch trigger (``processingTime="0 seconds"``):
a producer sends ``--rate`` messages per second to a txmq topic of ``--queues`` (4) for ``--seconds``; each body
carries its send time (``time.monotonic_ns``, one clock for every process of the machine). Two queries, one after
the other:

* **exactly-once sink**: txmq → txmq (``deliveryGuarantee=exactly-once``); latency = send → the row is visible in
  the output topic (its batch committed), seen by long-polled pulls on every output queue;
* **Parquet**: txmq → Parquet; latency = send → the row's file is listed in the sink's ``_spark_metadata`` log
  (its batch committed), watched every 10 ms.

The first ``--warmup`` seconds of each query are not counted. Printed: a table of p50 / p90 / p99 / max per sink,
and Spark's own account of where a micro-batch's time went (``durationMs`` of its progress, medians over the
counted batches): the profile that says which part of the floor is the connector's.

    .venv/bin/python bench/spark_latency.py [--rate 1000] [--seconds 30] [--warmup 5] [--queues 4]
        [--option minRowsPerPartition=1] [--remote sc://HOST:PORT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# bench/grpc.py would shadow the grpc package that Spark Connect's client imports: this script's folder goes.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "e2e"))

from cluster import Cluster  # noqa: E402

from txmq import bench  # noqa: E402

PHASES = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


class Sender(threading.Thread):
    """``rate`` messages a second for ``seconds``, paced on the monotonic clock; bodies ``<seq>:<send ns>:pad``."""

    def __init__(self, namesrv: str, topic: str, rate: int, seconds: float, body: int) -> None:
        super().__init__(daemon=True)
        self.namesrv, self.topic, self.rate, self.seconds, self.body = namesrv, topic, rate, seconds, body
        self.sent = 0

    def run(self) -> None:
        from txmq import Message, Producer

        with Producer(f"lat-{self.topic}", self.namesrv) as producer:
            start = time.monotonic()
            futures = []
            n = int(self.rate * self.seconds)
            for seq in range(n):
                due = start + seq / self.rate
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                head = f"{seq}:{time.monotonic_ns()}:".encode()
                futures.append(producer.send_async(Message(self.topic, head + b"x" * max(0, self.body - len(head)))))
                self.sent += 1
            for f in futures:
                f.result(60)


def sent_ns(body: bytes) -> int:
    return int(body.split(b":", 2)[1])


class TopicWatch(threading.Thread):
    """Long-polled pulls on every queue of ``topic``: the latency of each message as it becomes visible."""

    def __init__(self, namesrv: str, topic: str, expected: int) -> None:
        super().__init__(daemon=True)
        self.namesrv, self.topic, self.expected = namesrv, topic, expected
        self.latencies: list[tuple[int, float]] = []  # (send ns, seconds)
        self.lock = threading.Lock()
        self.done = threading.Event()

    def run(self) -> None:
        from txmq.client.pull_consumer import PullConsumer, PullStatus

        with PullConsumer(f"lat-watch-{self.topic}", self.namesrv) as consumer:
            queues = consumer.fetch_subscribe_message_queues(self.topic)

            def follow(mq: Any) -> None:
                offset = consumer.max_offset(mq)
                while not self.done.is_set():
                    got = consumer.pull(mq, "*", offset, 256, block_s=1.0)
                    now = time.monotonic_ns()
                    if got.status == PullStatus.FOUND:
                        with self.lock:
                            self.latencies += [(sent_ns(m.body), (now - sent_ns(m.body)) / 1e9) for m in got.msgs]
                            if len(self.latencies) >= self.expected:
                                self.done.set()
                    offset = got.next_begin_offset

            threads = [threading.Thread(target=follow, args=(mq,), daemon=True) for mq in queues]
            for t in threads:
                t.start()
            for t in threads:
                t.join()


class ParquetWatch(threading.Thread):
    """The Parquet sink's ``_spark_metadata`` log, every 10 ms: each new committed file's rows, and their latency."""

    def __init__(self, out: Path, expected: int) -> None:
        super().__init__(daemon=True)
        self.out, self.expected = out, expected
        self.latencies: list[tuple[int, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        import pyarrow.parquet as pq

        seen_logs: set[str] = set()
        seen_files: set[str] = set()
        log_dir = self.out / "_spark_metadata"
        while not self.done.is_set():
            time.sleep(0.01)
            try:
                names = sorted(p.name for p in log_dir.iterdir() if not p.name.startswith("."))
            except FileNotFoundError:
                continue
            for name in names:
                if name in seen_logs or name.endswith(".tmp"):
                    continue
                now = time.monotonic_ns()
                try:
                    lines = (log_dir / name).read_text().splitlines()[1:]
                except OSError:
                    continue
                seen_logs.add(name)
                for line in lines:
                    path = json.loads(line)["path"].removeprefix("file:")
                    if path in seen_files:
                        continue
                    seen_files.add(path)
                    for body in pq.read_table(path, columns=["body"]).column("body").to_pylist():
                        self.latencies.append((sent_ns(body), (now - sent_ns(body)) / 1e9))
            if len(self.latencies) >= self.expected:
                self.done.set()


def run_query(spark: Any, cluster: Cluster, root: Path, sink: str, args: argparse.Namespace) -> dict[str, Any]:
    """One query against its own input topic while ``args.rate`` msg/s arrive; returns its figures."""
    from txmq import Admin

    src, out_topic = f"lat-in-{sink}", f"lat-out-{sink}"
    with Admin(cluster.namesrv_addr) as admin:
        for topic in (src, out_topic):
            admin.create_topic(topic, args.queues)
    cluster.wait_route(src)
    cluster.wait_route(out_topic)
    ns = cluster.namesrv_addr
    df = (spark.readStream.format("txmq").option("namesrv", ns).option("topic", src)
          .option("group", f"lat-{sink}").options(**dict(o.split("=", 1) for o in args.option)).load())
    n = int(args.rate * args.seconds)
    watch: TopicWatch | ParquetWatch
    if sink == "exactly-once":
        watch = TopicWatch(ns, out_topic, n)
        writer = (df.select("body", "keys").writeStream.format("txmq").option("namesrv", ns)
                  .option("topic", out_topic))
    else:
        watch = ParquetWatch(root / f"out-{sink}", n)
        writer = df.select("body").writeStream.format("parquet").option("path", str(root / f"out-{sink}"))
    query = (writer.option("checkpointLocation", str(root / f"ck-{sink}")).trigger(processingTime="0 seconds")
             .start())
    try:
        _until(lambda: query.lastProgress is not None, 120)  # the first (empty) batch ran: the query is warm
        watch.start()
        sender = Sender(ns, src, args.rate, args.seconds, args.body)
        started_ns = time.monotonic_ns()
        sender.start()
        sender.join()
        watch.done.wait(60)
        watch.done.set()
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    counted_from = started_ns + int(args.warmup * 1e9)
    lat = [s for sent, s in watch.latencies if sent >= counted_from]
    phases = {ph: statistics.median(p["durationMs"].get(ph, 0) for p in progress) if progress else 0.0
              for ph in PHASES}
    return {"sink": sink, "sent": sender.sent, "seen": len(watch.latencies), "counted": len(lat),
            "p50": percentile(lat, 0.5) if lat else float("nan"), "p90": percentile(lat, 0.9) if lat else float("nan"),
            "p99": percentile(lat, 0.99) if lat else float("nan"), "max": max(lat) if lat else float("nan"),
            "batches": len(progress), "rows_per_batch": statistics.median(p["numInputRows"] for p in progress)
            if progress else 0, "phases": phases}


def _until(pred: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("the query made no progress")
        time.sleep(0.1)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=int, default=1000, help="messages per second")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--warmup", type=float, default=5, help="seconds of each query not counted")
    p.add_argument("--body", type=int, default=100)
    p.add_argument("--queues", type=int, default=4, help="queues of the input and output topics")
    p.add_argument("--option", action="append", default=[], help="a source option KEY=VALUE (repeatable)")
    p.add_argument("--remote", help="a Spark Connect server (sc://HOST:PORT) instead of a local[2] session")
    p.add_argument("--sinks", default="exactly-once,parquet")
    args = p.parse_args()
    os.environ.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    root = Path(tempfile.mkdtemp(prefix="txmq-bench-latency-"))
    cluster = Cluster(root)
    try:
        cluster.start_namesrv()
        cluster.start_broker("broker-a")
        from pyspark.sql import SparkSession

        import txmq.spark

        if args.remote:
            spark = SparkSession.builder.remote(args.remote).getOrCreate()
        else:
            spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false").config("spark.driver.host", "127.0.0.1")
                     .config("spark.sql.shuffle.partitions", "2").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
        txmq.spark.register(spark)
        results = [run_query(spark, cluster, root, sink, args) for sink in args.sinks.split(",")]
        spark.stop()
        where = args.remote or "local[2]"
        print(f"\nlatency, send → visible, {args.rate} msg/s for {args.seconds:.0f} s ({args.warmup:.0f} s not "
              f"counted), trigger processingTime=0, {where}, load average {os.getloadavg()[0]:.1f}")
        print(f"{'sink':<14}{'sent':>7}{'counted':>9}{'p50 s':>8}{'p90 s':>8}{'p99 s':>8}{'max s':>8}"
              f"{'batches':>9}{'rows/batch':>12}")
        for r in results:
            print(f"{r['sink']:<14}{r['sent']:>7}{r['counted']:>9}{r['p50']:>8.3f}{r['p90']:>8.3f}{r['p99']:>8.3f}"
                  f"{r['max']:>8.3f}{r['batches']:>9}{r['rows_per_batch']:>12.0f}")
        print("\nmicro-batch, medians (ms) of Spark's durationMs: " + ", ".join(PHASES))
        for r in results:
            print(f"{r['sink']:<14}" + "".join(f"{r['phases'][ph]:>10.0f}" for ph in PHASES))
    finally:
        cluster.close()
    return 0


if __name__ == "__main__":
    bench.run(main)
