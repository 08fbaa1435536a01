"""``txmq admin``: each of mqadmin's commands against a live broker process (issue 16), run through
``txmq.cli.main`` in this process (the broker and name server are real processes over TCP)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.helpers import RawClient, Recorder, heartbeat, push_consumer
from txmq import BrokerError, Message, MessageQueue, Producer, PullConsumer
from txmq.cli import main
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.topic import RMQ_SYS_WHEEL_TIMER_TOPIC, is_system_topic

N = 6


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One broker with topic adm_t holding N messages (keys k0..k5), all consumed and committed by adm_g."""
    cluster = Cluster(Path(tmp_path_factory.mktemp("admin")))
    try:
        cluster.start_namesrv()
        cluster.start_broker(conf={"grpcPort": -1})
        assert admin(cluster, "updateTopic", "-t", "adm_t", "-r", "4", "-w", "4")[0] == 0
        cluster.wait_route("adm_t")
        with Producer("adm_p", cluster.namesrv_addr) as producer:
            for i in range(N):
                producer.send(Message("adm_t", f"body {i}".encode(), tags="T", keys=f"k{i}"))
        yield cluster
    finally:
        cluster.close()


def admin(cluster: Cluster, *args: str) -> tuple[int, str]:
    """``txmq -n <namesrv> admin <args>``: exit code and stdout."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["-n", cluster.namesrv_addr, "admin", *args])
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue() + err.getvalue()


def ok(cluster: Cluster, *args: str) -> str:
    code, out = admin(cluster, *args)
    assert code == 0, out
    return out


def test_cluster_broker_status_and_config(live):
    addr = live.procs[-1].addrs["broker"]
    out = ok(live, "clusterList")
    assert re.search(rf"DefaultCluster\s+broker-a\s+0\s+{re.escape(addr)}\s+txmq ", out), out
    out = ok(live, "brokerStatus", "-b", addr)
    assert "putTps" in out and "commitLogMaxOffset" in out
    assert re.search(r"msgPutTotalTodayNow\s+: (\d+)", out)
    assert re.search(r"^brokerName\s+=  broker-a$", ok(live, "getBrokerConfig", "-b", "broker-a"), re.M)

    assert "update broker config success" in ok(live, "updateBrokerConfig", "-b", addr, "-k", "maxMessageSize",
                                                 "-v", "1000")
    assert re.search(r"^maxMessageSize\s+=  1000$", ok(live, "getBrokerConfig", "-b", addr), re.M)
    with Producer("adm_big", live.namesrv_addr) as producer, pytest.raises(BrokerError, match="maxMessageSize"):
        producer.send(Message("adm_t", b"x" * 2000))
    ok(live, "updateBrokerConfig", "-b", addr, "-k", "maxMessageSize", "-v", str(4 * 1024 * 1024))
    code, out = admin(live, "updateBrokerConfig", "-b", addr, "-k", "listenPort", "-v", "1")
    assert code == 1 and "cannot change listenPort while the broker runs" in out
    code, out = admin(live, "updateBrokerConfig", "-b", addr, "-k", "transactionCheckInterval", "-v", "0")
    assert code == 1 and "transactionCheckInterval: 0 is out of range" in out
    assert re.search(r"^transactionCheckInterval\s+=  30000$", ok(live, "getBrokerConfig", "-b", addr), re.M)


def test_a_raised_max_message_size_reaches_the_store(live):
    """maxMessageSize is one key, read by the send check and by the store's put: raised at run time, a body over
    the old limit is stored (the store kept its own copy of the key, so the send check let the body through and
    the store refused it)."""
    addr = live.procs[-1].addrs["broker"]
    assert admin(live, "updateTopic", "-t", "adm_big", "-r", "1", "-w", "1")[0] == 0
    live.wait_route("adm_big")
    body = os.urandom(4 * 1024 * 1024 + 4096)
    ok(live, "updateBrokerConfig", "-b", addr, "-k", "maxMessageSize", "-v", str(5 * 1024 * 1024))
    try:
        with Producer("adm_big", live.namesrv_addr, max_message_size=8 * 1024 * 1024) as producer:
            result = producer.send(Message("adm_big", body))
        with PullConsumer("adm_big_g", live.namesrv_addr) as consumer:
            consumer.fetch_subscribe_message_queues("adm_big")
            got = consumer.pull(result.message_queue, "*", result.queue_offset, 1)
        assert [m.body for m in got.msgs] == [body]
    finally:
        ok(live, "updateBrokerConfig", "-b", addr, "-k", "maxMessageSize", "-v", str(4 * 1024 * 1024))


def test_topic_commands(live):
    assert "adm_t" in ok(live, "topicList").split()
    assert '"queueDatas"' in ok(live, "topicRoute", "-t", "adm_t")
    rows = re.findall(r"^broker-a\s+(\d)\s+(\d+)\s+(\d+)\s", ok(live, "topicStatus", "-t", "adm_t"), re.M)
    assert len(rows) == 4 and sum(int(hi) - int(lo) for _, lo, hi in rows) >= N

    out = ok(live, "updateTopic", "-t", "adm_new", "-r", "2", "-w", "2")
    assert "success" in out and "writeQueueNums=2" in out
    live.wait_route("adm_new")
    assert len(re.findall(r"^broker-a\s+\d\s", ok(live, "topicStatus", "-t", "adm_new"), re.M)) == 2
    assert "update topic perm from 6 to 4" in ok(live, "updateTopicPerm", "-t", "adm_new", "-p", "4")
    with Producer("adm_perm", live.namesrv_addr) as producer:
        deadline = time.monotonic() + 10
        while True:  # the producer may hold the old route for a moment
            try:
                producer.send(Message("adm_new", b"x"))
            except BrokerError as exc:
                assert "forbidden" in str(exc)
                break
            except Exception as exc:  # no writable queue in the new route
                assert "adm_new" in str(exc)
                break
            assert time.monotonic() < deadline, "writes stayed allowed after updateTopicPerm -p 4"
            time.sleep(0.5)
    assert "success" in ok(live, "deleteTopic", "-t", "adm_new")
    assert "adm_new" not in ok(live, "topicList").split()
    code, out = admin(live, "deleteTopic", "-t", "adm_new")
    assert code == 1 and "topic adm_new does not exist" in out
    code, out = admin(live, "topicStatus", "-t", "absent_topic")
    assert code == 1 and "absent_topic" in out and "Traceback" not in out


def test_message_commands(live):
    out = ok(live, "sendMessage", "-t", "adm_t", "-p", "hello admin", "-k", "k_send", "-c", "TagS")
    row = out.splitlines()[1].split()
    assert row[0] == "broker-a" and row[2] == "SEND_OK"
    uniq = row[3]
    out = ok(live, "queryMsgByKey", "-t", "adm_t", "-k", "k_send")
    found = re.search(rf"^{uniq}\s+(\d+)\s+(\d+)$", out, re.M)
    assert found, out
    qid, offset = found.groups()
    out = ok(live, "queryMsgByUniqueKey", "-t", "adm_t", "-i", uniq)
    assert "Message Body:       hello admin" in out and "Tags:               [TagS]" in out
    offset_id = re.search(r"^Offset Message ID:\s+(\S+)$", out, re.M).group(1)  # type: ignore[union-attr]
    assert "hello admin" in ok(live, "queryMsgById", "-i", offset_id)
    out = ok(live, "queryMsgByOffset", "-t", "adm_t", "-b", "broker-a", "-i", qid, "-o", offset)
    assert "Message Body:       hello admin" in out and f"Queue Offset:       {offset}" in out
    code, out = admin(live, "queryMsgByKey", "-t", "adm_t", "-k", "no_such_key")
    assert code == 1 and "no_such_key" in out

    out = ok(live, "printMsg", "-t", "adm_t")
    bodies = re.findall(r"BODY: (.*)$", out, re.M)
    assert sorted(bodies) == sorted([f"body {i}" for i in range(N)] + ["hello admin"])
    out = ok(live, "printMsg", "-t", "adm_t", "-b", str(int(time.time() * 1000) + 60_000))
    assert "BODY:" not in out
    out = ok(live, "consumeMessage", "-t", "adm_t", "-c", "3")
    assert len(re.findall(r"^Consume ok adm_t", out, re.M)) == 3


def test_group_commands(live):
    rec = Recorder()
    consumer = push_consumer(live.namesrv_addr, "adm_g", "adm_t", rec, persist_interval_s=0.2)
    try:
        assert rec.wait_for(N)
        out = ok(live, "consumerConnection", "-g", "adm_g")
        assert "Topic: adm_t" in out and "MessageModel: CLUSTERING" in out and "PYTHON" in out
        deadline = time.monotonic() + 15
        while "Diff Total: 0" not in (out := ok(live, "consumerProgress", "-g", "adm_g")):
            assert time.monotonic() < deadline, out
            time.sleep(0.3)
        assert len(re.findall(r"^adm_t\s+broker-a\s+\d", out, re.M)) == 4
        assert re.search(r"^adm_g\s+adm_t\s+0$", ok(live, "consumerProgress"), re.M)

        # Back to the start while the consumer is online: it consumes everything again.
        seen = len(rec)
        out = ok(live, "resetOffsetByTime", "-g", "adm_g", "-t", "adm_t", "-s", "0")
        assert re.findall(r"^broker-a\s+\d\s+(\d+)$", out, re.M) == ["0"] * 4
        assert rec.wait_for(seen + N, 30), f"{len(rec) - seen} redelivered after the reset"

        with Producer("adm_late", live.namesrv_addr) as producer:
            producer.send(Message("adm_t", b"late"))
            out = ok(live, "producerConnection", "-g", "adm_late")
            assert "PYTHON" in out and len(out.splitlines()) == 2
    finally:
        consumer.shutdown()
    out = ok(live, "skipAccumulatedMessage", "-g", "adm_g", "-t", "adm_t")
    assert len(re.findall(r"^broker-a\s+\d\s+\d+$", out, re.M)) == 4
    assert "Diff Total: 0" in ok(live, "consumerProgress", "-g", "adm_g", "-t", "adm_t")
    code, out = admin(live, "consumerConnection", "-g", "adm_g")
    assert code == 1 and "not online" in out
    code, out = admin(live, "producerConnection", "-g", "nobody")
    assert code == 1 and "nobody" in out

    out = ok(live, "statsAll")
    row = re.search(r"^adm_t\s+adm_g\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)$", out, re.M)
    assert row, out
    assert int(row.group(1)) == 0 and int(row.group(4)) >= N + 1 and int(row.group(5)) >= 2 * N


def test_subscription_groups(live):
    mq = MessageQueue("adm_t", "broker-a", 0)
    assert "success" in ok(live, "updateSubGroup", "-g", "adm_off", "-s", "false", "-r", "3")
    with PullConsumer("adm_off", live.namesrv_addr) as consumer:
        consumer.fetch_subscribe_message_queues("adm_t")
        with pytest.raises(BrokerError, match="consume permission"):
            consumer.pull(mq)
        assert "success" in ok(live, "deleteSubGroup", "-g", "adm_off")
        assert consumer.pull(mq).msgs
    code, out = admin(live, "deleteSubGroup", "-g", "adm_off")
    assert code == 1 and "adm_off does not exist" in out


def test_namesrv_flag_before_or_after_and_env(live):
    env = dict(live.env)
    env.pop("NAMESRV_ADDR", None)
    for args in (["-n", live.namesrv_addr, "admin", "topicList"], ["admin", "-n", live.namesrv_addr, "topicList"],
                 ["admin", "topicList", "-n", live.namesrv_addr]):
        r = subprocess.run([sys.executable, "-m", "txmq.cli", *args], capture_output=True, text=True, env=env,
                           timeout=60)
        assert r.returncode == 0 and "adm_t" in r.stdout.split(), (args, r.stderr)
    r = subprocess.run([sys.executable, "-m", "txmq.cli", "admin", "topicList"], capture_output=True, text=True,
                       env=dict(env, NAMESRV_ADDR=live.namesrv_addr), timeout=60)
    assert r.returncode == 0 and "adm_t" in r.stdout.split(), r.stderr


@pytest.mark.parametrize("body", [
    {"groupName": "x" * 300},  # longer than a group name may be
    {"groupName": "bad name\n"},
    {"groupName": "adm_typed", "retryQueueNums": [1, 2]},
    {"groupName": "adm_typed", "consumeEnable": 1},
    {"groupName": "adm_typed", "retryMaxTimes": True},
])
def test_a_subscription_group_with_an_illegal_name_or_field_is_refused_and_not_stored(live, body):
    """Refused where it enters, as a topic's name is, instead of being journaled and listed."""
    with RawClient(live.procs[-1].addrs["broker"]) as raw:
        resp = raw.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body=orjson.dumps(body))
        assert resp.code != ResponseCode.SUCCESS and "bad request" in (resp.remark or ""), resp.remark
        listed = raw.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert body["groupName"] not in orjson.loads(listed.body)["subscriptionGroupTable"]


