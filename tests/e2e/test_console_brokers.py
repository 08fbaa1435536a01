"""The console over two brokers when one of them hangs (SIGSTOP: its connections stay open, it answers nothing)
or cannot be reached (its port refuses): every page gathering from the brokers shows what the other one gives and names
the one that did not answer, its address and why, after one request timeout at most, however many requests the
page makes; a page about the hung broker alone says so with 504. A broker whose port refuses is named so."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.console_http import Answer, Http
from tests.e2e.helpers import RawClient, Recorder, push_consumer
from txmq import Message, Producer
from txmq.admin import MQAdminExt
from txmq.launch import ServerProcess, free_port
from txmq.remoting.codes import RequestCode, ResponseCode

TOPIC, GROUP, N = "con_t", "con_g", 8
TIMEOUT_S = 10.0  # the admin's request timeout, the bound on each broker
PAGES = ("/", "/topics", f"/topics/{TOPIC}", "/groups", f"/groups/{GROUP}", "/transactions", "/api/stats")


@dataclass
class Two:
    cluster: Cluster
    a: ServerProcess
    b: ServerProcess
    console: Http
    on_a: str  # the offset message id of a message stored on broker-a


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Two]:
    cluster = Cluster(Path(tmp_path_factory.mktemp("console-brokers")))
    try:
        cluster.start_namesrv()
        a, b = (cluster.start_broker(name, {"grpcPort": -1}) for name in ("broker-a", "broker-b"))
        console = cluster._proc("console", ["console", "-n", cluster.namesrv_addr, "--port", str(free_port())])
        console.start()
        with MQAdminExt(cluster.namesrv_addr) as admin:
            admin.create_topic(TOPIC, 2)
        cluster.wait_route(TOPIC, brokers=2)
        with Producer("con_p", cluster.namesrv_addr) as producer:
            sent = [producer.send(Message(TOPIC, f"body {i}".encode())) for i in range(N)]
        assert {r.message_queue.broker_name for r in sent} == {"broker-a", "broker-b"}
        rec = Recorder()
        consumer = push_consumer(cluster.namesrv_addr, GROUP, TOPIC, rec, persist_interval_s=0.2)
        try:
            assert rec.wait_for(N)
        finally:
            consumer.shutdown()
        on_a = next(r.offset_msg_id for r in sent if r.message_queue.broker_name == "broker-a")
        yield Two(cluster, a, b, Http(console.addrs["console"]), on_a)
    finally:
        cluster.close()


@contextlib.contextmanager
def hung(proc: ServerProcess) -> Iterator[None]:
    """``proc`` stopped (SIGSTOP) for the block, continued after whatever happens in it."""
    assert proc.pid is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def fetch_all(http: Http, paths: tuple[str, ...]) -> dict[str, tuple[Answer, float]]:
    """Every page asked at once, as a browser's tabs and the live charts do: each answer and how long it took."""
    def one(path: str) -> tuple[Answer, float]:
        start = time.monotonic()
        answer = http.get(path)
        return answer, time.monotonic() - start
    with ThreadPoolExecutor(len(paths)) as pool:
        return dict(zip(paths, pool.map(one, paths), strict=True))


def test_a_missing_topic_is_not_found(two):
    answer = two.console.get("/topics/con_no_such_topic")
    assert answer.status == 404, (answer.status, answer.text[:500])
    assert "con_no_such_topic" in answer.text


def test_a_hung_broker_is_named_and_the_other_shown(two):
    addr_a = two.a.addrs["broker"]
    with hung(two.a):
        answers = fetch_all(two.console, PAGES)
    for path, (answer, took) in answers.items():
        assert answer.status == 200, (path, answer.status, answer.text[:500])
        assert took < TIMEOUT_S + 5, (path, took)  # one timeout, whatever the page asks of broker-a
        assert "broker-a" in answer.text and addr_a in answer.text and "timeout" in answer.text, (path, answer.text)
    topics = answers["/topics"][0].text
    assert re.search(rf">{TOPIC}</a></td><td>2</td>", topics), topics  # broker-b's two queues
    detail = answers[f"/topics/{TOPIC}"][0].text
    assert detail.count("<td>broker-b</td>") == 2 and "<td>broker-a</td>" not in detail, detail
    assert f">{GROUP}</a>" in detail and f">{GROUP}</a>" in answers["/groups"][0].text
    assert "<td>broker-b</td>" in answers[f"/groups/{GROUP}"][0].text
    stats = json.loads(answers["/api/stats"][0].text)
    assert stats["unanswered"] == [{"broker": "broker-a", "addr": addr_a, "why": stats["unanswered"][0]["why"]}]
    assert stats["unanswered"][0]["why"].startswith("timeout")


def test_a_page_about_the_hung_broker_answers_504(two):
    with hung(two.a):
        answer = two.console.get(f"/messages/{two.on_a}")
    assert answer.status == 504, (answer.status, answer.text[:500])
    assert two.a.addrs["broker"] in answer.text


def test_a_broker_whose_port_refuses_is_named_refused(two):
    """A broker the name server holds (registered on a connection kept open) at an address where nothing
    listens. Last: the name server may hold it after the test."""
    gone = f"127.0.0.1:{free_port()}"
    registration = {"clusterName": "DefaultCluster", "brokerAddr": gone, "brokerName": "broker-c", "brokerId": "0"}
    table = {TOPIC: {"topicName": TOPIC, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}}
    with RawClient(two.cluster.namesrv_addr) as raw:
        body = orjson.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table}})
        assert raw.call(RequestCode.REGISTER_BROKER, registration, body).code == ResponseCode.SUCCESS
        answers = fetch_all(two.console, PAGES)
    for path, (answer, _) in answers.items():
        assert answer.status == 200, (path, answer.status, answer.text[:500])
        assert "broker-c" in answer.text and gone in answer.text and "refused" in answer.text, (path, answer.text)
    detail = answers[f"/topics/{TOPIC}"][0].text
    assert "<td>broker-a</td>" in detail and "<td>broker-b</td>" in detail, detail
