"""Reads from slaves in real processes: a slave copies its master's topics and offsets (SlaveSynchronize),
a master sends a reader that is far behind to a slave (suggestWhichBrokerId), and when the master is SIGKILLed,
txmq's PushConsumer keeps consuming everything it acknowledged from the slave, and the RocketMQ C++ client and
the official RocketMQ 5 Python client started during the outage read all of it there."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import orjson

from tests.e2e.cpp.harness import kill_all, run_consume
from tests.e2e.ha_group import Group, ha_status, request
from tests.e2e.helpers import Recorder, push_consumer, wait_until
from txmq import Admin, Message, Producer, SendStatus
from txmq.admin.client import MQAdminExt
from txmq.launch import free_port
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import PullMessageRequestHeader

SYNC = {"brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH"}


def rmq5_py(home: Path, timeout: float = 90, **args: object) -> list[dict]:
    """The official RocketMQ 5 Python client (tests/grpc's driver, in .venv-rmq5)."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([str(root / ".venv-rmq5" / "bin" / "python"), str(root / "tests/grpc/drivers/rmq5_py.py"),
                           json.dumps(args)], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, HOME=str(home)))
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert events and events[-1]["event"] == "done" and events[-1]["ok"], done.stderr[-3000:]
    return events


def _topics(addr: str) -> set[str]:
    return set(orjson.loads(request(addr, RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"])


def _offsets(addr: str) -> dict[str, int]:
    table = orjson.loads(request(addr, RequestCode.GET_ALL_CONSUMER_OFFSET).body)["offsetTable"]
    return {q: o for q, o in table.get("ha-read@g-ha-read", {}).items()}


def _pull(addr: str, topic: str, offset: int) -> tuple[int, int]:
    resp = _pull_as(addr, "g-raw", topic, offset)
    return resp.code, int(resp.ext_fields.get("suggestWhichBrokerId", "-1"))


def _pull_as(addr: str, group: str, topic: str, offset: int) -> RemotingCommand:
    header = PullMessageRequestHeader(consumer_group=group, topic=topic, queue_id=0, queue_offset=offset,
                                      max_msg_nums=4, sys_flag=0, suspend_timeout_millis=0, subscription="*",
                                      sub_version=0, expression_type="TAG")
    return request(addr, RequestCode.PULL_MESSAGE, header.to_ext())


def test_a_group_an_operator_paused_on_the_master_stays_paused_on_its_slave(cluster):
    """The slave copies its master's subscription groups (RocketMQ's syncSubscriptionGroupConfig): a group paused
    with ``updateSubGroup consumeEnable=false`` on the master is refused by the slave too once the master is
    killed, instead of reading on from it; a group the master deletes is gone on the slave."""
    group = Group(cluster, conf={"slaveReadEnable": "true"})
    master = group.member(0, "ASYNC_MASTER").start()
    group.member(1, "SLAVE").start()
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("paused-t", queue_nums=1)
    cluster.wait_route("paused-t")
    with Producer("p-paused", cluster.namesrv_addr) as producer:
        assert producer.send(Message("paused-t", b"m")).status == SendStatus.SEND_OK
    with MQAdminExt(cluster.namesrv_addr) as admin:
        admin.update_sub_group(group.addr(0), {"groupName": "g-paused", "consumeEnable": False})
        admin.update_sub_group(group.addr(0), {"groupName": "g-gone", "retryMaxTimes": 2})
        assert wait_until(lambda: {"g-paused", "g-gone"} <= set(admin.sub_groups(group.addr(1))), 15)
        assert admin.sub_groups(group.addr(1))["g-paused"]["consumeEnable"] is False
        admin.delete_sub_group(group.addr(0), "g-gone")
        assert wait_until(lambda: "g-gone" not in admin.sub_groups(group.addr(1)), 15)
    assert wait_until(lambda: _pull_as(group.addr(1), "g-open", "paused-t", 0).code == ResponseCode.SUCCESS, 15)
    master.kill()
    refused = _pull_as(group.addr(1), "g-paused", "paused-t", 0)
    assert refused.code != ResponseCode.SUCCESS and "consumeEnable=false" in (refused.remark or ""), refused.remark


def test_master_killed_consumers_keep_reading_everything_acknowledged_from_the_slave(cluster, tmp_path):
    grpc = {0: free_port(), 1: free_port()}
    group = Group(cluster, conf={"slaveReadEnable": "true"})
    master = group.member(0, "SYNC_MASTER", {**SYNC, "accessMessageInMemoryMaxRatio": 0, "grpcPort": grpc[0]}).start()
    group.member(1, "SLAVE", {"grpcPort": grpc[1]}).start()
    m_addr, s_addr = group.addr(0), group.addr(1)
    assert wait_until(lambda: len(ha_status(m_addr)["slaves"]) == 1, 15)
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("ha-read", queue_nums=2)
    cluster.wait_route("ha-read")
    assert wait_until(lambda: "ha-read" in _topics(s_addr), 15)  # SlaveSynchronize copied the topic

    recorder = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "g-ha-read", "ha-read", recorder, persist_interval_s=0.5)
    try:
        with Producer("p-ha-read", cluster.namesrv_addr) as producer:
            sent = [producer.send(Message("ha-read", f"r{i}".encode(), keys=f"k{i}")) for i in range(100)]
            assert recorder.wait_for(100, 20)
            # The group's committed offsets reach the master, then the slave (SlaveSynchronize).
            assert wait_until(lambda: sum(_offsets(m_addr).values()) == 100, 10), _offsets(m_addr)
            assert wait_until(lambda: _offsets(s_addr) == _offsets(m_addr), 15), (_offsets(s_addr), _offsets(m_addr))
            # A reader far behind the log's end is sent to the slave (the master's accessMessageInMemoryMaxRatio=0:
            # any distance is "far"); the slave (default 40 % of RAM) serves it and sends it back to the master.
            assert _pull(m_addr, "ha-read", 0) == (ResponseCode.SUCCESS, 1)
            assert _pull(s_addr, "ha-read", 0) == (ResponseCode.SUCCESS, 0)
            sent += [producer.send(Message("ha-read", f"r{i}".encode(), keys=f"k{i}")) for i in range(100, 200)]
        assert {r.status for r in sent} == {SendStatus.SEND_OK}
        master.kill()  # SIGKILL: everything above was acknowledged under SYNC_MASTER + SYNC_FLUSH
        expected = {r.msg_id for r in sent}
        assert wait_until(lambda: set(recorder.ids()) >= expected, 30), len(expected - set(recorder.ids()))
    finally:
        consumer.shutdown()
    try:
        # The C++ client starts after the master is gone: its route names only the slave.
        result = run_consume(cluster.namesrv_addr, "ha-read", "cpp-ha-read", 200, timeout=60, home=tmp_path)
    finally:
        kill_all()
    assert not result.timed_out, result.stderr[-2000:]
    assert {m["msg_id"] for m in result.messages} == expected
    # The official RocketMQ 5 Python client, given both members' gRPC endpoints, reaches the slave.
    endpoints = ";".join(f"127.0.0.1:{grpc[i]}" for i in (0, 1))
    events = rmq5_py(tmp_path, cmd="simple", endpoint=endpoints, topic="ha-read", group="rmq5-ha-read",
                     expect=200, wait=40)
    assert {e["id"] for e in events if e["event"] == "received"} == expected
