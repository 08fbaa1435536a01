"""Timer messages and recall judged by the official RocketMQ 5 Python client: ``delivery_timestamp`` at +3 s, +70 s
and +10 days (the last accepted, listed by the broker, not delivered during the test), each delivered within the
precision (1 s) + 1 s of its time and never before; ``recall_message``. The official clients refuse a delivery
time on a transactional message themselves: transactional timers are tested over remoting
(tests/e2e/test_timers.py)."""

from __future__ import annotations

import time

from tests.grpc.grpc_helpers import bodies
from txmq.admin.client import MQAdminExt

SLACK_S = 1.0 + 1.0  # timerPrecisionMs (the server's default, 1 s) + 1 s


def _timer_count(server, expect: int) -> int:
    """The broker's scheduled timers (brokerStatus' ``timerCount``), once it is ``expect`` or after 3 s: a send
    is answered when stored, its timer indexed just after."""
    deadline = time.monotonic() + 3
    with MQAdminExt(server.namesrv) as admin:
        while True:
            count = int(admin.runtime_info(server.addrs["broker"])["timerCount"])
            if count == expect or time.monotonic() > deadline:
                return count
            time.sleep(0.1)


def test_delivery_timestamps(rmq5_py, server, topic):
    before = _timer_count(server, 0)
    due = {}
    for body, ahead_ms in (("t10d", 10 * 86_400_000), ("t70", 70_000), ("t3", 3_000)):
        due[f"{body}-0"] = at = int(time.time() * 1000) + ahead_ms
        sent = rmq5_py(cmd="send", topic=topic, body=body, deliver_at_ms=at)
        assert sent[0]["recall_handle"], "a timer message's receipt carries a recall handle"
        if body == "t70":  # listed by the broker (brokerStatus' timerCount), before the +3 s one is sent
            assert _timer_count(server, before + 2) == before + 2
    got = rmq5_py(cmd="simple", topic=topic, group=f"{topic}_g", expect=2, wait=85, timeout=120)
    received = {e["body"]: e for e in got if e["event"] == "received"}
    assert sorted(received) == ["t3-0", "t70-0"]
    for body, e in received.items():
        assert e["delivery"] == due[body]
        assert due[body] / 1000 <= e["t"] <= due[body] / 1000 + SLACK_S, (body, e["t"] - due[body] / 1000)
    assert _timer_count(server, before + 1) == before + 1  # the 10-day one still waits


def test_recall_message(rmq5_py, topic):
    now = int(time.time() * 1000)
    keep = rmq5_py(cmd="send", topic=topic, body="keep", deliver_at_ms=now + 3_000)[0]
    drop = rmq5_py(cmd="send", topic=topic, body="drop", deliver_at_ms=now + 3_000)[0]
    recalled = rmq5_py(cmd="recall", topic=topic, handle=drop["recall_handle"])
    assert recalled == [{"event": "recalled", "id": drop["id"]}]
    again = rmq5_py(cmd="recall", topic=topic, handle=drop["recall_handle"])
    assert again[0]["event"] == "refused" and "not scheduled" in again[0]["error"]
    got = rmq5_py(cmd="simple", topic=topic, group=f"{topic}_g", expect=2, wait=8)
    assert bodies(got) == ["keep-0"]
    late = rmq5_py(cmd="recall", topic=topic, handle=keep["recall_handle"])  # delivered already
    assert late[0]["event"] == "refused" and "not scheduled" in late[0]["error"]
