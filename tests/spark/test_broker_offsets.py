"""The stream reader commits each finished batch's end offsets to the broker under its consumer group, so
operators see a running query's lag and a stopped query's backlog in ``txmq admin consumerProgress`` and in
``rocketmq_consumer_lag_messages``, as for any consumer; the checkpoint stays the source of truth."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import Cluster
from tests.spark.spark_helpers import BROKER_CONF, create_topic
from txmq import Message, Producer
from txmq.admin.client import MQAdminExt
from txmq.errors import ClientError
from txmq.launch import free_port

GROUP = "sp-lag-query"
TOPIC = "sp-lag"


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    """A name server and a broker exporting Prometheus metrics; yields the cluster and the metrics address."""
    c = Cluster(tmp_path_factory.mktemp("txmq-metrics"))
    try:
        c.start_namesrv()
        broker = c.start_broker("broker-m", {**BROKER_CONF, "metricsExporterType": "PROM",
                                             "metricsPromExporterPort": free_port(), "grpcPort": -1})
        yield c, broker.addrs["metrics"]
    finally:
        c.close()


def _lag(cluster: Cluster, group: str = GROUP, topic: str = TOPIC) -> int | None:
    """The group's Diff Total as consumerProgress computes it; None while it has no offsets."""
    with MQAdminExt(cluster.namesrv_addr) as admin:
        try:
            table, _ = admin.consume_stats(group, topic)
        except ClientError:
            return None
    if not table:
        return None
    return sum(s.values["brokerOffset"] - max(s.values["consumerOffset"], 0) for s in table)


def _metric(metrics_addr: str) -> int | None:
    text = urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("rocketmq_consumer_lag_messages{") and f'topic="{TOPIC}"' in line \
                and f'consumer_group="{GROUP}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return None


def _cli_diff_total(cluster: Cluster) -> int:
    out = subprocess.run([sys.executable, "-m", "txmq.cli", "admin", "consumerProgress", "-n", cluster.namesrv_addr,
                          "-g", GROUP], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    m = re.search(r"Diff Total: (\d+)", out.stdout)
    assert m, out.stdout
    return int(m.group(1))


def _send(cluster: Cluster, first: int, n: int) -> None:
    with Producer("src-sp-lag", cluster.namesrv_addr) as p:
        for i in range(first, first + n):
            p.send(Message(TOPIC, f"row-{i}".encode()))


def test_running_querys_lag_goes_to_zero_and_a_stopped_querys_backlog_grows(spark: Any, metered: tuple[Cluster, str],
                                                                          tmp_path: Path) -> None:
    cluster, metrics_addr = metered
    create_topic(cluster, TOPIC, 2)
    _send(cluster, 0, 60)
    query = (spark.readStream.format("txmq").option("namesrv", cluster.namesrv_addr).option("topic", TOPIC)
             .option("group", GROUP).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 15).load()
             .writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="1 second").start())
    seen: list[int | None] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not seen or seen[-1] != 0):
            lag = _lag(cluster)
            if not seen or lag != seen[-1]:
                seen.append(lag)
            time.sleep(0.1)
        # Batches of 15: the running query's lag shown falling as its batches finish, down to zero.
        assert seen[-1] == 0, seen
        assert any(lag is not None and 0 < lag < 60 for lag in seen), seen
        assert _metric(metrics_addr) == 0
        _send(cluster, 60, 10)  # more while it runs: read, and committed again
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _lag(cluster) != 0:
            time.sleep(0.2)
        assert _lag(cluster) == 0
        assert _cli_diff_total(cluster) == 0
    finally:
        query.stop()
    assert spark.read.parquet(str(tmp_path / "out")).count() == 70
    _send(cluster, 70, 25)  # the stopped query's backlog
    assert _cli_diff_total(cluster) == 25
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _metric(metrics_addr) != 25:
        time.sleep(0.5)
    assert _metric(metrics_addr) == 25


def test_no_offsets_on_the_broker_with_commit_offsets_to_broker_false(spark: Any, metered: tuple[Cluster, str],
                                                                      tmp_path: Path) -> None:
    cluster, _ = metered
    create_topic(cluster, "sp-nolag", 2)
    with Producer("src-sp-nolag", cluster.namesrv_addr) as p:
        for i in range(10):
            p.send(Message("sp-nolag", f"row-{i}".encode()))
    q = (spark.readStream.format("txmq").option("namesrv", cluster.namesrv_addr).option("topic", "sp-nolag")
         .option("group", "sp-nolag-query").option("commitOffsetsToBroker", "false")
         .option("startingOffsets", "earliest").load()
         .writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert spark.read.parquet(str(tmp_path / "out")).count() == 10
    with MQAdminExt(cluster.namesrv_addr) as admin:
        table, _ = admin.consume_stats("sp-nolag-query", "sp-nolag")
    assert table and {s.values["consumerOffset"] for s in table} == {-1}  # queues listed, no offset committed