@pytest.mark.parametrize("perm", ["-1", "8", "16"])
def test_update_topic_with_a_permission_out_of_0_to_7_is_refused_and_creates_nothing(live, perm):
    """RocketMQ's client refuses such a perm before it asks a broker (``Validators.checkTopicConfig``): -1 would
    grant every bit, 8 and above name no permission."""
    topic = f"adm_perm_{perm.replace('-', 'm')}"
    code, out = admin(live, "updateTopic", "-t", topic, "-p", perm)
    assert code == 1 and f"topicPermission value: {perm} is invalid" in out, out
    with RawClient(live.procs[-1].addrs["broker"]) as raw:
        table = orjson.loads(raw.call(RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
    assert topic not in table


@pytest.mark.parametrize("command", ["updateTopic", "deleteTopic"])
def test_a_topic_named_with_the_system_prefix_is_refused(live, command):
    """``rmq_sys_`` names RocketMQ's system topics (``TopicValidator.isSystemTopic``): an operator may not create
    or delete one, as RocketMQ's broker refuses (``validateSystemTopicWhenUpdateTopic``)."""
    code, out = admin(live, command, "-t", "rmq_sys_mine")
    assert code == 1 and "rmq_sys_mine is a system topic" in out, out
    with RawClient(live.procs[-1].addrs["broker"]) as raw:
        table = orjson.loads(raw.call(RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
    assert "rmq_sys_mine" not in table


@pytest.mark.parametrize("command", [
    ("updateTopic", "-t", "adm_each"),
    ("updateBrokerConfig", "-k", "maxMessageSize", "-v", "1048576"),
    ("updateSubGroup", "-g", "adm_each_g"),
    ("updateTopicPerm", "-t", "adm_each", "-p", "4"),
    ("deleteTopic", "-t", "adm_each"),
])
def test_a_broker_that_does_not_answer_stops_no_other_and_is_named(cluster, command):
    """A hung broker (still routed: its connection stays open) fails its part after the request timeout; the
    brokers after it are still changed, and the output names which broker has not the change. A topic a broker
    may still hold stays in the name servers' routes (deleteTopic deletes it there only once every broker has)."""
    first, second = cluster.start_broker("broker-a"), cluster.start_broker("broker-b")
    ok(cluster, "updateTopic", "-t", "adm_each")
    os.kill(first.pid, signal.SIGSTOP)
    try:
        code, out = admin(cluster, *command)
        routed = ok(cluster, "topicList").split()
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert code == 1 and f"FAILED on broker-a {first.addrs['broker']}" in out, out
    assert "broker-b" in out or second.addrs["broker"] in out, out
    assert out.count("success") == 1, out
    assert "adm_each" in routed


def test_stats_and_progress_list_no_system_topic(live):
    """statsAll and consumerProgress list the topics of users, none the broker keeps for itself
    (``is_system_topic``: ``rmq_sys_wheel_timer`` as well as ``RMQ_SYS_TRANS_HALF_TOPIC``), even one a group
    subscribes to."""
    with RawClient(live.procs[-1].addrs["broker"]) as raw:
        heartbeat(raw, "adm_sys_g", RMQ_SYS_WHEEL_TIMER_TOPIC, "adm_t")
        progress = [line.split()[1] for line in ok(live, "consumerProgress").splitlines()[1:]]
    stats = [line.split()[0] for line in ok(live, "statsAll").splitlines()[1:]]
    assert "adm_t" in progress and "adm_t" in stats, (progress, stats)
    assert not [t for t in progress + stats if is_system_topic(t)], (progress, stats)
