"""The streaming job: committed order events from txmq →
* revenue per product per minute (event-time windows, 1-minute watermark) → Parquet (append: a window is
  written once the watermark passes its end; the newest windows wait for later events or a later run);
* large orders (amount ≥ ``LARGE``) → the txmq topic ``order-alerts`` through the exactly-once sink.
Both queries run with trigger ``availableNow`` and their own checkpoints under ``out``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import txmq.spark

ALERTS = "order-alerts"
LARGE = 1000.0
ORDER_SCHEMA = "order_id string, product string, qty int, price double, amount double, event_ms long"


def orders_stream(spark: Any, namesrv: str) -> Any:
    from pyspark.sql import functions as F

    raw = (spark.readStream.format("txmq").option("namesrv", namesrv).option("topic", "orders")
           .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 500).load())
    return (raw.select(F.from_json(F.col("body").cast("string"), ORDER_SCHEMA).alias("o"), "transaction_id")
            .select("o.*", "transaction_id")
            .withColumn("event_time", F.timestamp_millis("event_ms")))


def run_streaming_job(spark: Any, namesrv: str, out: Path) -> dict[str, Any]:
    from pyspark.sql import functions as F

    txmq.spark.register(spark)
    orders = orders_stream(spark, namesrv)
    revenue = (orders.withWatermark("event_time", "1 minute")
               .groupBy(F.window("event_time", "1 minute"), "product")
               .agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders"))
               .select(F.col("window.start").alias("minute"), "product", "revenue", "orders"))
    q1 = (revenue.writeStream.format("parquet").outputMode("append").option("path", str(out / "revenue"))
          .option("checkpointLocation", str(out / "checkpoints" / "revenue")).trigger(availableNow=True).start())
    alerts = (orders.where(F.col("amount") >= LARGE)
              .select(F.to_json(F.struct("order_id", "product", "qty", "amount", "transaction_id")).alias("body"),
                      F.col("order_id").alias("keys"), F.lit("large-order").alias("tags")))
    # The exactly-once sink answers the broker's check-backs of its orphaned halves itself while the query runs.
    q2 = (alerts.writeStream.format("txmq").option("namesrv", namesrv).option("topic", ALERTS)
          .option("checkpointLocation", str(out / "checkpoints" / "alerts")).trigger(availableNow=True).start())
    q1.awaitTermination()
    q2.awaitTermination()
    return {"revenue_rows": spark.read.parquet(str(out / "revenue")).count() if (out / "revenue").exists() else 0,
            "alerts": spark.read.format("txmq").option("namesrv", namesrv).option("topic", ALERTS).load().count()}
