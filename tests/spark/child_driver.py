"""A Spark program in its own process, so a test can SIGKILL it (with its JVM) mid-query and start it again, or
run it as a Spark Connect client (a Connect client switches its whole process to Connect mode, so it never runs in
the test process beside the local session).

    python child_driver.py '{"namesrv": ..., "source": "topic", "sink": "parquet"|"txmq", "out": path-or-topic,
                             "checkpoint": dir, "guarantee": "exactly-once", "maxOffsetsPerTrigger": 50,
                             "sinkOptions": {"rowsPerHalf": 5}, "remote": "sc://127.0.0.1:PORT",
                             "action": "stream"|"read"|"until-stop"}'

``stream`` (the default) runs one streaming query with trigger availableNow from the txmq topic ``source`` into
Parquet or into the txmq topic ``out``, and exits 0 when it is done. ``read`` prints ``rows <JSON list of the
bodies>`` of a batch read of ``source``. ``until-stop`` starts the same query with a 1-second processing-time
trigger, prints ``query started``, stops it when a line arrives on stdin, prints ``query stopped`` and waits for
another line before it exits. Without ``remote`` the session is ``local[2]`` in this process.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from tests.spark.spark_helpers import spark_env


def session(cfg: dict[str, Any]) -> Any:
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    if cfg.get("remote"):
        return SparkSession.builder.remote(cfg["remote"]).getOrCreate()
    spark = (SparkSession.builder.master("local[2]").appName("txmq-child")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def query(spark: Any, cfg: dict[str, Any]) -> Any:
    df = (spark.readStream.format("txmq").option("namesrv", cfg["namesrv"]).option("topic", cfg["source"])
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", cfg.get("maxOffsetsPerTrigger", 50))
          .load())
    if cfg["sink"] == "parquet":
        return df.writeStream.format("parquet").option("path", cfg["out"])
    df = df.selectExpr("body", "keys")
    return (df.writeStream.format("txmq").option("namesrv", cfg["namesrv"]).option("topic", cfg["out"])
            .option("deliveryGuarantee", cfg.get("guarantee", "exactly-once"))
            .options(**{"checkImmunitySeconds": 1, **cfg.get("sinkOptions", {})}))


def main() -> int:
    cfg = json.loads(sys.argv[1])
    spark = session(cfg)
    import txmq.spark

    txmq.spark.register(spark)
    action = cfg.get("action", "stream")
    if action == "read":
        rows = spark.read.format("txmq").option("namesrv", cfg["namesrv"]).option("topic", cfg["source"]).load() \
            .select("body").collect()
        print("rows " + json.dumps(sorted(bytes(r.body).decode() for r in rows)), flush=True)
    elif action == "until-stop":
        q = query(spark, cfg).option("checkpointLocation", cfg["checkpoint"]).trigger(processingTime="1 second") \
            .start()
        print("query started", flush=True)
        sys.stdin.readline()
        q.stop()
        print("query stopped", flush=True)
        sys.stdin.readline()
    else:
        q = query(spark, cfg).option("checkpointLocation", cfg["checkpoint"]).trigger(availableNow=True).start()
        print("query started", flush=True)
        q.awaitTermination()
        print("query done", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
