"""A client process's collector: the first client started freezes what the process built before it and collects
the youngest generation less often (``txmq.gctune``), once per process; ``$TXMQ_GC_TUNE=false`` leaves the
collector as the application set it. Each case runs in a process of its own, as the settings are process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.e2e.cluster import Cluster

CHILD = """
import gc, json, sys
from txmq.client.consumer import ConsumeStatus, PushConsumer
from txmq.client.producer import Producer

namesrv = sys.argv[1]
default_young = gc.get_threshold()[0]
startup = [[]]  # a container the collector tracks, built before any client
producer = Producer("gc_probe_p", namesrv).start()
startup_frozen = not any(o is startup for o in gc.get_objects())
frozen_after_first = gc.get_freeze_count()
later = [[]]  # built after the first client: a second client must not freeze it
consumer = PushConsumer("gc_probe_c", namesrv)
consumer.subscribe("gc_probe_topic")
consumer.register_listener(lambda msgs: ConsumeStatus.SUCCESS)
consumer.start()
later_frozen = not any(o is later for o in gc.get_objects())
print(json.dumps({"default_young": default_young, "young": gc.get_threshold()[0], "startup_frozen": startup_frozen,
                  "frozen": frozen_after_first, "later_frozen": later_frozen}))
consumer.shutdown()
producer.shutdown()
"""


def _child(namesrv: str, **env: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", CHILD, namesrv], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env}, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_the_first_client_freezes_startup_objects_and_raises_the_young_threshold(cluster: Cluster) -> None:
    got = _child(cluster.namesrv_addr)
    assert got["startup_frozen"] is True
    assert got["frozen"] > 0
    assert got["young"] > got["default_young"]
    assert got["later_frozen"] is False  # once per process: the second client's start froze nothing new


def test_txmq_gc_tune_false_leaves_the_collector_alone(cluster: Cluster) -> None:
    got = _child(cluster.namesrv_addr, TXMQ_GC_TUNE="false")
    assert got["startup_frozen"] is False
    assert got["frozen"] == 0
    assert got["young"] == got["default_young"]
