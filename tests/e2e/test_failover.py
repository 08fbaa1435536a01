"""Automatic failover with real processes (etcd, a controller, three replicas, SYNC_MASTER + SYNC_FLUSH): the
master SIGKILLed, SIGSTOPped past its lease, and partitioned from the controller and its slaves (not from its
clients), while txmq's, the C++ and the RocketMQ 5 (gRPC) clients send and transactions go on. Nothing
acknowledged is lost or duplicated, the partitioned master acknowledges nothing once another acts, every COMMIT
is visible once and no ROLLBACK, one start per epoch, and the replicas' commit logs are byte-identical at the
end. A master restarted at once with a lost tail is not master again at its old epoch."""

from __future__ import annotations

import errno
import random
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from tests.e2e.failover_group import FailoverGroup, log_messages
from tests.e2e.fault_campaign import TOPIC, WARM_UP_ACKS, run_campaign
from tests.e2e.ha_group import commit_log_bytes, max_offset
from tests.e2e.helpers import wait_until
from txmq import Admin, Message, Producer, SendStatus
from txmq.launch import free_port
from txmq.remoting.codes import ResponseCode


@pytest.fixture
def group(cluster):
    g = FailoverGroup(cluster, grpc=True)
    try:
        yield g.start()
    finally:
        cluster.close()
        g.close()


