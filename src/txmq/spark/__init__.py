"""``txmq.spark``: the PySpark Python Data Source ``txmq`` (docs/spark.md).

    import txmq.spark
    txmq.spark.register(spark)
    spark.read.format("txmq").option("namesrv", "127.0.0.1:9876").option("topic", "orders").load()
    df.writeStream.format("txmq").option("namesrv", ...).option("topic", "out")
      .option("checkpointLocation", ...).start()            # exactly-once by default
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource

from txmq.spark._common import SCHEMA_DDL, OptionError
from txmq.spark.lifecycle import QueryEndListener, add_driver_listener
from txmq.spark.reader import TxmqBatchReader, TxmqStreamReader
from txmq.spark.writer import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    SinkCheckResponder,
    SinkLog,
    TxmqBatchWriter,
    TxmqStreamWriter,
    start_check_responder,
)

__all__ = [
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "SCHEMA_DDL",
    "OptionError",
    "SinkCheckResponder",
    "SinkLog",
    "TxmqDataSource",
    "register",
    "start_check_responder",
]


class TxmqDataSource(DataSource):
    """Reads committed messages of txmq topics; writes rows into a topic (exactly-once for streams)."""

    @classmethod
    def name(cls) -> str:
        return "txmq"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> TxmqBatchReader:
        return TxmqBatchReader(self.options, schema)

    def streamReader(self, schema: Any) -> TxmqStreamReader:
        return TxmqStreamReader(self.options, schema)

    def writer(self, schema: Any, overwrite: bool) -> TxmqBatchWriter:
        if overwrite:  # a topic is a log: nothing in it can be replaced (Spark refuses ErrorIfExists and Ignore)
            raise OptionError('save mode Overwrite is not allowed for txmq: a topic is an append-only log; use '
                              'mode("append")')
        return TxmqBatchWriter(self.options)

    def streamWriter(self, schema: Any, overwrite: bool) -> TxmqStreamWriter:
        return TxmqStreamWriter(self.options)


def register(spark: Any) -> None:
    """Register the data source ``txmq`` with a SparkSession, local or Spark Connect (``builder.remote``), and
    (once per session) the listener that stops an exactly-once sink's check responder when its query ends, on the
    driver: under Connect, the Connect server (lifecycle.py). It turns on Python data sources' filter pushdown
    (``spark.sql.python.filterPushdown.enabled``), without which Spark refuses a reader that can push filters."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(TxmqDataSource)
    if getattr(spark, "_txmq_query_end_listener", None) is None:
        listener = QueryEndListener()
        add_driver_listener(spark, listener)
        spark._txmq_query_end_listener = listener
