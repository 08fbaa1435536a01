"""The connector's options as a Spark user of the Kafka connector expects them: unknown ones refused, Kafka's
names (timestamps, patterns, assign, trigger sizes, failOnDataLoss), rocketmq-spark's aliases and tag filter,
save modes, and the sink's choice of queue."""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.spark_helpers import create_topic
from txmq import Message, Producer
from txmq.spark._common import SourceOptions
from txmq.spark.options import OptionError
from txmq.spark.reader import TxmqStreamReader


def _send(cluster: Any, topic: str, bodies: list[str], tags: str | None = None) -> None:
    with Producer(f"opt-{topic}", cluster.namesrv_addr) as p:
        for b in bodies:
            p.send(Message(topic, b.encode(), tags=tags, keys=b))


def _read(spark: Any, cluster: Any, **options: Any) -> list[str]:
    reader = spark.read.format("txmq").option("namesrv", cluster.namesrv_addr)
    for k, v in options.items():
        reader = reader.option(k, v)
    return sorted(bytes(r.body).decode() for r in reader.load().select("body").collect())


def test_unknown_options_are_refused_naming_the_known_ones(spark: Any, txmq_cluster: Any) -> None:
    create_topic(txmq_cluster, "sp-opt-unknown", 1)
    with pytest.raises(Exception, match=r"(?i)unknown option\(s\) startingTimestmap .*known options: namesrv"):
        _read(spark, txmq_cluster, topic="sp-opt-unknown", startingTimestmap="1")
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match=r"(?i)unknown option\(s\) kafka.acks for the txmq sink"):
        df.write.format("txmq").option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-opt-unknown") \
            .option("kafka.acks", "all").mode("append").save()
    assert _read(spark, txmq_cluster, topic="sp-opt-unknown") == []  # nothing was sent
    for bad in ({"namesrv": "h:1", "topic": "t", "subscribePattern": "t.*"},  # two ways to name topics
                {"namesrv": "h:1", "topic": "t", "failOnDataLoss": "maybe"},
                {"namesrv": "h:1", "topic": "t", "namesrvAddr": "other:2"}):  # an alias that disagrees
        with pytest.raises(OptionError):
            SourceOptions.parse(bad, streaming=False)


def test_aliases_and_the_tag_filter(spark: Any, txmq_cluster: Any) -> None:
    create_topic(txmq_cluster, "sp-opt-tags", 2)
    for tag in ("TagA", "TagB", "TagC"):
        _send(txmq_cluster, "sp-opt-tags", [f"{tag}-{i}" for i in range(30)], tags=tag)
    _send(txmq_cluster, "sp-opt-tags", [f"none-{i}" for i in range(5)])
    reader = spark.read.format("txmq").option("nameServer", txmq_cluster.namesrv_addr) \
        .option("subscribe", "sp-opt-tags").option("subExpression", "TagA || TagB").load()
    got = sorted(bytes(r.body).decode() for r in reader.select("body").collect())
    assert got == sorted(f"{t}-{i}" for t in ("TagA", "TagB") for i in range(30))
    assert _read(spark, txmq_cluster, topic="sp-opt-tags", tags="TagC") == sorted(f"TagC-{i}" for i in range(30))
    assert len(_read(spark, txmq_cluster, topic="sp-opt-tags", tags="*")) == 95


def test_timestamps_start_and_end_exactly_at_the_store_time(spark: Any, txmq_cluster: Any) -> None:
    create_topic(txmq_cluster, "sp-opt-ts", 2)
    _send(txmq_cluster, "sp-opt-ts", [f"before-{i}" for i in range(20)])
    time.sleep(0.05)
    ts = int(time.time() * 1000)
    time.sleep(0.05)
    _send(txmq_cluster, "sp-opt-ts", [f"after-{i}" for i in range(20)])
    after = sorted(f"after-{i}" for i in range(20))
    before = sorted(f"before-{i}" for i in range(20))
    assert _read(spark, txmq_cluster, topic="sp-opt-ts", startingTimestamp=str(ts)) == after
    assert _read(spark, txmq_cluster, topic="sp-opt-ts", endingTimestamp=str(ts)) == before
    by_queue = json.dumps({"sp-opt-ts": {"broker-a:0": ts}})  # queue 1 is not named: from its start
    every = spark.read.format("txmq").option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-opt-ts") \
        .load().select("body", "queue_id").collect()
    want = sorted(bytes(r.body).decode() for r in every
                  if r.queue_id == 1 or bytes(r.body).startswith(b"after"))
    assert _read(spark, txmq_cluster, topic="sp-opt-ts", startingOffsetsByTimestamp=by_queue) == want
    # startingTimestamp wins over startingOffsets, as in Kafka's connector
    assert _read(spark, txmq_cluster, topic="sp-opt-ts", startingTimestamp=str(ts), startingOffsets="latest") == after