def test_short_fault_campaign(group, cluster):
    # each fault kind once (the long campaign, bench/faults.py, repeats them); one kill, for the 20-minute budget
    faults = ("kill", "pause", "partition", "slave-flip", "slave-truncate")
    figures = run_campaign(cluster, group, faults, random.Random(13), cluster.root / "cpp-home")
    print(figures)
    assert figures.faults == {"kill": 1, "pause": 1, "partition": 1, "slave-flip": 1, "slave-truncate": 1}
    # Every producer (txmq's sends and transactions, the C++ client, the RocketMQ 5 gRPC client) had WARM_UP_ACKS
    # sends acknowledged before the first fault (run_campaign asserts it); each one is checked below.
    assert min(figures.cpp_sends_acked, figures.grpc_sends_acked, figures.tx_acked) >= WARM_UP_ACKS
    # The partitioned master, still reached by clients, refused a send once another master acted; not stored,
    assert len(figures.fenced_answers) == 1 and ResponseCode.SUCCESS not in figures.fenced_answers, \
        figures.fenced_answers
    assert figures.fenced_stored == 0
    # nor a decision: a ROLLBACK of a transaction meant to COMMIT (tx_committed_lost would count it taken)
    assert len(figures.fenced_decision_answers) == 1 and ResponseCode.SUCCESS not in figures.fenced_decision_answers
    assert figures.partition_ha_cut[0] > 0  # its slaves' HA sessions were cut; they tried to check it again
    assert figures.partition_link_refused[0] > 0  # (its epoch table) and for its metadata: the network said no
    assert (figures.sends_lost, figures.sends_duplicated) == (0, 0)
    assert (figures.tx_committed_lost, figures.tx_duplicated, figures.tx_rollback_visible) == (0, 0, 0)
    # The consumer read through every fault: every acknowledged send and COMMIT delivered (reads are bounded by
    # the confirm offset, so it never gets ahead of the member a failover elects), no ROLLBACK, no half.
    assert figures.consumed_missing == 0, figures.consumed_missing_keys
    assert (figures.consumed_rollback, figures.consumed_halves) == (0, 0), figures
    assert figures.split_brain_epochs == 0
    assert figures.replicas_identical
    assert len(figures.failover_s) == 3 and max(figures.failover_s) < 15
    # The tools show the epochs and the SyncStateSet.
    env = dict(cluster.env, NAMESRV_ADDR=cluster.namesrv_addr)
    out = subprocess.run([sys.executable, "-m", "txmq.cli", "controller", "status", "--controller",
                          group.controller_addr], capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 0, out.stderr
    assert "epoch 4" in out.stdout and "SyncStateSet [1, 2, 3]" in out.stdout, out.stdout
    out = subprocess.run([sys.executable, "-m", "txmq.cli", "ha", "status"], capture_output=True, text=True,
                         timeout=30, env=env)
    assert out.returncode == 0, out.stderr
    assert "SyncStateSet [1, 2, 3]" in out.stdout and "epoch 4" in out.stdout, out.stdout


def test_a_controller_inside_the_name_server(tmp_path):
    """RocketMQ's enableControllerInNamesrv: one process serves routes and elects; a lone replica of a new
    group becomes its master and the name server routes it as brokerId 0."""
    from tests.e2e.cluster import Cluster
    from tests.e2e.helpers import wait_until
    from txmq.controller.etcd_launch import EtcdProcess
    from txmq.controller.status import controller_status
    from txmq.launch import ServerProcess, free_port, txmq_command

    etcd = EtcdProcess(tmp_path / "etcd", tmp_path / "etcd.log").start()
    cluster = Cluster(tmp_path)
    try:
        cport = free_port()
        ns = ServerProcess(txmq_command("namesrv", "--port", str(free_port()), "--enable-controller-in-namesrv",
                                        "--etcd", etcd.endpoint, "--controller-port", str(cport)),
                           tmp_path / "namesrv.log", cluster.env).start()
        cluster.procs.append(ns)
        cluster.namesrv_addr = ns.addrs["namesrv"]
        assert ns.addrs["controller"] == f"127.0.0.1:{cport}"
        broker = cluster.broker("broker-b-1", {"brokerName": "broker-b", "brokerId": 1, "grpcPort": -1,
                                               "haListenPort": free_port(), "enableControllerMode": "true",
                                               "controllerAddr": f"127.0.0.1:{cport}"}).start()

        def routed() -> bool:
            with Admin(cluster.namesrv_addr) as admin:
                rows = admin.cluster_list()
            return [(r["brokerName"], str(r["brokerId"]), r["addr"]) for r in rows] == [
                ("broker-b", "0", broker.addrs["broker"])]

        assert wait_until(routed, 20)
        group = controller_status(f"127.0.0.1:{cport}")["groups"]["broker-b"]
        assert (group["master_id"], group["epoch"], group["sync_state_set"]) == (1, 1, [1])
    finally:
        cluster.close()
        etcd.stop()


def test_the_acting_controller_killed_another_takes_over_without_an_election(cluster):
    """Two controllers over one etcd: the acting one SIGKILLed, the other acts once the leader key's lease
    (2 s) runs out, from the state in etcd, before the master's own lease (4 s) does: the group keeps its master
    and epoch, and sends go on."""
    import time

    from tests.e2e.helpers import wait_until
    from txmq import Message, Producer, SendStatus
    from txmq.controller.status import controller_status

    g = FailoverGroup(cluster, controllers=2)
    try:
        g.start()
        master = g.wait_master(30, full_set=True)
        before = g.state()
        metas = [controller_status(f"127.0.0.1:{p}")["metadata"] for p in g.controller_ports]
        acting = next(i for i, m in enumerate(metas) if m["isLeader"])
        other = 1 - acting
        with Admin(cluster.namesrv_addr) as admin:
            admin.create_topic(TOPIC, queue_nums=2)
        cluster.wait_route(TOPIC)
        g.controllers[acting].kill()
        assert wait_until(lambda: controller_status(f"127.0.0.1:{g.controller_ports[other]}")["metadata"]
                          ["isLeader"], 15)
        with Producer("p-ctl", cluster.namesrv_addr) as producer:
            t_end = time.monotonic() + 8
            results = []
            while time.monotonic() < t_end:
                results.append(producer.send(Message(TOPIC, b"x")).status)
                time.sleep(0.05)
        after = g.state()
        assert (after["master_id"], after["epoch"]) == (master, before["epoch"])
        assert set(results) == {SendStatus.SEND_OK}
        assert g.wait_master(10) == master
    finally:
        g.close()


def _zero_log(store: Path, start: int, end: int) -> None:
    """Zero the commit log's bytes [start, end): the tail an ASYNC_FLUSH master loses in a machine crash."""
    for seg in sorted((store / "commitlog").iterdir()):
        base = int(seg.name)
        data = bytearray(seg.read_bytes())
        lo, hi = max(start, base), min(end, base + len(data))
        if lo < hi:
            data[lo - base:hi - base] = bytes(hi - lo)
            seg.write_bytes(bytes(data))


def test_a_master_restarted_at_once_without_its_acknowledged_tail_loses_the_election(cluster):
    """SYNC_MASTER + ASYNC_FLUSH: acknowledged sends are on every replica; the master is SIGKILLed, its log's
    last 20 messages zeroed on disk (what a machine crash takes from an ASYNC_FLUSH log), and it is restarted
    at once, well within the heartbeat timeout (30 s here, so only the restart can trigger the election); the
    slaves are restarted too once the controller saw the master's restart. The controller sees a new process,
    elects a slave that holds the tail at epoch 2, and every acknowledged send is on every replica exactly
    once."""
    g = FailoverGroup(cluster, conf={"flushDiskType": "ASYNC_FLUSH", "controllerHeartBeatTimeoutMills": 30000})
    try:
        g.start()
        old = g.wait_master(30, full_set=True)
        assert g.state()["epoch"] == 1
        with Admin(cluster.namesrv_addr) as admin:
            admin.create_topic(TOPIC, queue_nums=2)
        cluster.wait_route(TOPIC)
        with Producer("p-restart", cluster.namesrv_addr, retry_times=0) as producer:
            acked = [f"r-{i}" for i in range(60)]
            for key in acked:
                assert producer.send(Message(TOPIC, key.encode() * 10, keys=key)).status == SendStatus.SEND_OK
        acked_end = max_offset(g.addr(old))
        assert wait_until(lambda: all(max_offset(g.addr(r)) == acked_end for r in g.ids), 10)  # the slaves hold it
        g.members[old].kill()
        tail = [m for m in log_messages(g.store(old), acked_end) if m.topic == TOPIC][-20]
        _zero_log(g.store(old), tail.commit_log_offset, acked_end)
        slaves = [r for r in g.ids if r != old]
        for r in slaves:  # restarted too while the election waits: they must not follow (and truncate to) it
            g.members[r].kill()
        killed = time.monotonic()
        g.members[old].start()
        assert wait_until(lambda: "restarted (a new process" in (cluster.root / "controller-0.log").read_text(), 10)
        for r in slaves:
            g.members[r].start()
        new = g.wait_master(20, not_id=old)
        print(f"restart to a new master: {time.monotonic() - killed:.1f} s")
        assert g.state()["epoch"] == 2
        restarts = re.findall(r"master (\d+) restarted \(a new process, log ends at (\d+)\)",
                              (cluster.root / "controller-0.log").read_text())
        assert [(int(r), int(at)) for r, at in restarts] == [(old, tail.commit_log_offset)]
        g.wait_master(30, full_set=True)  # the restarted replica follows and catches up
        end = max_offset(g.addr(new))
        assert wait_until(lambda: all(max_offset(g.addr(r)) == end for r in g.ids), 30)
        for r in g.ids:
            keys = Counter(m.keys for m in log_messages(g.store(r), end) if m.topic == TOPIC)
            assert all(keys[k] == 1 for k in acked), (r, keys)
            assert commit_log_bytes(g.store(r), end) == commit_log_bytes(g.store(new), end)
            epochs = orjson.loads((g.store(r) / "epochFileCheckpoint").read_bytes())
            assert [e for e, _ in epochs] == [1, 2] and epochs[1][1] == acked_end, epochs  # the new master's end
    finally:
        g.close()


def test_a_replica_keeps_its_ha_port_bound_in_every_role(cluster):
    """A replica binds its HA port at start and keeps it, master or not (RocketMQ's HA service listens in every
    role): bound only on becoming master, it was taken meanwhile by a proxy's listener in a CI campaign, and the
    elected master could serve no slave. Not master (no controller here), it closes an HA connection at once."""
    ha = free_port()
    broker = cluster.start_broker(conf={"enableControllerMode": "true", "brokerId": 1, "haListenPort": ha,
                                        "controllerAddr": f"127.0.0.1:{free_port()}", "brokerRole": "SYNC_MASTER"})
    assert broker.pid is not None
    taker = socket.socket()
    try:
        with pytest.raises(OSError) as taken:
            taker.bind(("127.0.0.1", ha))
        assert taken.value.errno == errno.EADDRINUSE
    finally:
        taker.close()
    with socket.create_connection(("127.0.0.1", ha), timeout=5) as conn:
        assert conn.recv(1) == b""  # closed by a replica that is not master: its slave tries again later
