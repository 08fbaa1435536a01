"""Spark connector throughput on local[2], all numbers from one run (compare ratios, not absolute times):

* source: rows/s from a txmq topic into Parquet through the ``txmq`` source, vs the same rows read from Parquet
  into Parquet (the reference);
* sink: rows/s of a streaming query (availableNow) from a txmq topic into another topic, exactly-once vs
  at-least-once.

    .venv/bin/python bench/spark.py [--rows 100000] [--body 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "e2e"))

from cluster import Cluster


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--body", type=int, default=200)
    args = p.parse_args()
    os.environ.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    root = Path(tempfile.mkdtemp(prefix="txmq-bench-spark-"))
    cluster = Cluster(root)
    try:
        cluster.start_namesrv()
        cluster.start_broker("broker-a")
        from txmq import Admin, Message, Producer

        with Admin(cluster.namesrv_addr) as admin:
            for t in ("bench-in", "bench-eo", "bench-alo"):
                admin.create_topic(t, 4)
        cluster.wait_route("bench-in")
        body = b"x" * args.body
        t0 = time.monotonic()
        with Producer("bench-spark", cluster.namesrv_addr) as prod:
            for i in range(0, args.rows, 100):
                prod.send_batch([Message("bench-in", body, keys=str(i + j)) for j in range(min(100, args.rows - i))])
        print(f"loaded {args.rows} rows of {args.body} B in {time.monotonic() - t0:.1f}s", flush=True)

        from pyspark.sql import SparkSession

        import txmq.spark

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
        results = {}
        for rep in range(2):
            results[f"txmq->parquet {rep}"] = timed(
                lambda rep=rep: src().write.mode("overwrite").parquet(str(root / f"from-txmq-{rep}")))
            results[f"parquet->parquet {rep}"] = timed(
                lambda rep=rep: spark.read.parquet(str(root / "from-txmq-0")).write.mode("overwrite")
                .parquet(str(root / f"from-parquet-{rep}")))
        for mode, topic in (("at-least-once", "bench-alo"), ("exactly-once", "bench-eo")):
            def stream(mode: str = mode, topic: str = topic) -> None:
                q = (spark.readStream.format("txmq").option("namesrv", ns).option("topic", "bench-in")
                     .option("startingOffsets", "earliest").load().select("body", "keys")
                     .writeStream.format("txmq").option("namesrv", ns).option("topic", topic)
                     .option("deliveryGuarantee", mode).option("checkpointLocation", str(root / f"ck-{mode}"))
                     .trigger(availableNow=True).start())
                q.awaitTermination()
            results[f"sink {mode}"] = timed(stream)
        n = spark.read.format("txmq").option("namesrv", ns).option("topic", "bench-eo").load().count()
        assert n == args.rows, n
        spark.stop()
        print(f"\nrows={args.rows} body={args.body}B local[2]")
        for name, secs in results.items():
            print(f"{name:<24} {secs:7.2f}s {args.rows / secs:10.0f} rows/s")
        src_best = min(v for k, v in results.items() if k.startswith("txmq->"))
        ref_best = min(v for k, v in results.items() if k.startswith("parquet->"))
        print(f"source / parquet reference: {ref_best / src_best:.0%}")
        print(f"exactly-once / at-least-once: {results['sink at-least-once'] / results['sink exactly-once']:.0%}")
    finally:
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