def test_subscribe_pattern_assign_and_records_per_partition(spark: Any, txmq_cluster: Any) -> None:
    for topic in ("sp-pat-one", "sp-pat-two", "sp-patx"):
        create_topic(txmq_cluster, topic, 2)
        _send(txmq_cluster, topic, [f"{topic}-{i}" for i in range(10)])
    got = _read(spark, txmq_cluster, subscribePattern="sp-pat-.*")
    assert got == sorted(f"{t}-{i}" for t in ("sp-pat-one", "sp-pat-two") for i in range(10))
    df = spark.read.format("txmq").option("namesrv", txmq_cluster.namesrv_addr) \
        .option("assign", json.dumps({"sp-pat-one": [0], "sp-patx": ["broker-a:1"]})) \
        .option("maxRecordsPerPartition", 2).load()
    rows = df.select("topic", "queue_id").collect()
    assert {(r.topic, r.queue_id) for r in rows} == {("sp-pat-one", 0), ("sp-patx", 1)}
    per_queue = collections.Counter((r.topic, r.queue_id) for r in rows)
    assert df.rdd.getNumPartitions() == sum((n + 1) // 2 for n in per_queue.values())


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(txmq_cluster: Any) -> None:
    """The stream reader's side of the trigger (a real broker, no Spark query needed)."""
    create_topic(txmq_cluster, "sp-opt-min", 1)
    _send(txmq_cluster, "sp-opt-min", [f"m{i}" for i in range(5)])
    opts = {"namesrv": txmq_cluster.namesrv_addr, "topic": "sp-opt-min", "startingOffsets": "earliest",
            "minOffsetsPerTrigger": "10", "maxTriggerDelay": "1s"}
    reader = TxmqStreamReader(opts)
    start = reader.initialOffset()
    assert reader.latestOffset(start) == start  # 5 < 10: no batch yet
    _send(txmq_cluster, "sp-opt-min", [f"n{i}" for i in range(5)])
    assert reader.latestOffset(start) == {"sp-opt-min": {"broker-a:0": 10}}  # enough now
    reader = TxmqStreamReader(opts)
    _send(txmq_cluster, "sp-opt-min", ["o"])
    assert reader.latestOffset({"sp-opt-min": {"broker-a:0": 10}}) == {"sp-opt-min": {"broker-a:0": 10}}
    time.sleep(1.1)  # maxTriggerDelay passed: the one message goes
    assert reader.latestOffset({"sp-opt-min": {"broker-a:0": 10}}) == {"sp-opt-min": {"broker-a:0": 11}}
    assert reader.reportLatestOffset() == {"sp-opt-min": {"broker-a:0": 11}}


def test_save_modes_other_than_append_are_refused(spark: Any, txmq_cluster: Any) -> None:
    create_topic(txmq_cluster, "sp-opt-modes", 1)
    df = spark.createDataFrame([("x",)], "body string")

    def save(mode: str | None) -> None:
        w = df.write.format("txmq").option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-opt-modes")
        (w.mode(mode) if mode else w).save()

    with pytest.raises(Exception, match=r'Overwrite is not allowed for txmq.*use mode\("append"\)'):
        save("overwrite")
    # Spark refuses these itself before the connector is asked (a Python data source can only append or
    # overwrite); no mode is ErrorIfExists.
    for mode in ("errorifexists", "ignore", None):
        with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
            save(mode)
    assert _read(spark, txmq_cluster, topic="sp-opt-modes") == []
    save("append")
    assert _read(spark, txmq_cluster, topic="sp-opt-modes") == ["x"]


def test_queue_id_column_and_key_hashed_queues_keep_a_keys_order(spark: Any, txmq_cluster: Any) -> None:
    create_topic(txmq_cluster, "sp-opt-q", 4)
    rows = [(f"{i}", 2) for i in range(20)]
    spark.createDataFrame(rows, "body string, queue_id int").coalesce(1).write.format("txmq") \
        .option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-opt-q").mode("append").save()
    got = spark.read.format("txmq").option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-opt-q") \
        .load().select("body", "queue_id", "queue_offset").collect()
    assert {r.queue_id for r in got} == {2}
    assert [bytes(r.body).decode() for r in sorted(got, key=lambda r: r.queue_offset)] == [b for b, _ in rows]
    create_topic(txmq_cluster, "sp-opt-key", 4)
    keyed = [(f"k{i % 5}", f"k{i % 5}-{i:03d}") for i in range(200)]
    spark.createDataFrame(keyed, "keys string, body string").coalesce(1).write.format("txmq") \
        .option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-opt-key") \
        .option("queueSelector", "key-hash").mode("append").save()
    got = spark.read.format("txmq").option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-opt-key") \
        .load().select("keys", "body", "queue_id", "queue_offset").collect()
    assert len(got) == 200
    for key in {k for k, _ in keyed}:
        mine = [r for r in got if r.keys == key]
        assert len({r.queue_id for r in mine}) == 1  # one queue per key
        in_queue_order = [bytes(r.body).decode() for r in sorted(mine, key=lambda r: r.queue_offset)]
        assert in_queue_order == [b for k, b in keyed if k == key]  # in the order they were written
    assert len({r.queue_id for r in got}) > 1


def _wait_segment_removed(cluster: Any, topic: str, broker: str) -> int:
    """Until retention removed the start of queue 0; returns its min offset."""
    from txmq.client.instance import MessageQueue
    from txmq.client.pull_consumer import PullConsumer

    with PullConsumer("sp-retention-probe", cluster.namesrv_addr) as consumer:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            low = consumer.min_offset(MessageQueue(topic, broker, 0))
            if low > 0:
                return low
            time.sleep(0.5)
    raise TimeoutError("retention removed nothing")


def test_fail_on_data_loss_both_ways_after_retention(spark: Any, three_brokers: Any, tmp_path: Path) -> None:
    create_topic(three_brokers, "sp-loss", 1, ["broker-r"])
    bodies = [f"{i:04d}-" + "x" * 1000 for i in range(300)]  # ≈ 300 KiB: several 64 KiB segments
    _send(three_brokers, "sp-loss", bodies)
    low = _wait_segment_removed(three_brokers, "sp-loss", "broker-r")
    start = json.dumps({"sp-loss": {"broker-r:0": 0}})
    # batch: offsets named below the queue's min
    with pytest.raises(Exception, match=r"retention removed messages before the query read them: sp-loss "
                                        rf"broker-r:0 offsets \[0, {low}\).*failOnDataLoss=false"):
        _read(spark, three_brokers, topic="sp-loss", startingOffsets=start)
    kept = _read(spark, three_brokers, topic="sp-loss", startingOffsets=start, failOnDataLoss="false")
    assert kept == bodies[low:]
    # the stream reader counts what it skipped
    reader = TxmqStreamReader({"namesrv": three_brokers.namesrv_addr, "topic": "sp-loss", "failOnDataLoss": "false"})
    parts = reader.partitions({"sp-loss": {"broker-r:0": 0}}, {"sp-loss": {"broker-r:0": 300}})
    assert reader.skipped == parts[0].start >= low and parts[-1].end == 300

    # streaming: a query whose next offsets were removed
    def stream(fail: str, name: str) -> Any:
        q = (spark.readStream.format("txmq").option("namesrv", three_brokers.namesrv_addr).option("topic", "sp-loss")
             .option("startingOffsets", start).option("failOnDataLoss", fail).load()
             .writeStream.format("parquet").option("path", str(tmp_path / name))
             .option("checkpointLocation", str(tmp_path / f"ckpt-{name}")).trigger(availableNow=True).start())
        q.awaitTermination(120)
        return q

    with pytest.raises(Exception, match=r"sp-loss broker-r:0 offsets \[0, \d+\).*failOnDataLoss=true"):
        stream("true", "strict")
    ok = stream("false", "lenient")
    assert ok.exception() is None
    got = sorted(bytes(r.body).decode() for r in spark.read.parquet(str(tmp_path / "lenient")).collect())
    assert got == bodies[low:]


def test_exactly_once_sink_keeps_a_keys_order_across_halves(spark: Any, txmq_cluster: Any, tmp_path: Path) -> None:
    """Key-hashed rows of one task in many halves (7 rows each): the driver ends them in the order sent."""
    create_topic(txmq_cluster, "sp-ord-in", 1)  # one queue: one task, rows in order
    create_topic(txmq_cluster, "sp-ord-out", 4)
    keyed = [(f"k{i % 3}", f"k{i % 3}-{i:03d}") for i in range(150)]
    with Producer("opt-sp-ord-in", txmq_cluster.namesrv_addr) as p:
        for key, body in keyed:
            p.send(Message("sp-ord-in", body.encode(), keys=key))
    q = (spark.readStream.format("txmq").option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-ord-in")
         .option("startingOffsets", "earliest").load().select("body", "keys")
         .writeStream.format("txmq").option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-ord-out")
         .option("queueSelector", "key-hash").option("rowsPerHalf", 7)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    got = spark.read.format("txmq").option("namesrv", txmq_cluster.namesrv_addr).option("topic", "sp-ord-out") \
        .load().select("keys", "body", "queue_id", "queue_offset", "transaction_id").collect()
    assert len(got) == 150 and all(r.transaction_id for r in got)  # committed halves
    for key in ("k0", "k1", "k2"):
        mine = sorted((r for r in got if r.keys == key), key=lambda r: r.queue_offset)
        assert len({r.queue_id for r in mine}) == 1
        assert [bytes(r.body).decode() for r in mine] == [b for k, b in keyed if k == key]


def test_a_streams_small_ranges_share_partitions_and_large_ones_stay_alone() -> None:
    """``minRowsPerPartition``: ranges smaller than it are put together until a partition holds that many (a small
    batch is one task, not one per queue); larger ranges keep a task each; every offset is read exactly once."""
    from txmq.spark.reader import PackedRanges, TxmqStreamReader, pack

    opts = SourceOptions.parse({"namesrv": "127.0.0.1:1", "topic": "t", "minRowsPerPartition": "100",
                                "maxRowsPerPartition": "500"}, streaming=True)
    assert opts.min_rows_per_partition == 100
    from txmq.spark.reader import make_partitions

    start = {"t": {"b:0": 0, "b:1": 0, "b:2": 0, "b:3": 0, "b:4": 0}}
    end = {"t": {"b:0": 30, "b:1": 40, "b:2": 50, "b:3": 1200, "b:4": 20}}
    parts = pack(make_partitions(opts, start, end), 100)
    packed = [p for p in parts if isinstance(p, PackedRanges)]
    alone = [p for p in parts if not isinstance(p, PackedRanges)]
    assert [sorted(r.queue_id for r in p.ranges) for p in packed] == [[0, 1, 2]]  # 120 rows: full, then 20 left
    assert sorted((p.queue_id, p.start, p.end) for p in alone) == [(3, 0, 500), (3, 500, 1000), (3, 1000, 1200),
                                                                   (4, 0, 20)]
    covered = collections.Counter((r.queue_id, o) for p in parts for r in (p.ranges if isinstance(p, PackedRanges)
                                                                            else (p,)) for o in range(r.start, r.end))
    assert len(covered) == 30 + 40 + 50 + 1200 + 20 and max(covered.values()) == 1
    # maxRowsPerPartition below the packing size wins: ranges of at most 10 rows each stay a partition of their own
    small = TxmqStreamReader({"namesrv": "127.0.0.1:1", "topic": "t", "maxRowsPerPartition": "10"})
    small._bounds = {"t": {"b:0": (0, 30)}}
    assert len(small.partitions({"t": {"b:0": 0}}, {"t": {"b:0": 30}})) == 3
    for bad in ("0", "x"):
        with pytest.raises(OptionError, match="minRowsPerPartition"):
            SourceOptions.parse({"namesrv": "127.0.0.1:1", "topic": "t", "minRowsPerPartition": bad}, streaming=True)
