"""The send path's dead letters (``RetryService.to_dead_letters``): each dead letter is counted once stored, and the
log gets a line per group and kind of dead letter, not one per message (a consumer may send back with a negative
delay level at will, so one per message would let a client write the broker's log)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import orjson
import pytest

from txmq.broker.config import BrokerConfig
from txmq.broker.core.retry import RetryService
from txmq.broker.core.topics import TopicService
from txmq.broker.stats import BrokerStats
from txmq.broker.topic_config_manager import TopicConfigManager
from txmq.message import Message, MessageConst, MessageExt, encode_batch, properties_to_string
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import SendMessageRequestHeader
from txmq.remoting.transport import RemotingClient
from txmq.topic import PermName


def test_dead_letters_are_counted_each_and_logged_once_per_group(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    config = BrokerConfig()
    manager = TopicConfigManager(tmp_path, auto_create=True, default_queue_nums=4, delay_levels=18)
    stats = BrokerStats()
    retries = RetryService(None, TopicService(manager, config), stats, None, None,  # type: ignore[arg-type]
                           ("127.0.0.1", 10911), groups=None)  # type: ignore[arg-type]

    async def main() -> None:  # the dead-letter topic is created as on the broker's loop
        for i in range(200):
            while True:  # as the send path: taken again once the topic it created is durable
                msg = MessageExt("%RETRY%g", b"x", {MessageConst.RETRY_TOPIC: "orders"}, reconsume_times=i)
                retries.to_dead_letters(msg, "g")
                assert (msg.topic, msg.queue_id) == ("%DLQ%g", 0)
                if msg.topic not in manager.pending:
                    break
                await manager.durable(msg.topic)
            retries.count_dead_letter(msg, "g")  # as the send's answer counts it once stored

    with caplog.at_level(logging.INFO, "txmq.broker"):
        asyncio.run(main())
    assert stats.dlq == {("orders", "g"): 200}
    assert manager.get("%DLQ%g").perm == PermName.READ_WRITE
    lines = [r.getMessage() for r in caplog.records if "dead" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "orders" in lines[0] and "g" in lines[0]


def test_a_batch_to_a_retry_topic_is_refused_and_stores_nothing(tmp_path: Path) -> None:
    """The send path sends a message past its retries to the dead letters one message at a time
    (``SendService.route_retry``); a batch would skip that, so a batch to a ``%RETRY%`` topic is refused, as
    RocketMQ refuses it ("batch request does not support retry group"), before its topic is created."""
    from tests.broker.test_journal_off_loop import serving

    topic = "%RETRY%g"
    header = SendMessageRequestHeader(producer_group="p", topic=topic, default_topic="TBW102",
                                      default_topic_queue_nums=4, queue_id=0, sys_flag=0, born_timestamp=0, flag=0,
                                      properties="", reconsume_times=5, max_reconsume_times=1, batch=True)
    body = encode_batch([Message(topic, b"a"), Message(topic, b"b")])

    async def main() -> None:
        async with serving(tmp_path) as (broker, addr), RemotingClient() as client:
            reply = await client.invoke(addr, RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE,
                                                                      header.to_v2_ext(), body=body), 10)
            assert reply.code == ResponseCode.MESSAGE_ILLEGAL, reply.remark
            assert "batch" in (reply.remark or "") and topic in (reply.remark or "")
            assert topic not in broker.topic_config_manager.table
            assert "%DLQ%g" not in broker.topic_config_manager.table
            assert broker.store.commit_log.max_offset == 0

    asyncio.run(main())


def test_a_send_s_dead_letter_is_counted_once_stored_not_when_the_store_refuses_it(tmp_path: Path) -> None:
    """A consumer's own send to its retry topic past maxReconsumeTimes goes to the dead letters: counted
    (rocketmq_send_to_dlq_messages) once the store took it. One the store refuses (a body that fits
    maxMessageSize while its record does not) is answered as refused and not counted: nothing reached the
    dead letters."""
    from tests.broker.test_journal_off_loop import _send, serving

    async def main() -> None:
        async with serving(tmp_path) as (broker, addr), RemotingClient() as client:
            broker.store.config.max_message_size = 1000
            refused = await client.invoke(addr, _send("%RETRY%g", reconsume_times=1, body=b"x" * 1000), 10)
            assert refused.code == ResponseCode.MESSAGE_ILLEGAL, (refused.code, refused.remark)
            assert broker.store.get_max_offset_in_queue("%DLQ%g", 0) == 0
            assert broker.stats_manager.dlq == {}
            stored = await client.invoke(addr, _send("%RETRY%g", reconsume_times=1), 10)
            assert stored.code == ResponseCode.SUCCESS, stored.remark
            assert broker.store.get_max_offset_in_queue("%DLQ%g", 0) == 1
            assert broker.stats_manager.dlq == {("%RETRY%g", "g"): 1}

    asyncio.run(main())


def test_dead_letter_counters_are_bounded_for_made_up_origin_topics(tmp_path: Path) -> None:
    """A dead letter is counted under the topic it was first sent to, its ``RETRY_TOPIC``, which the sender sets at
    will: the counters (the ``rocketmq_send_to_dlq_messages`` label sets) are kept for at most
    ``consumerOffsetMaxEntries`` topics and groups, as the pull counters are; past that a dead letter is still
    stored. (Unbounded, sends to one retry topic under ever new origin names grew them without limit.)"""
    from tests.broker.test_journal_off_loop import _send, serving

    async def main() -> None:
        async with serving(tmp_path, consumer_offset_max_entries=2) as (broker, addr), RemotingClient() as client:
            for i in range(5):
                origin = properties_to_string({MessageConst.RETRY_TOPIC: f"made_up{i}"})
                sent = await client.invoke(addr, _send("%RETRY%g", reconsume_times=1, properties=origin), 10)
                assert sent.code == ResponseCode.SUCCESS, sent.remark
            assert broker.store.get_max_offset_in_queue("%DLQ%g", 0) == 5
            assert broker.stats_manager.dlq == {("made_up0", "g"): 1, ("made_up1", "g"): 1}

    asyncio.run(main())


@pytest.mark.parametrize("path", ["send-back", "send"])
@pytest.mark.parametrize(("retry_max_times", "stored_in"), [(1, "%DLQ%g"), (2, "%RETRY%g")])
def test_a_retry_without_max_reconsume_times_follows_the_group_s_retry_max_times(
        tmp_path: Path, path: str, retry_max_times: int, stored_in: str) -> None:
    """A send-back that names no maxReconsumeTimes (the C++ client's, RocketMQ's clients before 3.4.9), and a send
    straight to ``%RETRY%g`` that names none (a client's fallback when its send-back fails), go to the dead letters
    after the group's ``retryMaxTimes`` (``updateSubGroup -r``), as RocketMQ's broker decides (``consumerSendMsgBack``,
    ``handleRetryAndDLQ``); the broker used 16 whatever the group said."""
    from tests.broker.test_journal_off_loop import serving

    async def main() -> None:
        async with serving(tmp_path) as (broker, addr), RemotingClient() as client:
            group = {"groupName": "g", "retryMaxTimes": retry_max_times}
            changed = await client.invoke(addr, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(group)), 10)
            assert changed.code == ResponseCode.SUCCESS, changed.remark
            # a message that came back through the retry topic once (reconsumeTimes 1): its record at offset 0
            header = SendMessageRequestHeader(
                producer_group="p", topic="%RETRY%g", default_topic="TBW102", default_topic_queue_nums=4, queue_id=0,
                sys_flag=0, born_timestamp=0, flag=0, reconsume_times=1,
                max_reconsume_times=16 if path == "send-back" else None,
                properties=properties_to_string({MessageConst.RETRY_TOPIC: "orders"}))
            stored = await client.invoke(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_v2_ext(),
                                                                       body=b"x"), 10)
            assert stored.code == ResponseCode.SUCCESS, stored.remark
            if path == "send-back":
                sent_back = await client.invoke(addr, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, {
                    "offset": "0", "group": "g", "delayLevel": "0"}), 10)
                assert sent_back.code == ResponseCode.SUCCESS, sent_back.remark
            assert broker.stats_manager.dlq == ({("orders", "g"): 1} if stored_in == "%DLQ%g" else {})
            assert ("%DLQ%g" in broker.topic_config_manager.table) == (stored_in == "%DLQ%g")

    asyncio.run(main())
