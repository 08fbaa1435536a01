"""A push consumer whose group's master stopped, its slave with ``slaveReadEnable=false``: the slave answers every
pull PULL_RETRY_IMMEDIATELY and suggests the master, which the route no longer offers. The consumer backs off
``pull_delay_when_exception_s`` between those pulls (RocketMQ's pullTimeDelayMillsWhenException) instead of
pulling the slave again at once, forever; counted by the slave itself (its ``rocketmq_rpc_latency`` series)."""

from __future__ import annotations

import re
import time
import urllib.request

import orjson

from tests.e2e.ha_group import Group, ha_status, request
from tests.e2e.helpers import Recorder, push_consumer, wait_until
from txmq import Admin, Message, Producer
from txmq.launch import free_port
from txmq.remoting.codes import RequestCode, ResponseCode

WINDOW_S = 4.0
DELAY_S = 1.0


def pulls_answered(metrics_addr: str, response_code: int) -> int:
    """How many pulls the broker answered ``response_code``, by its own Prometheus endpoint."""
    text = urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=5).read().decode()
    total = 0
    for labels, value in re.findall(r"^rocketmq_rpc_latency_count{(.*)} (\S+)$", text, re.M):
        if {f'request_code="{RequestCode.PULL_MESSAGE}"', f'response_code="{response_code}"'} <= set(labels.split(",")):
            total += int(float(value))
    return total


def topics(addr: str) -> set[str]:
    return set(orjson.loads(request(addr, RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"])


def test_consumer_backs_off_a_slave_that_sends_it_to_a_stopped_master(cluster):
    group = Group(cluster)  # slaveReadEnable=false, the default
    master = group.member(0, "ASYNC_MASTER").start()
    slave = group.member(1, "SLAVE", {"metricsExporterType": "PROM", "metricsPromExporterPort": free_port()}).start()
    metrics = slave.addrs["metrics"]
    assert wait_until(lambda: len(ha_status(group.addr(0))["slaves"]) == 1, 15)
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("back-off", queue_nums=2)
    cluster.wait_route("back-off")

    recorder = Recorder()
    consumer = push_consumer(cluster.namesrv_addr, "g-back-off", "back-off", recorder,
                             pull_delay_when_exception_s=DELAY_S)
    try:
        with Producer("p-back-off", cluster.namesrv_addr) as producer:
            for i in range(10):
                producer.send(Message("back-off", f"m{i}".encode()))
        assert recorder.wait_for(10, 20)
        queues = len(consumer.queues)  # the topic's and the group's retry topic's
        wanted = {q.topic for q in list(consumer.queues)}
        assert wait_until(lambda: wanted <= topics(group.addr(1)), 15)  # SlaveSynchronize copied them
        master.stop()  # clean: it unregisters, and the route offers only the slave
        retried = ResponseCode.PULL_RETRY_IMMEDIATELY
        assert wait_until(lambda: pulls_answered(metrics, retried) > 0, 15)  # the consumer reached the slave
        before = pulls_answered(metrics, retried)
        time.sleep(WINDOW_S)
        during = pulls_answered(metrics, retried) - before
        # At most one pull per queue per delay, and one more each at the window's edges; without the back-off the
        # slave answered thousands.
        assert 0 < during <= queues * (WINDOW_S / DELAY_S + 1), (during, queues)
    finally:
        consumer.shutdown()
    assert len(recorder) == 10
