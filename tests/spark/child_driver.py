"""A Spark driver in its own process, so a test can SIGKILL it (with its JVM) mid-query and start it again.

    python child_driver.py '{"namesrv": ..., "source": "topic", "sink": "parquet"|"txmq", "out": path-or-topic,
                             "checkpoint": dir, "guarantee": "exactly-once", "maxOffsetsPerTrigger": 50,
                             "sinkOptions": {"rowsPerHalf": 5}}'

Runs one streaming query with trigger availableNow from the txmq topic ``source`` into Parquet or into the txmq
topic ``out``, and exits 0 when it is done.
"""

from __future__ import annotations

import json
import os
import sys

from spark_helpers import spark_env


def main() -> int:
    cfg = json.loads(sys.argv[1])
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    import txmq.spark

    spark = (SparkSession.builder.master("local[2]").appName("txmq-child")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    txmq.spark.register(spark)
    df = (spark.readStream.format("txmq").option("namesrv", cfg["namesrv"]).option("topic", cfg["source"])
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", cfg.get("maxOffsetsPerTrigger", 50))
          .load())
    if cfg["sink"] == "parquet":
        writer = df.writeStream.format("parquet").option("path", cfg["out"])
    else:
        df = df.selectExpr("body", "keys")
        writer = (df.writeStream.format("txmq").option("namesrv", cfg["namesrv"]).option("topic", cfg["out"])
                  .option("deliveryGuarantee", cfg.get("guarantee", "exactly-once"))
                  .options(**{"checkImmunitySeconds": 1, **cfg.get("sinkOptions", {})}))
    query = writer.option("checkpointLocation", cfg["checkpoint"]).trigger(availableNow=True).start()
    print("query started", flush=True)
    query.awaitTermination()
    spark.stop()
    print("query done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
