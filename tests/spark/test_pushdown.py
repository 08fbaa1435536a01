"""Filters pushed down to the broker (``pushFilters``): a batch read filtering on ``tags`` and on a property reads
only the matching messages from the broker (its pull counters show it), and ``explain`` shows what was pushed."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, IsNotNull, LessThan, Not, StringContains
from pyspark.sql.functions import col

from tests.e2e.cluster import Cluster
from tests.e2e.helpers import messages_out
from tests.spark.spark_helpers import create_topic
from txmq import Message, Producer
from txmq.launch import free_port
from txmq.spark._common import SCHEMA_DDL, SourceOptions
from txmq.spark.options import ByTime
from txmq.spark.pushdown import STEP_MARGIN_MS, Pushed, apply, push


def test_tags_and_a_property_filter_at_the_broker(spark: Any, tmp_path: Path, capsys: Any) -> None:
    cluster = Cluster(tmp_path)
    try:
        cluster.start_namesrv()
        broker = cluster.start_broker(conf={"metricsExporterType": "PROM", "metricsPromExporterPort": free_port()})
        create_topic(cluster, "sp-push", 2)
        with Producer("sp-push-p", cluster.namesrv_addr) as producer:
            for i in range(60):
                props = {"region": ("eu", "us", "asia")[i % 3]} if i % 5 else {}
                producer.send(Message("sp-push", f"{i}".encode(), tags="xy"[i % 2], properties=props))
        want = sorted(str(i) for i in range(60) if i % 2 == 0 and i % 5 and i % 3 == 0)
        df = (spark.read.format("txmq").schema(SCHEMA_DDL + ", region string")
              .option("namesrv", cluster.namesrv_addr).option("topic", "sp-push").option("group", "sp-push-g")
              .load().where((col("tags") == "x") & (col("region") == "eu")))
        df.explain("formatted")
        plan = capsys.readouterr().out
        pushed = next(line for line in plan.splitlines() if line.startswith("PushedFilters"))
        assert "EqualTo(tags,x)" in pushed and "EqualTo(region,eu)" in pushed
        rows = df.select("body", "region", "tags").collect()
        assert sorted(bytes(r.body).decode() for r in rows) == want
        assert {(r.region, r.tags) for r in rows} == {("eu", "x")}
        assert messages_out(broker.addrs["metrics"], "sp-push", "sp-push-g") == len(want)  # nothing else left
    finally:
        cluster.close()


def test_what_is_pushed_and_what_stays_with_spark() -> None:
    opts = SourceOptions.parse({"namesrv": "127.0.0.1:1", "topic": "t", "tags": "a || b"}, streaming=False)
    t = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    since = GreaterThanOrEqual(("store_timestamp",), t)
    kept_for_spark = [LessThan(("tags",), "x"), EqualTo(("body",), b"x"), StringContains(("keys",), ""),
                      EqualTo(("properties", "not-a-name"), "v"), since]
    taken = [EqualTo(("tags",), "it's"), Not(In(("keys",), ("k1", "k2"))), IsNotNull(("region",)),
             EqualTo(("properties", "color"), "red")]
    pushed = Pushed()
    assert list(push([*taken, *kept_for_spark], pushed, ("region",))) == kept_for_spark
    assert pushed.sql == ["TAGS = 'it''s'", "KEYS NOT IN ('k1', 'k2')", "region IS NOT NULL", "color = 'red'"]
    after = apply(opts, pushed)
    assert after.sql == "TAGS IN ('a', 'b') AND " + " AND ".join(pushed.sql) and after.tags == "*"
    # a second before t: a broker without marks of steps back under its clock's tolerance answers up to 200 ms late
    assert after.starting == ByTime(int(t.timestamp() * 1000) - STEP_MARGIN_MS, {})
    later = SourceOptions.parse({"namesrv": "127.0.0.1:1", "topic": "t", "startingTimestamp": "1"}, False)
    assert apply(later, pushed).starting == ByTime(int(t.timestamp() * 1000) - STEP_MARGIN_MS, {})
    by_offsets = SourceOptions.parse({"namesrv": "127.0.0.1:1", "topic": "t", "startingOffsets": "latest"}, False)
    assert apply(by_offsets, pushed).starting == "latest"  # a start the user chose is kept


def test_a_condition_past_the_brokers_bounds_stays_with_spark() -> None:
    """The broker refuses an expression past 1,024 tokens (or 16,384 characters): a condition that would take the
    pushed expression, the ``tags`` option folded in, past them is Spark's to evaluate, the others still pushed."""
    from txmq.filter.sql import MAX_TOKENS

    many = In(("keys",), tuple(f"k{i}" for i in range(MAX_TOKENS // 2)))  # two tokens a value: past the bound
    few = In(("keys",), tuple(f"k{i}" for i in range(MAX_TOKENS // 4)))  # about half the bound: one fits
    tag = EqualTo(("tags",), "x")
    opts = SourceOptions.parse({"namesrv": "127.0.0.1:1", "topic": "t", "tags": " || ".join(
        f"t{i}" for i in range(MAX_TOKENS // 20))}, streaming=False)  # about 100 tokens
    pushed = Pushed()
    assert list(push([many, tag, few, few], pushed, (), opts.tags)) == [many, few]
    assert len(pushed.sql) == 2 and pushed.sql[0] == "TAGS = 'x'"
    assert apply(opts, pushed).sql.endswith(pushed.sql[1])  # the expression the broker gets compiles
