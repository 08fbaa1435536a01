"""``python -m examples.orders``: start ``txmq server`` (name server + broker in one process, temporary store)
unless ``--namesrv`` names a running one, then run the order service, the streaming job (availableNow) and the
audit on Spark (``--master``, default ``local[2]``; any Spark master URL works; or ``--remote sc://HOST:PORT``, a
Spark Connect server whose Python workers can import txmq), and print where the outputs are."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from txmq.launch import ServerProcess, free_port, txmq_command


def start_server(root: Path) -> ServerProcess:
    conf = root / "broker.conf"
    # Quick check-back for a demo: 2 s until the first check, every second, 3 checks before a discard.
    conf.write_text("transactionTimeOut=2000\ntransactionCheckInterval=1000\ntransactionCheckMax=3\n"
                    "brokerIP1=127.0.0.1\n")
    args = txmq_command("server", "--store", str(root / "store"), "--host", "127.0.0.1", "--port", str(free_port()),
                        "--namesrv-port", str(free_port()), "--grpc-port", "-1", "-c", str(conf))
    return ServerProcess(args, root / "server.log").start(30)


def spark_session(master: str, remote: str | None = None):  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    if remote:  # Spark Connect: the server runs the queries (and the txmq data source, in its Python workers)
        spark = SparkSession.builder.remote(remote).getOrCreate()
        spark.conf.set("spark.sql.shuffle.partitions", "4")
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        return spark
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.master(master).appName("txmq-orders")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.driver.host", "127.0.0.1").config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.orders", description=__doc__)
    p.add_argument("--namesrv", help="a running txmq name server (default: start txmq server here)")
    p.add_argument("--out", help="output directory (default: a new temporary directory)")
    p.add_argument("--orders", type=int, default=300)
    p.add_argument("--master", default="local[2]", help="Spark master URL")
    p.add_argument("--remote", help="a Spark Connect server, sc://HOST:PORT (instead of --master); --out must be a "
                                    "path the server can write and this program can read (the same host, or shared)")
    args = p.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="txmq-orders-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    server = None
    namesrv = args.namesrv
    try:
        if namesrv is None:
            server = start_server(out)
            namesrv = server.namesrv
            print(f"txmq server: name server {namesrv}, store {out / 'store'}", flush=True)
        from examples.orders.audit import run_audit
        from examples.orders.service import run_order_service
        from examples.orders.streaming import run_streaming_job
        from txmq import Admin

        with Admin(namesrv) as admin:
            for topic in ("orders", "order-alerts"):
                admin.create_topic(topic, 4)
        t0 = time.monotonic()
        db = out / "orders.db"
        counts = run_order_service(namesrv, db, args.orders)
        print(f"order service: {args.orders} orders in {time.monotonic() - t0:.1f}s, scenarios {counts}", flush=True)
        spark = spark_session(args.master, args.remote)
        try:
            t0 = time.monotonic()
            streamed = run_streaming_job(spark, namesrv, out)
            print(f"streaming job (availableNow): {streamed} in {time.monotonic() - t0:.1f}s", flush=True)
            t0 = time.monotonic()
            audit = run_audit(spark, namesrv, db, out)
            print(f"audit of {audit['transactions']} transactions in {time.monotonic() - t0:.1f}s:", flush=True)
            print(audit["text"], flush=True)
        finally:
            spark.stop()
    finally:
        if server is not None:
            server.stop(20)
    print("outputs:")
    print(f"  revenue per product per minute (Parquet): {out / 'revenue'}")
    print(f"  large-order alerts: txmq topic order-alerts (exactly-once sink; sink log {out}/checkpoints/alerts)")
    print(f"  audit table: {out / 'audit.txt'} and {out / 'audit'} (Parquet)")
    print(f"  audit chart: {out / 'audit.png'}")
    print(f"  order database (SQLite): {out / 'orders.db'}")
    if args.out is None and os.environ.get("TXMQ_ORDERS_CLEANUP") == "1":
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
