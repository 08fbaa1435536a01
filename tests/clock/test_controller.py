"""Controller mode under the same steps: etcd, a controller and two replicas whose clocks (with the name server's
and the controller's) are stepped back 2 minutes and ahead an hour with transactions and delayed messages in
flight, then the master is killed with a round in flight: the new master checks and delivers on its own
elapsed-time account (the records carry the old master's stamps), never early, and nothing is discarded, lost or
delivered twice. Leases and heartbeats are on the monotonic clock: no step makes a master lose its lease."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.clock.conftest import Faked
from tests.clock.probe import BROKER_CONF, Probe
from tests.e2e.failover_group import FailoverGroup
from txmq import Admin

TAG = "ctl"


@pytest.fixture
def group(faked: Faked) -> Iterator[FailoverGroup]:
    faked.pids.add(faked.cluster.start_namesrv().pid or 0)
    g = FailoverGroup(faked.cluster, replicas=2, conf=BROKER_CONF)  # SYNC_MASTER: an acknowledged send survives
    try:
        yield g.start()
    finally:
        faked.pids.update(p.pid or 0 for p in faked.cluster.procs)
        g.close()


def test_steps_and_a_failover_in_controller_mode(faked: Faked, group: FailoverGroup) -> None:
    master = group.wait_master(30, full_set=True)
    with Admin(faked.namesrv) as admin:
        for topic in (f"{TAG}_tx", f"{TAG}_delay", f"{TAG}_ping"):
            admin.create_topic(topic, 2)
    for topic in (f"{TAG}_tx", f"{TAG}_delay", f"{TAG}_ping"):
        faked.cluster.wait_route(topic)
    probe = Probe(faked.namesrv, None, TAG)
    try:
        for n, step in enumerate((-120, 3600)):
            r = probe.start_round(f"s{n}")
            faked.clock.step(step, settle=False)
            probe.finish(r)
            assert group.master() == master  # no step cost the master its lease
        r = probe.start_round("failover")
        group.members[master].kill()
        group.wait_master(30, not_id=master)
        r.reachable = probe.reconnected()
        probe.finish(r, timeout=40)
        with Admin(faked.namesrv) as admin:
            tx = next(iter(admin.stats().values()))["transactions"]
        assert (tx["discards"], tx["orphans"]) == (0, 0), tx
        kinds = probe.timings_since()
        print("\ncontroller mode: " + ", ".join(f"{k} {min(v):.2f}-{max(v):.2f} s (n={len(v)})"
                                                 for k, v in kinds.items() if v))
    finally:
        probe.close()
