"""One local SparkSession for the whole test session (start ≈ 7 s) and one txmq name server + broker whose
check-back is fast (transactionTimeOut 1 s, interval 1 s); on request, a standalone Spark master + worker
(``spark_master``, see standalone.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "e2e"))
sys.path.insert(0, str(Path(__file__).parent))

from cluster import Cluster
from standalone import StandaloneError, StandaloneSpark

# An orphan of a killed driver (a half no live responder was there to be asked about: the sink's responder lives
# and dies with its query) is discarded after transactionTimeOut x transactionOrphanFactor = 45 s, not the default
# hour, so the kill tests end within their wait whatever the machine's load.
BROKER_CONF = {"transactionTimeOut": 1000, "transactionCheckInterval": 1000, "transactionCheckMax": 30,
               "transactionOrphanFactor": 45}


def spark_env() -> dict[str, str]:
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}


@pytest.fixture(scope="session")
def txmq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("txmq"))
    try:
        c.start_namesrv()
        c.start_broker("broker-a", BROKER_CONF)
        yield c
    finally:
        c.close()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    import txmq.spark

    session = (SparkSession.builder.master("local[2]").appName("txmq-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.streaming.checkpointLocation", str(tmp_path_factory.mktemp("ckpt")))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    txmq.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


# Retention within seconds: 64 KiB commit-log segments kept about a second (fileReservedTime is in hours; the
# store's cleaner runs every 10 s and spares what its 3 s checkpoint does not cover yet).
RETENTION_CONF = {**BROKER_CONF, "mappedFileSizeCommitLog": 64 * 1024, "fileReservedTime": 0.0003}


@pytest.fixture(scope="session")
def three_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A second name server with three brokers: ``broker-r`` deletes old segments within seconds, ``broker-s``
    and ``broker-t`` keep them (as the session's broker-a does)."""
    c = Cluster(tmp_path_factory.mktemp("txmq3"))
    try:
        c.start_namesrv()
        c.start_broker("broker-r", RETENTION_CONF)
        c.start_broker("broker-s", BROKER_CONF)
        c.start_broker("broker-t", BROKER_CONF)
        yield c
    finally:
        c.close()


def wait_no_pending(cluster: Cluster, topic: str, timeout: float = 60.0) -> None:
    """Until the broker has no undecided transaction for ``topic``."""
    from txmq import Admin

    deadline = time.monotonic() + timeout
    with Admin(cluster.namesrv_addr) as admin:
        while time.monotonic() < deadline:
            stats = admin.stats()
            if all(not b["transactions"]["pendingPerTopic"].get(topic) for b in stats.values()):
                return
            time.sleep(0.5)
    raise TimeoutError(f"transactions of {topic} still pending: {stats}")


def create_topic(cluster: Cluster, topic: str, queues: int = 4, brokers: list[str] | None = None) -> None:
    from txmq import Admin

    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(topic, queues, brokers)
    cluster.wait_route(topic)


@pytest.fixture(scope="session")
def spark_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, StandaloneSpark]]:
    """A standalone master + worker (2 cores, 1g) on 127.0.0.1 from pyspark's pip package (standalone.py);
    yields ``(spark://127.0.0.1:PORT, cluster)`` and always stops both JVMs and their executors. A cluster that
    cannot start fails the test that asked for it (never a skip)."""
    cluster = StandaloneSpark(tmp_path_factory.mktemp("spark-standalone"), cores=2, memory="1g")
    try:
        try:
            url = cluster.start()
        except (StandaloneError, OSError, subprocess.SubprocessError) as e:
            pytest.fail(f"the standalone Spark cluster did not start: {e}", pytrace=False)
        yield url, cluster
    finally:
        cluster.stop()
