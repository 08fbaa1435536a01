"""Timer messages across an automatic failover, real processes (etcd, a controller, three replicas): the master is
killed (SIGKILL) while its timers are being delivered; the new master, whose timer index was kept from the
replicated log, delivers the rest on time: each one stored in its topic exactly once, none before its time."""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from tests.e2e.failover_group import FailoverGroup, log_messages
from tests.e2e.ha_group import max_offset
from tests.e2e.helpers import wait_until
from txmq import Admin, Message
from txmq.client.producer import Producer

TOPIC = "fo-timers"
COUNT = int(os.environ.get("TXMQ_TIMER_FAILOVER_COUNT", "1000"))
SPREAD_MS = 20_000


@pytest.fixture
def group(cluster):
    g = FailoverGroup(cluster, conf={"timerPrecisionMs": 100})
    try:
        yield g.start()
    finally:
        cluster.close()
        g.close()


def test_the_new_master_delivers_the_old_masters_timers(group, cluster):
    master = group.wait_master(30, full_set=True)
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(TOPIC, queue_nums=2)
    cluster.wait_route(TOPIC)
    group.wait_topic_copied(TOPIC)  # the slaves copy the topic config
    with Producer("fo-timers-p", cluster.namesrv_addr) as p:
        start = int(time.time() * 1000) + 5000
        futures = []
        for i in range(COUNT):
            m = Message(TOPIC, str(i).encode())
            m.deliver_at(start + i * SPREAD_MS // COUNT)
            futures.append(p.send_async(m))
        for f in futures:
            f.result(60)
    end = max_offset(group.addr(master))
    assert wait_until(lambda: all(max_offset(group.addr(r)) >= end for r in group.ids), 10)
    time.sleep(max(0.0, (start + SPREAD_MS / 3) / 1000 - time.time()))
    group.members[master].kill()
    new = group.wait_master(30, not_id=master)
    elected_ms = int(time.time() * 1000)
    deadline = start / 1000 + SPREAD_MS / 1000 + 20

    def delivered() -> list:
        return [m for m in log_messages(group.store(new), max_offset(group.addr(new))) if m.topic == TOPIC]

    assert wait_until(lambda: len({m.body for m in delivered()}) >= COUNT, max(1.0, deadline - time.time())), \
        len({m.body for m in delivered()})
    time.sleep(1.0)
    msgs = delivered()
    counts = Counter(m.body for m in msgs)
    assert len(counts) == COUNT
    assert [b for b, n in counts.items() if n > 1] == [], "delivered twice"
    early = [m for m in msgs if m.store_timestamp < int(m.properties["TIMER_DELIVER_MS"])]
    assert early == [], "delivered early"
    # those due once the new master acts: on time (the precision + 1 s); those due during the election: at once
    after = [m for m in msgs if int(m.properties["TIMER_DELIVER_MS"]) > elected_ms + 2000]
    assert after
    late = [m.store_timestamp - int(m.properties["TIMER_DELIVER_MS"]) for m in after]
    assert max(late) <= 100 + 1000, sorted(late)[-5:]
    by_old = [m for m in msgs if int(m.properties["TIMER_DELIVER_MS"]) < start + SPREAD_MS / 4]
    assert by_old, "the old master delivered some before it was killed"
