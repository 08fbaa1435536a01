"""Helpers of the Spark tests, in a module of its own: a test file that imported them from ``conftest`` got
another folder's conftest when pytest was given folders in another order."""

from __future__ import annotations

import sys
import time

from tests.e2e.cluster import ALL_HOURS, Cluster

# An orphan of a killed driver (a half no live responder was there to be asked about: the sink's responder lives
# and dies with its query) is discarded after transactionTimeOut x transactionOrphanFactor = 45 s, not the default
# hour, so the kill tests end within their wait whatever the machine's load.
BROKER_CONF = {"transactionTimeOut": 1000, "transactionCheckInterval": 1000, "transactionCheckMax": 30,
               "transactionOrphanFactor": 45}


def spark_env() -> dict[str, str]:
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}


RETENTION_CONF = {**BROKER_CONF, "mappedFileSizeCommitLog": 64 * 1024, "fileReservedTime": 0.0003,
                  "deleteWhen": ALL_HOURS}


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
