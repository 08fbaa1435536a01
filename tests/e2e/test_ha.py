"""Broker groups with real processes: a master streams its commit log to its slaves byte for byte, slaves
build their own queues from it, catch up after restarts and from empty, and SYNC_MASTER answers a send only
once a slave has it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.ha_group import Group, commit_log_bytes, ha_status, max_offset, request, wait_caught_up
from tests.e2e.helpers import wait_until
from txmq import Admin, LocalTransactionState, Message, Producer, SendStatus, TransactionProducer
from txmq.launch import free_port
from txmq.message import decode_offset_msg_id
from txmq.remoting.codes import RequestCode, ResponseCode

SYNC = {"brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH"}


def _send(producer: Producer, topic: str, n: int, size: int = 300, start: int = 0) -> list:
    return [producer.send(Message(topic, (f"m{i}-".encode() * size)[: size + i % 200], keys=f"k{i}"))
            for i in range(start, start + n)]


def _queue_max(addr: str, topic: str, queues: int) -> list[int]:
    return [int(request(addr, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}).ext_fields["offset"])
            for q in range(queues)]


def test_sync_master_and_two_slaves_have_the_same_log_byte_for_byte(cluster):
    group = Group(cluster)
    metrics_port = free_port()
    master = group.member(0, "SYNC_MASTER", {**SYNC, "inSyncReplicas": 3,  # both slaves must ack
                                             "metricsExporterType": "PROM", "metricsPromExporterPort": metrics_port,
                                             }).start()
    slaves = [group.member(i, "SLAVE").start() for i in (1, 2)]
    m_addr = master.addrs["broker"]
    assert wait_until(lambda: len(ha_status(m_addr)["slaves"]) == 2, 15), ha_status(m_addr)
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("ha-orders", queue_nums=4)
    cluster.wait_route("ha-orders")
    with Producer("p-ha", cluster.namesrv_addr) as producer:
        sent = _send(producer, "ha-orders", 800, size=600)
    assert {r.status for r in sent} == {SendStatus.SEND_OK}
    # Every send was answered after both slaves had it (inSyncReplicas=3): no waiting here.
    end = max_offset(m_addr)
    assert end > 2 * 256 * 1024  # several segments, so BLANK markers were replicated too
    assert [max_offset(s.addrs["broker"]) for s in slaves] == [end, end]
    master_log = commit_log_bytes(group.store(0), end)
    for i in (1, 2):
        assert commit_log_bytes(group.store(i), end) == master_log
        # The slave dispatched its own consume queues from the replicated records.
        assert _queue_max(group.addr(i), "ha-orders", 4) == _queue_max(m_addr, "ha-orders", 4)
    status = ha_status(m_addr)
    assert sorted(s["broker_id"] for s in status["slaves"]) == [1, 2]
    assert all(s["ack_offset"] == end and s["lag_bytes"] == 0 and s["in_sync"] for s in status["slaves"])
    assert ha_status(group.addr(1))["master"]["connected"] is True
    # The same, as Prometheus metrics of the master.
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    replicas = {(f.name, s.labels["slave_id"]): s.value for f in text_string_to_metric_families(text)
                if f.name.startswith("txmq_replica_") for s in f.samples}
    assert replicas == {(name, slave): value for slave in ("1", "2") for name, value in (
        ("txmq_replica_lag_bytes", 0.0), ("txmq_replica_lag_seconds", 0.0), ("txmq_replica_in_sync", 1.0))}


def test_a_killed_slave_catches_up_after_restart_and_an_empty_one_while_sends_go_on(cluster):
    group = Group(cluster)
    master = group.member(0, "ASYNC_MASTER").start()
    slave = group.member(1, "SLAVE").start()
    m_addr = master.addrs["broker"]
    with Producer("p-ha", cluster.namesrv_addr) as producer:
        _send(producer, "ha-a", 300)
        wait_caught_up(m_addr, [group.addr(1)])
        slave.kill()  # SIGKILL
        _send(producer, "ha-a", 600, start=300)
        slave.start()
        fresh = group.member(2, "SLAVE").start()  # empty: copies the whole log while 100 MB of sends go on
        t0 = time.monotonic()
        _send(producer, "ha-a", 1600, size=64 * 1024, start=900)
        send_s = time.monotonic() - t0
    end = wait_caught_up(m_addr, [group.addr(1), fresh.addrs["broker"]])
    assert end > 100 * 1024 * 1024
    master_log = commit_log_bytes(group.store(0), end)
    assert commit_log_bytes(group.store(1), end) == master_log
    assert commit_log_bytes(group.store(2), end) == master_log
    assert send_s < 60, send_s  # a liveness bound (the catch-up never stalls the writers), not a speed figure
    # The master SIGKILLed and restarted: both slaves reconnect and go on from where their logs end.
    master.kill()
    master.start()
    with Producer("p-ha", cluster.namesrv_addr) as producer:
        _send(producer, "ha-a", 200, start=1500)
    end2 = wait_caught_up(m_addr, [group.addr(1), group.addr(2)])
    assert end2 > end
    master_log = commit_log_bytes(group.store(0), end2)
    assert commit_log_bytes(group.store(1), end2) == master_log == commit_log_bytes(group.store(2), end2)


def _txmq(cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "txmq.cli", *args], capture_output=True, text=True, timeout=60,
                          env=dict(cluster.env, NAMESRV_ADDR=cluster.namesrv_addr))


def test_sync_master_without_a_slave_answers_slave_not_available_within_the_send_timeout(cluster):
    group = Group(cluster, conf={"syncFlushTimeout": 1000})
    master = group.member(0, "SYNC_MASTER", SYNC).start()
    slave = group.member(1, "SLAVE").start()
    m_addr = master.addrs["broker"]
    assert wait_until(lambda: len(ha_status(m_addr)["slaves"]) == 1, 15)
    with Producer("p-ha", cluster.namesrv_addr, send_timeout_s=3.0) as producer:
        assert _send(producer, "ha-b", 5)[-1].status == SendStatus.SEND_OK
        # txmq cluster list / ha status (mqadmin clusterList / haStatus) while both members run.
        r = _txmq(cluster, "cluster", "list")
        assert r.returncode == 0, r.stderr
        rows = [line.split() for line in r.stdout.splitlines()[1:]]
        assert [(row[1], row[2], row[3], row[4]) for row in rows] == [
            ("broker-a", "0", m_addr, "SYNC_MASTER"), ("broker-a", "1", group.addr(1), "SLAVE")]
        assert wait_until(lambda: ha_status(m_addr)["slaves"][0]["ack_offset"] == max_offset(m_addr), 10)
        r = _txmq(cluster, "ha", "status")
        assert r.returncode == 0, r.stderr
        assert "1 slaves in sync" in r.stdout and "connected" in r.stdout and "lag 0 bytes" in r.stdout
        assert f"sees master 127.0.0.1:{group.ha_ports[0]}: connected" in r.stdout
        slave.kill()
        assert wait_until(lambda: not ha_status(m_addr)["slaves"][0]["connected"], 10)
        t0 = time.monotonic()
        result = producer.send(Message("ha-b", b"no slave"))
        assert time.monotonic() - t0 < 3.0
    # Stored on the master, not replicated: RocketMQ's SLAVE_NOT_AVAILABLE (the C++ and Java clients see it).
    assert result.status == SendStatus.SLAVE_NOT_AVAILABLE
    status = json.loads(_txmq(cluster, "ha", "status", "--json").stdout)["broker-a"]
    assert status["0"]["inSyncSlaveNums"] == 0 and status["0"]["slaves"][0]["connected"] is False


def test_a_slave_writes_nothing_of_its_own(cluster):
    """An operator decision (9006) or a consumer send-back (36) sent to a slave stores nothing there: the slave's
    log is only ever its master's (txmq's own consumer sends a send-back to a slave when no master is known)."""
    group = Group(cluster, conf={"transactionTimeOut": 60000, "transactionCheckInterval": 60000})
    group.member(0, "ASYNC_MASTER").start()
    group.member(1, "SLAVE").start()
    m_addr, s_addr = group.addr(0), group.addr(1)
    assert wait_until(lambda: len(ha_status(m_addr)["slaves"]) == 1, 15)

    class Undecided:
        def execute_local_transaction(self, msg, arg):
            return LocalTransactionState.UNKNOWN

        def check_local_transaction(self, msg):
            return LocalTransactionState.UNKNOWN

    with TransactionProducer("tx-slave", Undecided(), cluster.namesrv_addr) as tp:
        assert tp.send_message_in_transaction(Message("ha-s", b"half")).status == SendStatus.SEND_OK
    with Producer("p-slave", cluster.namesrv_addr) as producer:
        sent = producer.send(Message("%RETRY%cg", b"retry me"))
    end = wait_caught_up(m_addr, [s_addr])
    decided = request(s_addr, RequestCode.TXMQ_TX_DECIDE, {"id": "0", "outcome": "COMMIT"})
    assert decided.code != ResponseCode.SUCCESS and "slave" in (decided.remark or ""), decided.remark
    _, offset = decode_offset_msg_id(sent.offset_msg_id)
    sent_back = request(s_addr, RequestCode.CONSUMER_SEND_MSG_BACK, {
        "offset": str(offset), "group": "cg", "delayLevel": "0", "originMsgId": sent.msg_id,
        "originTopic": "%RETRY%cg", "maxReconsumeTimes": "16"})
    assert sent_back.code != ResponseCode.SUCCESS and "slave" in (sent_back.remark or ""), sent_back.remark
    time.sleep(0.5)
    assert max_offset(s_addr) == max_offset(m_addr) == end
    assert commit_log_bytes(group.store(1), end) == commit_log_bytes(group.store(0), end)
