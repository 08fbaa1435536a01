"""A broker whose wall clock is before 1970 (a board without a battery-backed clock that started at the epoch and
was set back past it, a clock stepped back across it): its records carry negative store timestamps, and a search
or reset of offsets by such a time finds the first message stored at or after it, as for any other time. Only
-1 asks for the end (RocketMQ's rule: ``skipAccumulatedMessage``)."""

from __future__ import annotations

from tests.clock.conftest import Faked, utc
from txmq import Message, Producer, PullConsumer
from txmq.admin.client import MQAdminExt

TOPIC = "epoch"
GROUP = "g_epoch"


def test_offsets_reset_to_a_time_before_1970_find_the_message_stored_then(faked: Faked) -> None:
    faked.clock.at(utc("1969-12-31T23:00:00"), settle=False)  # every process starts before 1970
    faked.start({}, {TOPIC: 1})
    with Producer("p_epoch", faked.namesrv) as producer:
        producer.send(Message(TOPIC, b"before"))
        between = round(faked.clock.now() * 1000) + 30_000  # a time between the two sends, before 1970
        faked.clock.step(60)
        producer.send(Message(TOPIC, b"after"))
    assert between < 0
    with PullConsumer(GROUP, faked.namesrv) as pc:
        [mq] = pc.fetch_subscribe_message_queues(TOPIC)
        stamps = [m.store_timestamp for m in pc.pull(mq, "*", 0, 32).msgs]
        assert stamps[0] < between < stamps[1] < 0, (stamps, between)
        assert pc.search_offset(mq, between) == 1
    with MQAdminExt(faked.namesrv) as admin:
        assert [q.values for q in admin.reset_offset(GROUP, TOPIC, between)] == [1]
        assert [q.values for q in admin.reset_offset(GROUP, TOPIC, -1)] == [2]  # -1: the end
    assert not faked.broker_errors()
