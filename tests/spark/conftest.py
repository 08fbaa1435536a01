"""One local SparkSession for the whole test session (start ≈ 7 s) and one txmq name server + broker whose
check-back is fast (transactionTimeOut 1 s, interval 1 s); on request, a standalone Spark master + worker
(``spark_master``, see standalone.py)."""

from __future__ import annotations

import os
import subprocess
import traceback
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.cluster import Cluster
from tests.spark.spark_helpers import BROKER_CONF, RETENTION_CONF, spark_env
from tests.spark.standalone import StandaloneError, StandaloneSpark


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
    # pyspark's accumulator channel: the JVM's one socket back to this process, which it never reopens once this
    # end is gone (every later Python data source then fails on "Broken pipe"). Its handler dying is recorded, so
    # the test during which it happened fails saying why (see channel_to_the_jvm_intact).
    session.sparkContext._accumulatorServer.handle_error = lambda *_: CHANNEL_ERRORS.append(traceback.format_exc())
    try:
        yield session
    finally:
        session.stop()


CHANNEL_ERRORS: list[str] = []


@pytest.fixture(autouse=True)
def channel_to_the_jvm_intact() -> Iterator[None]:
    """Fails the test during which the session's accumulator channel broke, with the handler's exception."""
    yield
    assert not CHANNEL_ERRORS, f"pyspark's accumulator channel broke: {CHANNEL_ERRORS[0]}"


# Retention within seconds: 64 KiB commit-log segments kept about a second (fileReservedTime is in hours; the
# store's cleaner runs every 10 s and spares what its 3 s checkpoint does not cover yet).


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
