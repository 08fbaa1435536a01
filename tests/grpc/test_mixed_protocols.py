"""One broker, two protocols: RocketMQ 4.x remoting (txmq's own client) on one side, an official 5.x gRPC client on
the other."""

from __future__ import annotations

import threading

from tests.grpc.grpc_helpers import bodies
from txmq import ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer, TransactionProducer


def test_remoting_producer_to_grpc_consumer(server, rmq5_py, topic):
    with Producer(f"{topic}_pg", namesrv=server.namesrv) as p:
        for i in range(3):
            p.send(Message(topic, f"remoting-{i}".encode(), tags="T", keys="K1", properties={"p": "v"}))
    got = rmq5_py(cmd="simple", topic=topic, group=f"{topic}_g", expect=3, wait=10)
    received = [e for e in got if e["event"] == "received"]
    assert sorted(e["body"] for e in received) == ["remoting-0", "remoting-1", "remoting-2"]
    assert all(e["tag"] == "T" and e["keys"] == ["K1"] and e["props"] == {"p": "v"} for e in received)


def test_remoting_transaction_to_grpc_consumer(server, rmq5_node, topic):
    from txmq import LocalTransactionState, TransactionListener

    class Listener(TransactionListener):
        def execute_local_transaction(self, msg, arg):
            return LocalTransactionState.COMMIT if arg else LocalTransactionState.ROLLBACK

        def check_local_transaction(self, msg):
            return LocalTransactionState.ROLLBACK

    p = TransactionProducer(f"{topic}_tx", Listener(), namesrv=server.namesrv)
    p.start()
    try:
        p.send_message_in_transaction(Message(topic, b"yes"), True)
        p.send_message_in_transaction(Message(topic, b"no"), False)
    finally:
        p.shutdown()
    got = rmq5_node(cmd="simple", topic=topic, group=f"{topic}_g", expect=2, wait=3)
    assert bodies(got) == ["yes"]


def test_grpc_producer_to_remoting_consumer(server, rmq5_node, topic):
    rmq5_node(cmd="send", topic=topic, count=3, tag="N", body="grpc")
    rmq5_node(cmd="tx", topic=topic, mode="commit", body="grpctx")
    seen: list[Message] = []
    done = threading.Event()

    def listener(msgs):
        seen.extend(msgs)
        if len(seen) >= 4:
            done.set()
        return ConsumeStatus.SUCCESS

    c = PushConsumer(f"{topic}_rg", namesrv=server.namesrv,
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.subscribe(topic, "*")
    c.register_listener(listener)
    c.start()
    try:
        assert done.wait(20), [m.body for m in seen]
    finally:
        c.shutdown()
    assert sorted(m.body for m in seen) == [b"grpc-0", b"grpc-1", b"grpc-2", b"grpctx-0"]
    assert {m.tags for m in seen if m.body.startswith(b"grpc-")} == {"N"}


def test_transaction_begun_over_grpc_is_checked_over_remoting(server, rmq5_py, topic):
    """A 5.x producer leaves a transaction undecided; the group (the topic, for 5.x clients) also has a remoting
    TransactionProducer connected, and the broker checks the transaction over remoting."""
    from txmq import LocalTransactionState

    checked: list[bytes] = []

    class Listener:
        def execute_local_transaction(self, msg, arg):
            return LocalTransactionState.UNKNOWN

        def check_local_transaction(self, msg):
            checked.append(msg.body)
            return LocalTransactionState.COMMIT

    p = TransactionProducer(topic, Listener(), namesrv=server.namesrv).start()
    try:
        events = rmq5_py(cmd="tx", topic=topic, mode="none", check_answer="rollback", body="cross", wait_check=3)
        assert not [e for e in events if e["event"] == "checked"]  # the 5.x checker (rollback) was never asked
        got = rmq5_py(cmd="simple", topic=topic, group=f"{topic}_g", expect=1, wait=10)
    finally:
        p.shutdown()
    assert checked and set(checked) == {b"cross-0"}
    assert bodies(got) == ["cross-0"]


def test_transaction_begun_over_remoting_is_checked_over_grpc(server, rmq5_py, topic):
    """The reverse: a remoting producer of the group leaves a transaction undecided; the group's 5.x producer
    gets RecoverOrphanedTransactionCommand for it and commits it."""
    from txmq import LocalTransactionState

    class Undecided:
        def execute_local_transaction(self, msg, arg):
            return LocalTransactionState.UNKNOWN

        def check_local_transaction(self, msg):
            return LocalTransactionState.UNKNOWN

    p = TransactionProducer(topic, Undecided(), namesrv=server.namesrv).start()
    try:
        p.send_message_in_transaction(Message(topic, b"rem-0"))
    finally:
        p.shutdown()
    events = rmq5_py(cmd="tx", topic=topic, mode="none", check_answer="commit", body="own", wait_check=20)
    assert "rem-0" in [e["body"] for e in events if e["event"] == "checked"]
    got = rmq5_py(cmd="simple", topic=topic, group=f"{topic}_g", expect=2, wait=8)
    assert "rem-0" in bodies(got)
