"""SQL92 subscriptions over remoting against a real broker process: a push consumer and a pull consumer receive
exactly the matching messages of a mixed stream, and the broker's pull counters show that nothing else left it;
a bad expression is refused when subscribing, with RocketMQ's code and where; ``enablePropertyFilter=false``
refuses SQL92 and leaves tags working."""

from __future__ import annotations

import logging
import time

import orjson
import pytest

from tests.e2e.helpers import RawClient, Recorder, messages_out, wait_until
from txmq import Admin, Message, Producer, PullConsumer, PullStatus, PushConsumer
from txmq.client.consumer import ConsumeFromWhere
from txmq.client.instance import MessageQueue
from txmq.errors import BrokerError
from txmq.filter.sql import MAX_TOKENS
from txmq.launch import free_port
from txmq.remoting.codec import encode_command
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.store.message_store import MAX_FILTER_ENTRIES

SQL = "a > 5 AND TAGS IN ('x', 'y')"


def _mixed(producer: Producer, topic: str, n: int) -> list[bytes]:
    """``n`` messages with ``a`` 0..9 and tags x, y, z (every seventh without ``a``); the bodies SQL selects."""
    selected = []
    for i in range(n):
        tag = "xyz"[i % 3]
        props = {} if i % 7 == 0 else {"a": str(i % 10)}
        producer.send(Message(topic, f"{i}".encode(), tags=tag, properties=props))
        if props and int(props["a"]) > 5 and tag in "xy":
            selected.append(f"{i}".encode())
    return selected


def test_push_and_pull_consumers_receive_only_matching_messages(cluster):
    broker = cluster.start_broker(conf={"metricsExporterType": "PROM", "metricsPromExporterPort": free_port()})
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("sql_t", queue_nums=2)
    cluster.wait_route("sql_t")
    rec = Recorder()
    consumer = PushConsumer("g_sql", cluster.namesrv_addr,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe("sql_t", sql=SQL)
    consumer.register_listener(rec)
    consumer.start()
    try:
        with Producer("p_sql", cluster.namesrv_addr) as producer:
            selected = _mixed(producer, "sql_t", 90)
        assert rec.wait_for(len(selected), 20)
        assert not rec.wait_for(len(selected) + 1, 1.5)
        assert sorted(rec.bodies()) == sorted(selected)
        assert all(d.tags in ("x", "y") and int(d.properties["a"]) > 5 for d in rec.deliveries)
        metrics = broker.addrs["metrics"]
        assert wait_until(lambda: messages_out(metrics, "sql_t", "g_sql") == len(selected))
    finally:
        consumer.shutdown()
    with Admin(cluster.namesrv_addr) as admin:  # what the filter passed over counts as consumed: no lag
        assert admin.stats()["broker-a"]["consumerGroups"]["sql_t@g_sql"]["lag"] == 0

    with PullConsumer("g_sql_pull", cluster.namesrv_addr) as puller:
        got = []
        for mq in puller.fetch_subscribe_message_queues("sql_t"):
            offset = 0
            while True:
                r = puller.pull(mq, offset=offset, sql="a >= 8 AND TAGS = 'y'")
                got += r.msgs
                if r.next_begin_offset == offset or r.status == PullStatus.NO_NEW_MSG:
                    break
                offset = r.next_begin_offset
        nothing = puller.pull(MessageQueue("sql_t", "broker-a", 0), offset=0, sql="a > 100")
    assert sorted(m.body for m in got) == sorted(f"{i}".encode() for i in range(90)
                                                 if i % 7 and i % 10 >= 8 and i % 3 == 1)
    assert nothing.status == PullStatus.NO_MATCHED_MSG and not nothing.msgs
    assert messages_out(broker.addrs["metrics"], "sql_t", "g_sql_pull") == len(got)


def _heartbeat(group: str, topic: str, sql: str, *more: tuple[str, str]) -> bytes:
    """A heartbeat of ``group`` subscribing to ``topic`` with ``sql``, and to each further (topic, sql)."""
    subs = [{"topic": t, "subString": s, "expressionType": "SQL92", "tagsSet": [], "codeSet": [], "subVersion": 1}
            for t, s in [(topic, sql), *more]]
    return orjson.dumps({"clientID": "raw@1", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": subs}]})


def _pull(raw: RawClient, topic: str, sql: str):
    return raw.call(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "g_raw", "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": sql, "subVersion": "0",
        "expressionType": "SQL92"})


def test_bad_expression_is_refused_when_subscribing(cluster, caplog: pytest.LogCaptureFixture):
    broker = cluster.start_broker_with_topic("sql_bad")
    consumer = PushConsumer("g_bad", cluster.namesrv_addr)
    consumer.subscribe("sql_bad", sql="a > 5 AND\n b >")
    consumer.register_listener(Recorder())
    with caplog.at_level(logging.INFO, logger="txmq"), pytest.raises(BrokerError) as info:
        consumer.start()
    assert info.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert "line 2, column 5" in str(info.value)
    # checked before any heartbeat, as RocketMQ's checkClientInBroker: no heartbeat was sent to be refused
    assert not [r.getMessage() for r in caplog.records if "heartbeat" in r.getMessage()]
    with RawClient(broker.addrs["broker"]) as raw:
        beat = raw.call(RequestCode.HEART_BEAT, body=_heartbeat("g_raw", "sql_bad", "a = = 1"))
        assert beat.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "line 1, column 5" in beat.remark
        members = {"consumerGroup": "g_raw"}
        # nothing of the refused heartbeat was registered
        assert raw.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, members).code == ResponseCode.SYSTEM_ERROR
        pulled = _pull(raw, "sql_bad", "a IN (1)")
        assert pulled.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column 7" in pulled.remark
        assert raw.call(RequestCode.HEART_BEAT, body=_heartbeat("g_raw", "sql_bad", "a = 1")).code \
            == ResponseCode.SUCCESS
        assert raw.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, members).code == ResponseCode.SUCCESS


