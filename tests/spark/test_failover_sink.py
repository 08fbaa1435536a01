"""The exactly-once sink through an automatic failover of the brokers it writes to (controller mode, real
etcd, controller and three replicas): the master is SIGKILLed while the query runs; the query is rerun until it
finishes, orphans are resolved by check-back on the new master, and every source row is in the output once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import txmq.spark
from tests.e2e.cluster import Cluster
from tests.e2e.failover_group import FailoverGroup
from tests.spark.spark_helpers import BROKER_CONF, create_topic, wait_no_pending
from tests.spark.test_sink import _counts, _source
from tests.spark.test_source import commits, run_child


@pytest.fixture
def group(tmp_path: Path) -> Iterator[tuple[Cluster, FailoverGroup]]:
    cluster = Cluster(tmp_path / "txmq")
    group = FailoverGroup(cluster, conf=BROKER_CONF)
    try:
        cluster.start_namesrv()
        group.start()
        group.wait_master(30, full_set=True)
        yield cluster, group
    finally:
        cluster.close()
        group.close()


def test_exactly_once_sink_through_a_failover(spark: Any, group: tuple[Cluster, FailoverGroup],
                                              tmp_path: Path) -> None:
    cluster, fo = group
    expected = _source(cluster, "sp-fo-in", 200)
    create_topic(cluster, "sp-fo-out", 2)
    fo.wait_topic_copied("sp-fo-in")  # the slaves copy the topic configs
    fo.wait_topic_copied("sp-fo-out")
    master = fo.wait_master(30)
    ckpt = tmp_path / "ckpt"
    cfg = {"namesrv": cluster.namesrv_addr, "source": "sp-fo-in", "sink": "txmq", "out": "sp-fo-out",
           "checkpoint": str(ckpt), "guarantee": "exactly-once", "maxOffsetsPerTrigger": 20}
    log = tmp_path / "child.log"
    killed = threading.Event()

    def kill_master_once() -> bool:
        """Not a kill of the child: the master goes down once the query has committed two batches."""
        if not killed.is_set() and commits(ckpt) >= 2:
            fo.members[master].kill()
            killed.set()
        return False

    runs = 0
    while True:  # a run whose sends hit the dead master fails; the next one replays its batch
        runs += 1
        try:
            run_child(cfg, log, kill_when=kill_master_once, timeout=180)
            break
        except AssertionError:
            assert runs < 5, log.read_text()[-3000:]
    assert killed.is_set()
    assert fo.wait_master(30) != master
    responder = txmq.spark.start_check_responder(cluster.namesrv_addr, str(ckpt))
    try:
        wait_no_pending(cluster, "sp-fo-out", 90)
    finally:
        responder.shutdown()
    counts = _counts(spark, cluster, "sp-fo-out")
    assert set(counts) == expected, (len(counts), len(expected), sorted(expected - set(counts))[:50], runs)
    assert max(counts.values()) == 1, [b for b, c in counts.items() if c > 1][:5]
