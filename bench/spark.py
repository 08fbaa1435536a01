"""Spark connector throughput on local[2], all numbers from one run (compare ratios, not absolute times):

* source: rows/s from a txmq topic into Parquet through the ``txmq`` source, vs the same rows read from Parquet
  into Parquet (the reference);
* sink: rows/s of a streaming query (availableNow) from a txmq topic into another topic, exactly-once vs
  at-least-once, after one small warm-up query of each (the first streaming queries of a session pay seconds of
  one-time costs), alternating, medians; and the CPU time of the broker process and of the whole machine in each.

With ``--connect`` the same queries run through Spark Connect: the bench starts a Connect server from pyspark's
package (``local[2]``, tests/spark/connect_server.py) and is its client. ``--source-only`` skips the sinks.

    .venv/bin/python bench/spark.py [--rows 100000] [--body 200] [--reps 3] [--connect] [--source-only]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# bench/grpc.py would shadow the grpc package that Spark Connect's client imports: this script's folder goes.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "e2e"))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "spark"))

from cluster import Cluster  # noqa: E402

from txmq import bench  # noqa: E402
from txmq.bench import Meter  # noqa: E402

SINK_MODES = ("at-least-once", "exactly-once")
WARM_UP_ROWS = 2000


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--body", type=int, default=200)
    p.add_argument("--reps", type=int, default=3, help="runs of each measurement (medians are reported)")
    p.add_argument("--connect", action="store_true", help="through a Spark Connect server this bench starts")
    p.add_argument("--source-only", action="store_true", help="measure the source only")
    args = p.parse_args()
    os.environ.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    root = Path(tempfile.mkdtemp(prefix="txmq-bench-spark-"))
    cluster = Cluster(root)
    server = None
    try:
        cluster.start_namesrv()
        broker = cluster.start_broker("broker-a")
        from txmq import Admin, Message, Producer

        sinks = [(mode, f"bench-{mode}-{rep}") for rep in range(args.reps) for mode in SINK_MODES]
        warm = [(mode, f"bench-warm-{mode}") for mode in SINK_MODES]
        with Admin(cluster.namesrv_addr) as admin:
            for t in ["bench-in", "bench-warm", *(topic for _, topic in warm + sinks)]:
                admin.create_topic(t, 4)
        cluster.wait_route("bench-in")
        body = b"x" * args.body
        t0 = time.monotonic()
        with Producer("bench-spark", cluster.namesrv_addr) as prod:
            for i in range(0, args.rows, 100):
                prod.send_batch([Message("bench-in", body, keys=str(i + j)) for j in range(min(100, args.rows - i))])
            for i in range(0, WARM_UP_ROWS, 100):
                prod.send_batch([Message("bench-warm", body, keys=str(i + j)) for j in range(100)])
        print(f"loaded {args.rows} rows of {args.body} B in {time.monotonic() - t0:.1f}s", flush=True)

        from pyspark.sql import SparkSession

        import txmq.spark

        if args.connect:
            from connect_server import ConnectServer

            server = ConnectServer(root / "connect")
            spark = SparkSession.builder.remote(server.start()).getOrCreate()
        else:
            spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false").config("spark.driver.host", "127.0.0.1")
                     .getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
        txmq.spark.register(spark)
        ns = cluster.namesrv_addr

        def timed(fn) -> float:  # type: ignore[no-untyped-def]
            t = time.monotonic()
            fn()
            return time.monotonic() - t

        src = lambda: spark.read.format("txmq").option("namesrv", ns).option("topic", "bench-in").load()  # noqa: E731
        timed(lambda: src().limit(1000).write.format("noop").mode("overwrite").save())  # warm up workers
        results: dict[str, list[float]] = {}
        for rep in range(args.reps + 1):  # run 0 warms up the Python workers and the JIT: not counted
            results.setdefault("txmq->parquet", []).append(timed(
                lambda rep=rep: src().write.mode("overwrite").parquet(str(root / f"from-txmq-{rep}"))))
            results.setdefault("parquet->parquet", []).append(timed(
                lambda rep=rep: spark.read.parquet(str(root / "from-txmq-0")).write.mode("overwrite")
                .parquet(str(root / f"from-parquet-{rep}"))))
        def stream(source: str, mode: str, topic: str) -> None:
            q = (spark.readStream.format("txmq").option("namesrv", ns).option("topic", source)
                 .option("startingOffsets", "earliest").load().select("body", "keys")
                 .writeStream.format("txmq").option("namesrv", ns).option("topic", topic)
                 .option("deliveryGuarantee", mode).option("checkpointLocation", str(root / f"ck-{topic}"))
                 .trigger(availableNow=True).start())
            q.awaitTermination()

        if args.source_only:
            sinks, warm = [], []
        for mode, topic in warm:  # the first streaming queries of a session pay seconds of one-time costs
            stream("bench-warm", mode, topic)
        broker_cpu: dict[str, list[float]] = {}
        busy_cpu: dict[str, list[float]] = {}
        for i, (mode, topic) in enumerate(sinks):
            print(f"sink run {i + 1}/{len(sinks)}: {mode}", flush=True)
            meter = Meter(broker.pid)
            meter.start()
            stream("bench-in", mode, topic)
            meter.stop()
            assert meter.broker_cpu is not None and meter.client_cpu is not None and meter.other_cpu is not None
            results.setdefault(f"sink {mode}", []).append(meter.elapsed)
            broker_cpu.setdefault(mode, []).append(meter.broker_cpu)
            busy_cpu.setdefault(mode, []).append(meter.broker_cpu + meter.client_cpu + meter.other_cpu)
            n = spark.read.format("txmq").option("namesrv", ns).option("topic", topic).load().count()
            assert n == args.rows, (topic, n)  # every row arrived (and, exactly-once, once: no crash here)
        spark.stop()
        for name in ("txmq->parquet", "parquet->parquet"):
            results[name] = results[name][1:]
        print(f"\nrows={args.rows} body={args.body}B local[2]{' through Spark Connect' if args.connect else ''}, "
              f"medians of {args.reps} runs, load average {os.getloadavg()[0]:.1f}")
        med = {name: statistics.median(times) for name, times in results.items()}
        for name, times in results.items():
            runs = " ".join(f"{t:.2f}" for t in times)
            print(f"{name:<22} median {med[name]:6.2f}s {args.rows / med[name]:9.0f} rows/s  (runs: {runs} s)")
        for mode, cpu in broker_cpu.items():
            print(f"CPU, sink {mode:<14} broker median {statistics.median(cpu):5.2f} s "
                  f"({statistics.median(cpu) / args.rows * 1e6:.1f} µs per row; one thread), whole machine busy "
                  f"{statistics.median(busy_cpu[mode]):5.2f} s of {os.cpu_count()} cores")
        print(f"source / parquet reference: {med['parquet->parquet'] / med['txmq->parquet']:.0%}")
        if not args.source_only:
            print(f"exactly-once / at-least-once: {med['sink at-least-once'] / med['sink exactly-once']:.0%}")
    finally:
        if server is not None:
            server.stop()
        cluster.close()
    return 0


if __name__ == "__main__":
    bench.run(main)