def test_an_expression_of_too_many_tokens_is_refused_when_subscribing(cluster):
    """An expression within the characters but of more than ``MAX_TOKENS`` tokens: refused, with where, when a
    consumer starts, in a heartbeat and in a pull, as an expression that does not parse is."""
    broker = cluster.start_broker_with_topic("sql_big")
    big = " OR ".join(["a > 1.0"] * (MAX_TOKENS // 4 + 1))  # 1,027 tokens; the 1,025th is at column 2,817
    consumer = PushConsumer("g_big", cluster.namesrv_addr)
    consumer.subscribe("sql_big", sql=big)
    consumer.register_listener(Recorder())
    with pytest.raises(BrokerError) as info:
        consumer.start()
    assert info.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert f"more than {MAX_TOKENS} tokens at line 1, column 2817" in str(info.value)
    with RawClient(broker.addrs["broker"]) as raw:
        beat = raw.call(RequestCode.HEART_BEAT, body=_heartbeat("g_raw", "sql_big", "a = 1", ("sql_big2", big)))
        assert beat.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column 2817" in beat.remark
        assert raw.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g_raw"}).code \
            == ResponseCode.SYSTEM_ERROR
        pulled = _pull(raw, "sql_big", big)
        assert pulled.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and f"more than {MAX_TOKENS}" in pulled.remark


def test_a_heartbeat_of_many_sql92_subscriptions_lets_other_connections_through(cluster):
    """A heartbeat naming 150 distinct expressions of the largest kind (a compile each, about 15 ms): the broker
    compiles one per step of its loop, so a request of another connection, sent while it works on them, is
    answered before the heartbeat is; the heartbeat then registers its group."""
    broker = cluster.start_broker_with_topic("sql_many")
    subs = [(f"sql_many_{i}", f"z{i} = 1 OR " + " OR ".join(["a > 1.0"] * (MAX_TOKENS // 4 - 2)))
            for i in range(150)]
    beat = RemotingCommand.request(RequestCode.HEART_BEAT, {}, body=_heartbeat("g_many", *subs[0], *subs[1:]))
    with RawClient(broker.addrs["broker"]) as busy, RawClient(broker.addrs["broker"]) as other:
        busy.sock.sendall(encode_command(beat))
        time.sleep(0.3)  # the heartbeat is in; its compiles take seconds
        members = other.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g_many"})
        assert members.code == ResponseCode.SYSTEM_ERROR  # not registered yet
        busy.sock.setblocking(False)
        with pytest.raises(BlockingIOError):  # nor answered
            busy.sock.recv(1)
        busy.sock.setblocking(True)
        busy.sock.settimeout(60)
        while (answer := busy.decoder.next_command()) is None or not answer.is_response:  # not the broker's notices
            if answer is None:
                busy.decoder.receive_data(busy.sock.recv(65536))
        assert answer.opaque == beat.opaque and answer.code == ResponseCode.SUCCESS
        assert other.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g_many"}).code \
            == ResponseCode.SUCCESS


def test_sql92_is_refused_when_property_filter_is_off(cluster):
    broker = cluster.start_broker_with_topic("sql_off", conf={"enablePropertyFilter": "false"})
    consumer = PushConsumer("g_off", cluster.namesrv_addr)
    consumer.subscribe("sql_off", sql="a > 5")
    consumer.register_listener(Recorder())
    with pytest.raises(BrokerError) as info:
        consumer.start()
    assert info.value.code == ResponseCode.SYSTEM_ERROR and "enablePropertyFilter=false" in str(info.value)
    with RawClient(broker.addrs["broker"]) as raw:
        pulled = _pull(raw, "sql_off", "a > 5")
    assert pulled.code == ResponseCode.SYSTEM_ERROR and "SQL92" in pulled.remark
    with Producer("p_off", cluster.namesrv_addr) as producer:
        producer.send(Message("sql_off", b"t", tags="T"))
    with PullConsumer("g_off_pull", cluster.namesrv_addr) as puller:
        (mq,) = puller.fetch_subscribe_message_queues("sql_off")
        assert [m.body for m in puller.pull(mq, "T", 0).msgs] == [b"t"]


def test_a_property_that_is_no_long_fails_an_integer_comparison(cluster):
    """``a > 5`` reads ``a`` as RocketMQ's ``Long.valueOf`` does: digits beyond a long (20 of them, or thousands,
    which Python's ``int`` refuses with a ValueError of its own) fail the comparison and the message is skipped;
    the pull answers the others."""
    cluster.start_broker_with_topic("sql_long")
    values = ["7", "99999999999999999999", "9" * 5000, "+8", "-9223372036854775808", "9223372036854775807"]
    with Producer("p_long", cluster.namesrv_addr) as producer:
        for value in values:
            producer.send(Message("sql_long", value.encode(), properties={"a": value}))
    with PullConsumer("g_long", cluster.namesrv_addr) as puller:
        (mq,) = puller.fetch_subscribe_message_queues("sql_long")
        pulled = puller.pull(mq, offset=0, sql="a > 5 OR a < 0")
    assert [m.body for m in pulled.msgs] == [b"7", b"+8", b"-9223372036854775808", b"9223372036854775807"]
    assert pulled.next_begin_offset == len(values)


def test_a_costly_filter_answers_a_pull_before_it_holds_the_broker_long(cluster):
    """An expression of the largest kind that costs about 0.2 ms a record (floats compared 256 times) over a
    backlog that it passes over: a pull answers after part of the 800 entries it may look at, with the offset it
    reached, rather than hold the broker's loop for all of them; pulling on from there finds the one message it
    selects, the last."""
    cluster.start_broker_with_topic("sql_cost")
    backlog = 900
    with Producer("p_cost", cluster.namesrv_addr) as producer:
        for _ in range(backlog // 100):
            producer.send_batch([Message("sql_cost", b"no", properties={"a": "0.5"}) for _ in range(100)])
        producer.send(Message("sql_cost", b"yes", properties={"a": "2"}))
    costly = " OR ".join(["a > 1.0"] * (MAX_TOKENS // 4))
    with PullConsumer("g_cost", cluster.namesrv_addr) as puller:
        (mq,) = puller.fetch_subscribe_message_queues("sql_cost")
        first = puller.pull(mq, offset=0, sql=costly)
        assert first.status == PullStatus.NO_MATCHED_MSG and 0 < first.next_begin_offset < MAX_FILTER_ENTRIES
        offset, got = first.next_begin_offset, []
        while not got:
            pulled = puller.pull(mq, offset=offset, sql=costly)
            assert pulled.next_begin_offset > offset
            offset, got = pulled.next_begin_offset, pulled.msgs
    assert [m.body for m in got] == [b"yes"] and offset == backlog + 1
