"""The orders pipeline: an order service with SQLite local transactions sending order events through txmq's
``TransactionProducer``, its checks answered by ``TransactionLog``; a Spark Structured Streaming job (revenue per
product per minute to Parquet, large order alerts back into txmq through the exactly-once sink); a batch audit of
every transaction's outcome.

Run it all with ``python -m examples.orders`` (what ``make run`` drives); see ``--help``.
"""
