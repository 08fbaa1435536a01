"""The official RocketMQ 5 clients (Python 5.1.2 and Node.js 1.0.8) against txmq's gRPC endpoint: each test
runs once per client, each step in a subprocess driver."""

from __future__ import annotations

import time

from tests.grpc.grpc_helpers import bodies


def test_normal_send_and_simple_receive(client, topic):
    sent = client(cmd="send", topic=topic, count=5, tag="TagA", keys=["k1"], props={"color": "red"})
    assert len(sent) == 5
    got = client(cmd="simple", topic=topic, group=f"{topic}_g", expect=5, wait=10)
    received = [e for e in got if e["event"] == "received"]
    assert sorted(e["body"] for e in received) == sorted(f"{client_body(client)}-{i}" for i in range(5))
    assert {e["id"] for e in received} == {e["id"] for e in sent}
    for e in received:
        assert e["tag"] == "TagA"
        assert e["keys"] == ["k1"]
        assert e["props"] == {"color": "red"}


def client_body(client) -> str:
    return "node" if "driver.js" in client.argv[-1] else "py"


def test_tag_filter(client, topic):
    client(cmd="send", topic=topic, count=2, tag="keep", body="keep")
    client(cmd="send", topic=topic, count=2, tag="drop", body="drop")
    got = client(cmd="simple", topic=topic, group=f"{topic}_g", filter="keep", expect=2, wait=6)
    assert sorted(bodies(got)) == ["keep-0", "keep-1"]


def test_transaction_commit_and_rollback(client, topic):
    client(cmd="tx", topic=topic, mode="commit", body="committed")
    client(cmd="tx", topic=topic, mode="rollback", body="rolledback")
    got = client(cmd="simple", topic=topic, group=f"{topic}_g", expect=2, wait=3)
    assert bodies(got) == ["committed-0"]


def test_orphaned_transaction_resolved_by_checker(client, topic):
    """No decision from the producer: the broker pushes RecoverOrphanedTransactionCommand on its Telemetry stream;
    the client's TransactionChecker answers COMMIT with an EndTransaction from SOURCE_SERVER_CHECK."""
    events = client(cmd="tx", topic=topic, mode="none", check_answer="commit", body="orphan", wait_check=20)
    sent = next(e for e in events if e["event"] == "sent")
    checked = [e for e in events if e["event"] == "checked"]
    assert checked and checked[0]["id"] == sent["id"] and checked[0]["body"] == "orphan-0"
    got = client(cmd="simple", topic=topic, group=f"{topic}_g", expect=1, wait=10)
    assert bodies(got) == ["orphan-0"]


def test_orphaned_transaction_rolled_back_by_checker(rmq5_py, topic):
    events = rmq5_py(cmd="tx", topic=topic, mode="none", check_answer="rollback", body="orphan", wait_check=20)
    assert [e for e in events if e["event"] == "checked"]
    got = rmq5_py(cmd="simple", topic=topic, group=f"{topic}_g", expect=1, wait=3)
    assert bodies(got) == []


def test_fifo_order_per_message_group(client, topic):
    a = client.start(cmd="send", topic=topic, count=8, message_group="A", body="A")
    b = client.start(cmd="send", topic=topic, count=8, message_group="B", body="B")
    client.finish(a)
    client.finish(b)
    got = client(cmd="simple", topic=topic, group=f"{topic}_g", expect=16, wait=15, batch=4)
    received = [e for e in got if e["event"] == "received"]
    assert len(received) == 16
    for g in "AB":
        seq = [e["body"] for e in received if e["body"].startswith(g)]
        assert seq == [f"{g}-{i}" for i in range(8)]
        assert {e["group"] for e in received if e["body"].startswith(g)} == {g}


def test_delay_message(client, topic):
    before_ms = time.time() * 1000
    client(cmd="send", topic=topic, count=1, delay_ms=1000, body="later")
    got = client(cmd="simple", topic=topic, group=f"{topic}_g", expect=1, wait=10)
    received = [e for e in got if e["event"] == "received"]
    assert [e["body"] for e in received] == ["later-0"]
    due_ms = received[0]["delivery"]  # the wall-clock time the sender set: 1 s after it made the message
    assert before_ms + 1000 <= due_ms <= time.time() * 1000
    # a timer message (docs/timers.md): never early, at most the precision (1 s) + 1 s late
    assert due_ms / 1000 <= received[0]["t"] <= due_ms / 1000 + 1.0 + 1.0


def test_simple_consumer_invisible_duration(client, topic):
    """Receive (invisible 2 s), change the invisible duration to 4 s, do not ack: the message comes back after
    the changed duration, with attempt 2; ack it: it never comes back."""
    client(cmd="send", topic=topic, count=1, body="inv")
    got = client(cmd="simple", topic=topic, group=f"{topic}_g", lifecycle=True, invisible=2, extend=4, quiet=3,
                 wait=15)
    kinds = [e["event"] for e in got]
    assert kinds[:4] == ["received", "extended", "redelivered", "acked"], got
    first, again = got[0], got[2]
    assert again["id"] == first["id"]
    # the changed duration (4 s), not the first one (2 s): monotonic, from before the change was asked
    assert again["since_asked"] >= 3.9
    if "attempt" in again:
        assert again["attempt"] == 2
    assert "extra" not in kinds
    assert bodies(client(cmd="simple", topic=topic, group=f"{topic}_g", expect=1, wait=2)) == []


def test_simple_consumer_redelivers_unacked(rmq5_py, topic):
    rmq5_py(cmd="send", topic=topic, count=3, body="redo")
    first = rmq5_py(cmd="simple", topic=topic, group=f"{topic}_g", expect=3, wait=10, ack=False, invisible=2)
    assert sorted(bodies(first)) == ["redo-0", "redo-1", "redo-2"]
    again = rmq5_py(cmd="simple", topic=topic, group=f"{topic}_g", expect=3, wait=10, invisible=2)
    received = [e for e in again if e["event"] == "received"]
    assert sorted(e["body"] for e in received) == ["redo-0", "redo-1", "redo-2"]
    assert all(e["attempt"] == 2 for e in received)
    assert bodies(rmq5_py(cmd="simple", topic=topic, group=f"{topic}_g", expect=1, wait=3)) == []


def test_push_consumer_retries_failed_messages(client, topic):
    client(cmd="send", topic=topic, count=2, body="push")
    got = client(cmd="push", topic=topic, group=f"{topic}_g", expect=2, fail_first=True, wait=30)
    assert "timeout" not in [e["event"] for e in got]
    seen = bodies(got)
    assert sorted(seen) == ["push-0", "push-0", "push-1", "push-1"]
