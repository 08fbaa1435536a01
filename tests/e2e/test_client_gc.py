"""A client process's collector: with ``$TXMQ_GC_TUNE=true`` the first client started freezes what the process
built before it and collects the youngest generation less often (``txmq.gctune``), once per process; by default
the collector stays as the application set it. Each case runs in a process of its own, as the settings are
process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

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


def _child(namesrv: str, env: dict[str, str] | None = None, **more: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", CHILD, namesrv], capture_output=True, text=True, timeout=120,
                         env={**(os.environ if env is None else env), **more}, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_asked_the_first_client_freezes_startup_objects_and_raises_the_young_threshold(cluster: Cluster) -> None:
    got = _child(cluster.namesrv_addr, TXMQ_GC_TUNE="true")
    assert got["startup_frozen"] is True
    assert got["frozen"] > 0
    assert got["young"] > got["default_young"]
    assert got["later_frozen"] is False  # once per process: the second client's start froze nothing new


@pytest.mark.parametrize("setting", [None, "false"])
def test_unasked_a_client_leaves_the_collector_alone(cluster: Cluster, setting: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TXMQ_GC_TUNE"}
    if setting is not None:
        env["TXMQ_GC_TUNE"] = setting
    got = _child(cluster.namesrv_addr, env=env)
    assert got["startup_frozen"] is False
    assert got["frozen"] == 0
    assert got["young"] == got["default_young"]
