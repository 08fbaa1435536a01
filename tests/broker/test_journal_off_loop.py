"""A topic a client's request creates is made durable off the broker's event loop (``ConfigJournal.append_soon``):
an fsync slowed by other processes' disk I/O once held every connection for seconds (a gRPC client's heartbeat
deadline was missed). The request that created it, and any send to it, is answered once it is durable; changes
of one table reach the journal in the order they were made, and one whose append fails is undone."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from tests.acl.conftest import ADMIN, PLAIN_ACL
from txmq.acl.signer import AclClientRPCHook, SessionCredentials
from txmq.broker import config_journal
from txmq.broker.config import BrokerConfig
from txmq.broker.config_journal import ConfigJournal
from txmq.broker.consumer_offset_manager import ConsumerOffsetManager
from txmq.broker.controller import BrokerController
from txmq.broker.core import topics
from txmq.broker.subscription_group_manager import SubscriptionGroupConfig, SubscriptionGroupManager
from txmq.broker.topic_config_manager import TopicConfigManager
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub
from txmq.message import decode_offset_msg_id
from txmq.ports import free_port
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import PullMessageRequestHeader, SendMessageRequestHeader
from txmq.remoting.transport import RemotingClient
from txmq.store import StoreConfig
from txmq.topic import PermName, TopicConfig


class SlowFsync:
    """An fsync that waits until ``release`` (at most ``hold`` seconds), as one behind other processes' I/O."""

    def __init__(self, hold: float) -> None:
        self.hold = hold
        self.entered = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()

    def __call__(self, fd: int) -> None:
        self.entered.set()
        self.release.wait(self.hold)
        os.fdatasync(fd)
        self.finished.set()


class SlowOs:
    """``os`` as the journal module sees it, with another ``fdatasync``."""

    def __init__(self, fdatasync: Callable[[int], None]) -> None:
        self.fdatasync = fdatasync

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)


@asynccontextmanager
async def serving(tmp_path: Path, slow: SlowFsync | None = None, grpc_port: int = -1,
                  store: dict[str, Any] | None = None, **config: Any) -> AsyncIterator[tuple[BrokerController, str]]:
    """A broker on a free port of 127.0.0.1 (gRPC off unless ``grpc_port``; ``store``: StoreConfig fields) and its
    address; a slow fsync is released before the broker stops, so the stop never waits out its hold."""
    port = free_port()
    store_config = StoreConfig(store_path_root_dir=str(tmp_path / "store"), **(store or {}))
    broker = BrokerController(BrokerConfig(store=store_config, listen_port=port, grpc_port=grpc_port, **config))
    await broker.start()
    try:
        yield broker, f"127.0.0.1:{port}"
    finally:
        if slow is not None:
            slow.release.set()
        await broker.shutdown()


@asynccontextmanager
async def serving_grpc(tmp_path: Path, slow: SlowFsync | None = None, **config: Any) -> AsyncIterator[
        tuple[BrokerController, str, RemotingClient, MessagingServiceStub]]:
    """``serving`` with its gRPC endpoint on: the broker, its remoting address, a remoting client and a gRPC stub."""
    grpc_port = free_port()
    async with (serving(tmp_path, slow, grpc_port, **config) as (broker, addr), RemotingClient() as client,
                grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel):
        yield broker, addr, client, MessagingServiceStub(channel)


def _send(topic: str, reconsume_times: int = 0, body: bytes = b"x", properties: str = "") -> RemotingCommand:
    header = SendMessageRequestHeader(producer_group="p", topic=topic, default_topic="TBW102",
                                      default_topic_queue_nums=4, queue_id=0, sys_flag=0, born_timestamp=0, flag=0,
                                      properties=properties, reconsume_times=reconsume_times, max_reconsume_times=1)
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_v2_ext(), body=body)


def test_another_connection_is_answered_while_a_created_topic_s_fsync_waits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slow = SlowFsync(hold=3.0)

    async def main() -> None:
        async with serving(tmp_path, slow) as (broker, addr):
            await broker.topic_config_manager.update(TopicConfig("Existing", 1, 1))
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            async with RemotingClient() as creator, RemotingClient() as other:
                creating = asyncio.ensure_future(creator.invoke(addr, _send("Fresh"), 30))
                assert await asyncio.to_thread(slow.entered.wait, 10)
                again = asyncio.ensure_future(creator.invoke(addr, _send("Fresh"), 30))
                answered = await other.invoke(addr, _send("Existing"), 10)
                assert not slow.finished.is_set(), "the other connection waited for the fsync"
                assert answered.code == ResponseCode.SUCCESS, answered.remark
                await asyncio.sleep(0.2)
                assert not creating.done() and not again.done()  # neither answered before the topic is durable
                slow.release.set()
                for reply in (await creating, await again):
                    assert reply.code == ResponseCode.SUCCESS, reply.remark
                assert "Fresh" not in broker.topic_config_manager.pending

    asyncio.run(main())
    monkeypatch.undo()
    reopened = TopicConfigManager(tmp_path / "store", auto_create=True, default_queue_nums=4, delay_levels=18)
    assert "Fresh" in reopened.table


def test_two_changes_of_one_topic_reach_the_journal_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A topic a send creates, its fsync slow, then an operator's update of it: the update is done once the
    creation and it are durable, appended after the creation, so the reopened table holds the update."""
    slow = SlowFsync(hold=10.0)
    manager = TopicConfigManager(tmp_path, auto_create=True, default_queue_nums=8, delay_levels=18)
    monkeypatch.setattr(config_journal, "os", SlowOs(slow))

    async def main() -> None:
        assert manager.create_in_send("T", "TBW102", 8) is not None
        created = manager.pending["T"]
        threading.Timer(0.3, slow.release.set).start()
        await manager.update(TopicConfig("T", 2, 2))
        assert slow.release.is_set() and created.done()  # it waited for the creation's record
        assert "T" not in manager.pending

    asyncio.run(main())
    assert manager.table["T"].read_queue_nums == 2
    reopened = TopicConfigManager(tmp_path, auto_create=True, default_queue_nums=8, delay_levels=18)
    assert reopened.table["T"].read_queue_nums == 2


def test_records_handed_over_are_written_in_order_behind_a_slow_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slow = SlowFsync(hold=10.0)
    journal = ConfigJournal(tmp_path / "c.json")
    monkeypatch.setattr(config_journal, "os", SlowOs(slow))
    journal.load()

    async def main() -> None:
        first = journal.append_soon({"put": [1]}, 10, dict)
        second = journal.append_soon({"put": [2]}, 10, dict)
        assert await asyncio.to_thread(slow.entered.wait, 10)
        await asyncio.sleep(0.1)
        assert not first.done() and not second.done()  # the second waits behind the first
        slow.release.set()
        await asyncio.gather(first, second)

    asyncio.run(main())
    _, records = journal.load()
    assert list(records) == [{"put": [1]}, {"put": [2]}]


def test_a_created_topic_whose_append_fails_is_undone_and_its_send_refused(tmp_path: Path) -> None:
    manager = TopicConfigManager(tmp_path, auto_create=True, default_queue_nums=8, delay_levels=18)
    manager.persist()
    journal = manager.journal.journal_path
    journal.unlink(missing_ok=True)
    journal.mkdir()  # the append fails as an IO error makes it fail: OSError

    async def main() -> None:
        assert manager.create_in_send("Gone", "TBW102", 8) is not None
        with pytest.raises(OSError):
            await manager.durable("Gone")

    asyncio.run(main())
    assert "Gone" not in manager.table and not manager.pending
    journal.rmdir()
    manager.persist()
    assert "Gone" not in TopicConfigManager(tmp_path, auto_create=True, default_queue_nums=8, delay_levels=18).table


def test_a_fold_taken_before_a_failed_change_was_undone_does_not_store_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A change handed over, then a fold of the table holding it, before the change's append failed: the fold
    appends its own record instead, so the change answered as failed is not stored after all."""
    journal = ConfigJournal(tmp_path / "c.json", min_compact=1)
    journal.load()
    failures = [1]

    def fdatasync(fd: int) -> None:
        if failures[0]:
            failures[0] -= 1
            raise OSError(5, "Input/output error")
        os.fdatasync(fd)

    monkeypatch.setattr(config_journal, "os", SlowOs(fdatasync))

    async def main() -> None:
        failed = journal.append_soon({"put": ["a"]}, 5, lambda: {"t": ["a"]})
        folding = journal.append_soon({"put": ["b"]}, 0, lambda: {"t": ["a", "b"]})
        with pytest.raises(OSError):
            await failed
        journal.undone()
        await folding

    asyncio.run(main())
    monkeypatch.undo()
    snapshot, records = journal.load()
    assert snapshot is None and list(records) == [{"put": ["b"]}]


def test_a_failed_fold_does_not_keep_later_folds_from_being_written(tmp_path: Path) -> None:
    """A fold that could not be written undoes no change: a slave's later ``replace_all`` (a fold) is stored all
    the same, not dropped as if a failed change were still waiting to be undone."""
    manager = TopicConfigManager(tmp_path, auto_create=True, default_queue_nums=8, delay_levels=18)
    manager.path.unlink(missing_ok=True)
    manager.path.mkdir(parents=True)  # the snapshot cannot be replaced: the fold fails with OSError
    with pytest.raises(OSError):
        manager.persist()
    manager.path.rmdir()
    asyncio.run(manager.replace_all([TopicConfig("FromMaster", 2, 2).to_json()]))
    reopened = TopicConfigManager(tmp_path, auto_create=True, default_queue_nums=8, delay_levels=18)
    assert "FromMaster" in reopened.table


def test_the_journal_writer_thread_is_joined_at_broker_stop(tmp_path: Path) -> None:
    """A topic a send creates is written by the journal's thread; the broker's stop writes what is queued and
    joins that thread, so no thread outlives the broker."""
    before = set(threading.enumerate())

    async def main() -> None:
        async with serving(tmp_path) as (_, addr), RemotingClient() as client:
            reply = await client.invoke(addr, _send("Fresh"), 30)
            assert reply.code == ResponseCode.SUCCESS, reply.remark
        left = [t.name for t in set(threading.enumerate()) - before if t.is_alive() and t.name.startswith("journal")]
        assert not left, f"threads left running after the broker stopped: {left}"

    asyncio.run(main())


async def _consumed_by_broadcast(broker: BrokerController, addr: str, client: RemotingClient, group: str) -> int:
    """A message sent to the topic Existing (created here), and ``group`` consuming that topic, broadcast (so its
    heartbeat creates no retry topic): the message's commit-log offset, which a send-back names."""
    await broker.topic_config_manager.update(TopicConfig("Existing", 1, 1))
    sent = await client.invoke(addr, _send("Existing"), 10)
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    consumer = {"groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "BROADCASTING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet": [{"topic": "Existing", "subString": "*"}]}
    body = orjson.dumps({"clientID": "c", "producerDataSet": [], "consumerDataSet": [consumer]})
    beat = await client.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=body), 10)
    assert beat.code == ResponseCode.SUCCESS and f"%RETRY%{group}" not in broker.topic_config_manager.table
    return decode_offset_msg_id(sent.ext_fields["msgId"])[1]


def _send_back(offset: int, group: str, delay_level: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, {
        "offset": str(offset), "group": group, "delayLevel": str(delay_level), "originMsgId": "",
        "originTopic": "Existing"})


async def _creations_held(broker: BrokerController, addr: str, client: RemotingClient,
                          count: int) -> list[asyncio.Future[RemotingCommand]]:
    """Sends creating ``count`` new topics while the disk is held: their answers, once all ``count`` creations
    wait for the disk."""
    held = [asyncio.ensure_future(client.invoke(addr, _send(f"New{i}"), 30)) for i in range(count)]
    await _until(lambda: len(broker.topic_config_manager.pending) >= count)
    return held


async def _until(done: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.01)


def test_a_message_sent_back_with_a_delay_waits_for_its_new_retry_topic(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A send-back with a delay is stored in the schedule topic, bound for the retry topic it just created: it is
    stored and answered only once that topic is durable, as a send to a new topic is."""
    slow = SlowFsync(hold=10.0)

    async def main() -> None:
        async with serving(tmp_path, slow) as (broker, addr), RemotingClient() as client:
            offset = await _consumed_by_broadcast(broker, addr, client, "g")
            end = broker.store.commit_log.max_offset
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            answer = asyncio.ensure_future(client.invoke(addr, _send_back(offset, "g", 1), 30))
            assert await asyncio.to_thread(slow.entered.wait, 10)
            await asyncio.sleep(0.3)
            assert not answer.done(), "answered before its retry topic was durable"
            assert broker.store.commit_log.max_offset == end, "stored before its retry topic was durable"
            slow.release.set()
            reply = await answer
            assert reply.code == ResponseCode.SUCCESS, reply.remark
            assert broker.store.commit_log.max_offset > end

    asyncio.run(main())


def test_a_slave_s_copy_of_its_master_s_topics_is_stored_while_a_created_topic_s_append_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A heartbeat creates a retry topic on a slave, and its append is slow, then fails; meanwhile the slave takes
    its master's topics (``replace_all``). That table holds no change made here, so it is stored, not dropped as
    a fold taken before a failed change was undone."""
    manager = TopicConfigManager(tmp_path, auto_create=False, default_queue_nums=8, delay_levels=18)
    entered, release, failures = threading.Event(), threading.Event(), [1]

    def fdatasync(fd: int) -> None:
        if failures[0]:
            failures[0] -= 1
            entered.set()
            release.wait(10)
            raise OSError(5, "Input/output error")
        os.fdatasync(fd)

    monkeypatch.setattr(config_journal, "os", SlowOs(fdatasync))

    async def main() -> None:
        assert manager.create_all_absent(["%RETRY%g"], 1) == ["%RETRY%g"]
        created = manager.pending["%RETRY%g"]
        assert await asyncio.to_thread(entered.wait, 10)
        threading.Timer(0.3, release.set).start()
        await manager.replace_all([TopicConfig("FromMaster", 2, 2).to_json()])
        with pytest.raises(OSError):
            await created
        assert set(manager.table) == {"FromMaster"}

    asyncio.run(main())
    monkeypatch.undo()
    reopened = TopicConfigManager(tmp_path, auto_create=False, default_queue_nums=8, delay_levels=18)
    assert "FromMaster" in reopened.table and "%RETRY%g" not in reopened.table


def test_a_grpc_send_waiting_for_its_new_topic_takes_the_topic_as_an_operator_changed_it_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gRPC send creates its topic; while that is not durable an operator changes the topic to one queue. The
    send, once the topic is durable, picks its queue among the topic's queues as they are then (as a remoting send
    does), not among those of the config it created: a message in queue 5 of a one-queue topic is read by no one."""
    slow = SlowFsync(hold=10.0)
    group = next(g for g in (f"g{i}" for i in range(100)) if zlib.crc32(g.encode()) % 8 == 5)

    async def main() -> None:
        grpc_port = free_port()
        async with (serving(tmp_path, slow, grpc_port, default_topic_queue_nums=8) as (broker, _),
                    grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel):
            stub = MessagingServiceStub(channel)
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            message = pb.Message(topic=pb.Resource(name="Fresh"), body=b"x", system_properties=pb.SystemProperties(
                message_id="0A0000000000000000000000000000A1", body_encoding=pb.IDENTITY, message_type=pb.FIFO,
                message_group=group))
            sending = asyncio.ensure_future(stub.SendMessage(
                spb.SendMessageRequest(messages=[message]), metadata=[("x-mq-client-id", "c")], timeout=30))
            assert await asyncio.to_thread(slow.entered.wait, 10)
            assert broker.topic_config_manager.table["Fresh"].write_queue_nums == 8
            threading.Timer(0.3, slow.release.set).start()
            await broker.topic_config_manager.update(TopicConfig("Fresh", 1, 1))
            answer = await sending
            assert answer.status.code == pb.Code.OK, answer.status.message
            assert broker.store.get_max_offset_in_queue("Fresh", 0) == 1

    asyncio.run(main())


def test_sends_creating_topics_faster_than_they_are_stored_are_refused_busy_beyond_a_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client sends to ever new topic names while their records wait for a slow disk: each creation, and the
    send waiting for it, is held in memory, so beyond a bound a send that would create one more is answered
    SYSTEM_BUSY at once, creating nothing; the sends held are answered once their topics are durable."""
    slow = SlowFsync(hold=10.0)
    monkeypatch.setattr(topics, "MAX_PENDING_CREATIONS", 2, raising=False)

    async def main() -> None:
        async with serving(tmp_path, slow) as (broker, addr):
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            async with RemotingClient() as client:
                held = await _creations_held(broker, addr, client, 2)
                refused = await client.invoke(addr, _send("OneTooMany"), 10)
                assert refused.code == ResponseCode.SYSTEM_BUSY, (refused.code, refused.remark)
                assert "OneTooMany" not in broker.topic_config_manager.table
                assert not any(f.done() for f in held)
                slow.release.set()
                for reply in await asyncio.gather(*held):
                    assert reply.code == ResponseCode.SUCCESS, reply.remark
                again = await client.invoke(addr, _send("OneTooMany"), 10)
                assert again.code == ResponseCode.SUCCESS, again.remark

    asyncio.run(main())


def _heartbeat(*groups: str, producer: str = "") -> RemotingCommand:
    consumers = [{"groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                  "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": [], "unitMode": False}
                 for group in groups]
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=orjson.dumps(
        {"clientID": f"127.0.0.1@{'-'.join(groups)}", "consumerDataSet": consumers,
         "producerDataSet": [{"groupName": producer}] if producer else []}))


def test_a_send_that_would_create_nothing_is_answered_topic_not_exist_beyond_the_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With autoCreateTopicEnable off, a send to a topic that does not exist creates nothing: beyond the bound of
    creations waiting for the disk it is answered TOPIC_NOT_EXIST, as at any other time, not SYSTEM_BUSY (which
    tells its client to send it again)."""
    slow = SlowFsync(hold=10.0)
    monkeypatch.setattr(topics, "MAX_PENDING_CREATIONS", 1)

    async def main() -> None:
        async with (serving(tmp_path, slow, auto_create_topic_enable=False) as (broker, addr),
                    RemotingClient() as client):
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            held = asyncio.ensure_future(client.invoke(addr, _heartbeat("g"), 30))
            await _until(lambda: "%RETRY%g" in broker.topic_config_manager.pending)
            refused = await client.invoke(addr, _send("Absent"), 10)
            assert refused.code == ResponseCode.TOPIC_NOT_EXIST, (refused.code, refused.remark)
            slow.release.set()
            assert (await held).code == ResponseCode.SUCCESS

    asyncio.run(main())


def test_heartbeats_naming_new_groups_while_creations_wait_beyond_the_bound_register_only_known_groups(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A heartbeat creates its groups' retry topics, as a send creates its topic: beyond the bound of creations
    waiting for the disk, a consumer group whose retry topic does not exist is not registered (nor its topic
    created; the answer's remark says so), while the rest of the heartbeat is, so that the client's other groups
    stay alive; once the disk caught up, the new group registers."""
    slow = SlowFsync(hold=10.0)
    monkeypatch.setattr(topics, "MAX_PENDING_CREATIONS", 2, raising=False)

    async def main() -> None:
        async with serving(tmp_path, slow) as (broker, addr), RemotingClient() as client:
            known = await client.invoke(addr, _heartbeat("g_known"), 10)
            assert known.code == ResponseCode.SUCCESS, known.remark
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            held = [asyncio.ensure_future(client.invoke(addr, _heartbeat(f"g_new{i}"), 30)) for i in range(2)]
            assert await asyncio.to_thread(slow.entered.wait, 10)
            await asyncio.sleep(0.1)
            mixed = await client.invoke(addr, _heartbeat("g_known", "g_one_too_many", producer="p_tx"), 10)
            assert mixed.code == ResponseCode.SUCCESS, mixed.remark
            assert "g_one_too_many not registered yet" in str(mixed.remark), mixed.remark
            assert broker.consumer_manager.get("g_one_too_many") is None
            assert "%RETRY%g_one_too_many" not in broker.topic_config_manager.table
            assert broker.consumer_manager.get("g_known") is not None  # the known group is kept alive
            assert broker.producer_manager.groups.get("p_tx")  # and so is the producer group
            assert not any(f.done() for f in held)
            slow.release.set()
            for reply in await asyncio.gather(*held):
                assert reply.code == ResponseCode.SUCCESS, reply.remark
            again = await client.invoke(addr, _heartbeat("g_one_too_many"), 10)
            assert again.code == ResponseCode.SUCCESS and not again.remark, again.remark
            assert broker.consumer_manager.get("g_one_too_many") is not None

    asyncio.run(main())


def test_one_heartbeat_naming_more_new_groups_than_the_room_left_registers_only_as_many(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound counts the retry topics a heartbeat creates as it admits them: with room for two more creations,
    a heartbeat naming four new consumer groups registers the first two (their retry topics created) and defers
    the other two (named in its remark)."""
    slow = SlowFsync(hold=10.0)
    monkeypatch.setattr(topics, "MAX_PENDING_CREATIONS", 3)

    async def main() -> None:
        async with serving(tmp_path, slow) as (broker, addr), RemotingClient() as client:
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            held = await _creations_held(broker, addr, client, 1)
            beat = asyncio.ensure_future(client.invoke(addr, _heartbeat("g_a", "g_b", "g_c", "g_d"), 30))
            await _until(lambda: len(broker.topic_config_manager.pending) >= 3)
            table = broker.topic_config_manager.table
            assert [g for g in ("g_a", "g_b", "g_c", "g_d") if f"%RETRY%{g}" in table] == ["g_a", "g_b"]
            assert [g for g in ("g_a", "g_b", "g_c", "g_d") if broker.consumer_manager.get(g)] == ["g_a", "g_b"]
            slow.release.set()
            reply = await beat
            assert reply.code == ResponseCode.SUCCESS, reply.remark
            assert "g_c, g_d not registered yet" in str(reply.remark), reply.remark
            assert (await held[0]).code == ResponseCode.SUCCESS

    asyncio.run(main())


@pytest.mark.parametrize("delay_level, created", [(1, "%RETRY%g"), (-1, "%DLQ%g")], ids=["retry", "dead letter"])
def test_a_send_back_that_would_create_its_topic_beyond_the_bound_is_refused_busy_and_stores_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, delay_level: int, created: str) -> None:
    """A send-back creates the group's retry topic (a delay) or dead-letter topic (a negative delay level) as a send
    creates its topic: beyond the bound it is answered SYSTEM_BUSY at once, creating and storing nothing (the
    consumer keeps the message); once the disk caught up, the same send-back is stored."""
    slow = SlowFsync(hold=10.0)
    monkeypatch.setattr(topics, "MAX_PENDING_CREATIONS", 1)

    async def main() -> None:
        async with serving(tmp_path, slow) as (broker, addr), RemotingClient() as client:
            offset = await _consumed_by_broadcast(broker, addr, client, "g")
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            held = await _creations_held(broker, addr, client, 1)
            end = broker.store.commit_log.max_offset
            refused = await client.invoke(addr, _send_back(offset, "g", delay_level), 5)
            assert refused.code == ResponseCode.SYSTEM_BUSY, (refused.code, refused.remark)
            assert not {"%RETRY%g", "%DLQ%g"} & set(broker.topic_config_manager.table)
            assert broker.store.commit_log.max_offset == end
            slow.release.set()
            assert (await held[0]).code == ResponseCode.SUCCESS
            again = await client.invoke(addr, _send_back(offset, "g", delay_level), 10)
            assert again.code == ResponseCode.SUCCESS, again.remark
            assert created in broker.topic_config_manager.table
            assert broker.store.commit_log.max_offset > end

    asyncio.run(main())


def test_a_send_to_a_retry_topic_past_its_retries_beyond_the_bound_is_refused_busy_and_stores_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer's own send to its retry topic past maxReconsumeTimes goes to the dead letters, whose topic does not
    exist yet: beyond the bound it is not created, and the send is answered SYSTEM_BUSY, storing nothing (stored in
    the retry topic, its consumer got it once more), as RocketMQ refuses a send whose dead-letter topic it cannot
    have; once the disk caught up, the same send reaches the dead letters."""
    slow = SlowFsync(hold=10.0)
    monkeypatch.setattr(topics, "MAX_PENDING_CREATIONS", 1)

    async def main() -> None:
        async with serving(tmp_path, slow) as (broker, addr), RemotingClient() as client:
            assert (await client.invoke(addr, _heartbeat("g"), 10)).code == ResponseCode.SUCCESS
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            held = await _creations_held(broker, addr, client, 1)
            end = broker.store.commit_log.max_offset
            refused = await client.invoke(addr, _send("%RETRY%g", reconsume_times=1), 5)
            assert refused.code == ResponseCode.SYSTEM_BUSY, (refused.code, refused.remark)
            assert "%DLQ%g" not in broker.topic_config_manager.table
            assert broker.store.commit_log.max_offset == end
            assert broker.stats_manager.dlq == {}
            slow.release.set()
            assert (await held[0]).code == ResponseCode.SUCCESS
            again = await client.invoke(addr, _send("%RETRY%g", reconsume_times=1), 10)
            assert again.code == ResponseCode.SUCCESS, again.remark
            assert broker.store.get_max_offset_in_queue("%DLQ%g", 0) == 1
            assert broker.store.get_max_offset_in_queue("%RETRY%g", 0) == 0

    asyncio.run(main())


def test_a_send_to_a_retry_topic_past_its_retries_waiting_for_its_new_dead_letter_topic_is_counted_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer's own send to its retry topic past maxReconsumeTimes creates the dead-letter topic and waits for
    it to be durable before it is stored there: it is one dead letter (rocketmq_send_to_dlq_messages) however long
    the wait."""
    slow = SlowFsync(hold=10.0)

    async def main() -> None:
        async with serving(tmp_path, slow) as (broker, addr), RemotingClient() as client:
            assert (await client.invoke(addr, _heartbeat("g"), 10)).code == ResponseCode.SUCCESS
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            sent = asyncio.ensure_future(client.invoke(addr, _send("%RETRY%g", reconsume_times=1), 30))
            await _until(lambda: "%DLQ%g" in broker.topic_config_manager.pending)
            slow.release.set()
            assert (await sent).code == ResponseCode.SUCCESS
            assert broker.store.get_max_offset_in_queue("%DLQ%g", 0) == 1
            assert broker.stats_manager.dlq == {("%RETRY%g", "g"): 1}

    asyncio.run(main())


async def _grpc_received(stub: MessagingServiceStub, topic: str, invisible_ms: int, poll_ms: int = 0,
                         group: str = "g") -> tuple[list[pb.Message], list[int]]:
    """A gRPC ReceiveMessage of ``group``: the messages delivered and the codes of the statuses answered."""
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=32,
        invisible_duration={"nanos": invisible_ms * 1_000_000} if invisible_ms < 1000 else {
            "seconds": invisible_ms // 1000},
        long_polling_timeout={"seconds": poll_ms // 1000, "nanos": poll_ms % 1000 * 1_000_000})
    answers = [a async for a in stub.ReceiveMessage(request, metadata=[("x-mq-client-id", "c")], timeout=10)]
    return ([a.message for a in answers if a.HasField("message")],
            [a.status.code for a in answers if a.HasField("status")])


def test_pop_dead_letters_that_would_create_their_topic_beyond_the_bound_are_kept_in_flight(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gRPC: beyond the bound, a message forwarded to the dead letters (ForwardMessageToDeadLetterQueue) whose
    topic does not exist yet is answered TOO_MANY_REQUESTS and stays in flight; one whose delivery attempts ran out
    is not stored either, and a receive finding it goes on (answered, not refused). Once the disk caught up, both
    reach the dead letters: nothing is lost."""
    slow = SlowFsync(hold=10.0)
    monkeypatch.setattr(topics, "MAX_PENDING_CREATIONS", 1)

    async def main() -> None:
        async with serving_grpc(tmp_path, slow) as (broker, addr, client, stub):
            for topic in ("Forwarded", "Exhausted"):
                await broker.topic_config_manager.update(TopicConfig(topic, 1, 1))
                assert (await client.invoke(addr, _send(topic), 10)).code == ResponseCode.SUCCESS
            (forwarded,), _ = await _grpc_received(stub, "Forwarded", 30_000)
            assert len((await _grpc_received(stub, "Exhausted", 200))[0]) == 1
            broker.core.pop.max_delivery_attempts = 1
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            held = await _creations_held(broker, addr, client, 1)
            end = broker.store.commit_log.max_offset
            forward = spb.ForwardMessageToDeadLetterQueueRequest(
                group=pb.Resource(name="g"), topic=pb.Resource(name="Forwarded"),
                receipt_handle=forwarded.system_properties.receipt_handle,
                message_id=forwarded.system_properties.message_id)
            refused = await stub.ForwardMessageToDeadLetterQueue(forward, timeout=10)
            assert refused.status.code == pb.Code.TOO_MANY_REQUESTS, refused.status
            got, codes = await _grpc_received(stub, "Exhausted", 200, poll_ms=500)  # its deadline passes meanwhile
            assert (got, codes) == ([], [pb.Code.MESSAGE_NOT_FOUND])
            assert "%DLQ%g" not in broker.topic_config_manager.table
            assert broker.store.commit_log.max_offset == end
            slow.release.set()
            assert (await held[0]).code == ResponseCode.SUCCESS
            again = await stub.ForwardMessageToDeadLetterQueue(forward, timeout=10)
            assert again.status.code == pb.Code.OK, again.status
            got, _ = await _grpc_received(stub, "Exhausted", 200, poll_ms=500)
            assert got == []
            await _until(lambda: broker.store.get_max_offset_in_queue("%DLQ%g", 0) == 2)

    asyncio.run(main())


def test_a_message_forwarded_to_the_dead_letters_is_not_delivered_again_while_its_new_topic_waits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gRPC: a message forwarded to the dead letters (ForwardMessageToDeadLetterQueue) stays in flight while its
    store waits (here for its new topic), however short its invisible duration: a receive meanwhile does not deliver
    it again (nor, out of attempts, store it in the dead letters a second time), and a second forward of it is
    answered TOO_MANY_REQUESTS (it stored a second dead letter); stored, it is consumed."""
    slow = SlowFsync(hold=10.0)

    async def main() -> None:
        async with serving_grpc(tmp_path, slow) as (broker, addr, client, stub):
            await broker.topic_config_manager.update(TopicConfig("Forwarded", 1, 1))
            assert (await client.invoke(addr, _send("Forwarded"), 10)).code == ResponseCode.SUCCESS
            (forwarded,), _ = await _grpc_received(stub, "Forwarded", 200)
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            request = spb.ForwardMessageToDeadLetterQueueRequest(
                group=pb.Resource(name="g"), topic=pb.Resource(name="Forwarded"),
                receipt_handle=forwarded.system_properties.receipt_handle,
                message_id=forwarded.system_properties.message_id)
            forward = asyncio.ensure_future(stub.ForwardMessageToDeadLetterQueue(request, timeout=30))
            await _until(lambda: "%DLQ%g" in broker.topic_config_manager.pending)
            await asyncio.sleep(0.3)  # its invisible duration passes while the store waits
            assert await _grpc_received(stub, "Forwarded", 200) == ([], [pb.Code.MESSAGE_NOT_FOUND])
            again = await stub.ForwardMessageToDeadLetterQueue(request, timeout=30)
            assert again.status.code == pb.Code.TOO_MANY_REQUESTS, again.status
            slow.release.set()
            assert (await forward).status.code == pb.Code.OK
            assert broker.store.get_max_offset_in_queue("%DLQ%g", 0) == 1
            assert await _grpc_received(stub, "Forwarded", 200) == ([], [pb.Code.MESSAGE_NOT_FOUND])
            assert broker.consumer_offset_manager.query("g", "Forwarded", 0) == 1

    asyncio.run(main())


def test_a_message_out_of_attempts_whose_dead_letter_waits_is_not_forwarded_a_second_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gRPC: while the dead letter of a message out of delivery attempts waits for its new topic, its consumer's
    ForwardMessageToDeadLetterQueue of it (its last handle still names it) is answered TOO_MANY_REQUESTS: it stored
    the message in the dead letters a second time."""
    slow = SlowFsync(hold=10.0)

    async def main() -> None:
        async with serving_grpc(tmp_path, slow) as (broker, addr, client, stub):
            await broker.topic_config_manager.update(TopicConfig("Exhausted", 1, 1))
            assert (await client.invoke(addr, _send("Exhausted"), 10)).code == ResponseCode.SUCCESS
            (held,), _ = await _grpc_received(stub, "Exhausted", 200)
            broker.core.pop.max_delivery_attempts = 1
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            await asyncio.sleep(0.3)  # its deadline passes
            received = asyncio.ensure_future(_grpc_received(stub, "Exhausted", 200))
            await _until(lambda: "%DLQ%g" in broker.topic_config_manager.pending)
            forwarded = await stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
                group=pb.Resource(name="g"), topic=pb.Resource(name="Exhausted"),
                receipt_handle=held.system_properties.receipt_handle,
                message_id=held.system_properties.message_id), timeout=30)
            assert forwarded.status.code == pb.Code.TOO_MANY_REQUESTS, forwarded.status
            slow.release.set()
            assert await received == ([], [pb.Code.MESSAGE_NOT_FOUND])
            assert broker.store.get_max_offset_in_queue("%DLQ%g", 0) == 1

    asyncio.run(main())


def test_a_receive_delivers_nothing_of_a_state_reset_while_it_waited_for_a_dead_letter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gRPC: a queue's pop state reset (UpdateOffset) while a receive waits for a dead letter's store of it: the
    receive delivers nothing more of the state it forgot (it delivered a message of it again, whose handle no
    longer acked, while the group's next receive delivered it once more from the new offset)."""
    slow = SlowFsync(hold=10.0)

    async def main() -> None:
        async with serving_grpc(tmp_path, slow) as (broker, addr, client, stub):
            await broker.topic_config_manager.update(TopicConfig("Exhausted", 1, 1))
            for body in (b"m0", b"m1"):
                assert (await client.invoke(addr, _send("Exhausted", body=body), 10)).code == ResponseCode.SUCCESS
            (_m0, m1), _ = await _grpc_received(stub, "Exhausted", 200)
            handle = await _invisible_for(stub, m1, m1.system_properties.receipt_handle, 30_000)
            await asyncio.sleep(0.3)  # m0's deadline passes
            assert [m.system_properties.delivery_attempt
                    for m in (await _grpc_received(stub, "Exhausted", 200))[0]] == [2]
            await _invisible_for(stub, m1, handle, 0)
            await asyncio.sleep(0.3)  # both are due
            broker.core.pop.max_delivery_attempts = 2  # m0 out of attempts, m1 not
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            received = asyncio.ensure_future(_grpc_received(stub, "Exhausted", 30_000))
            await _until(lambda: "%DLQ%g" in broker.topic_config_manager.pending)
            reset = await stub.UpdateOffset(spb.UpdateOffsetRequest(
                group=pb.Resource(name="g"), message_queue=pb.MessageQueue(topic=pb.Resource(name="Exhausted"), id=0),
                offset=1), timeout=10)
            assert reset.status.code == pb.Code.OK, reset.status
            slow.release.set()
            assert await received == ([], [pb.Code.MESSAGE_NOT_FOUND])
            got, _ = await _grpc_received(stub, "Exhausted", 30_000)
            assert [(m.body, m.system_properties.delivery_attempt) for m in got] == [(b"m1", 1)]

    asyncio.run(main())


def test_a_pop_dead_letter_waiting_for_its_new_topic_is_stored_once_and_the_receive_answered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gRPC: a message out of delivery attempts goes to the dead letters, whose topic it creates; while that topic
    waits for the disk, a second receive of the group does not dead-letter it again (it was stored twice), and a
    message of the queue acked meanwhile does not fail the first receive (it was answered INTERNAL_SERVER_ERROR)."""
    slow = SlowFsync(hold=10.0)

    async def main() -> None:
        async with serving_grpc(tmp_path, slow) as (broker, addr, client, stub):
            await broker.topic_config_manager.update(TopicConfig("Exhausted", 1, 1))
            assert (await client.invoke(addr, _send("Exhausted"), 10)).code == ResponseCode.SUCCESS
            assert len((await _grpc_received(stub, "Exhausted", 200))[0]) == 1
            assert (await client.invoke(addr, _send("Exhausted"), 10)).code == ResponseCode.SUCCESS
            (kept,), _ = await _grpc_received(stub, "Exhausted", 30_000)
            broker.core.pop.max_delivery_attempts = 1
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            await asyncio.sleep(0.3)  # the first message's deadline passes
            first = asyncio.ensure_future(_grpc_received(stub, "Exhausted", 200))
            await _until(lambda: "%DLQ%g" in broker.topic_config_manager.pending)
            second = asyncio.ensure_future(_grpc_received(stub, "Exhausted", 200))
            await asyncio.sleep(0.2)
            ack = await stub.AckMessage(spb.AckMessageRequest(
                group=pb.Resource(name="g"), topic=pb.Resource(name="Exhausted"), entries=[spb.AckMessageEntry(
                    message_id=kept.system_properties.message_id,
                    receipt_handle=kept.system_properties.receipt_handle)]), timeout=10)
            assert ack.status.code == pb.Code.OK, ack.status
            slow.release.set()
            assert [await first, await second] == [([], [pb.Code.MESSAGE_NOT_FOUND])] * 2
            assert broker.store.get_max_offset_in_queue("%DLQ%g", 0) == 1

    asyncio.run(main())


def test_messages_a_receive_delivers_after_waiting_for_a_dead_letter_s_new_topic_stay_invisible_their_duration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gRPC: a receive that waited for the disk (a dead letter's new topic) counts the invisible duration of what it
    delivers from its answer, not from before the wait: a message it delivered was visible again at once, and the
    next receive delivered it a second time while the first consumer held it."""
    slow = SlowFsync(hold=10.0)

    async def main() -> None:
        async with serving_grpc(tmp_path, slow) as (broker, addr, client, stub):
            await broker.topic_config_manager.update(TopicConfig("Exhausted", 1, 1))
            assert (await client.invoke(addr, _send("Exhausted"), 10)).code == ResponseCode.SUCCESS
            for attempt in (1, 2):
                assert [m.system_properties.delivery_attempt
                        for m in (await _grpc_received(stub, "Exhausted", 200))[0]] == [attempt]
                await asyncio.sleep(0.3)  # its deadline passes
            assert (await client.invoke(addr, _send("Exhausted"), 10)).code == ResponseCode.SUCCESS
            broker.core.pop.max_delivery_attempts = 2
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            received = asyncio.ensure_future(_grpc_received(stub, "Exhausted", 1000))
            await _until(lambda: "%DLQ%g" in broker.topic_config_manager.pending)
            await asyncio.sleep(1.2)  # longer than the invisible duration
            slow.release.set()
            got, _ = await received
            assert [m.system_properties.delivery_attempt for m in got] == [1]
            assert await _grpc_received(stub, "Exhausted", 1000) == ([], [pb.Code.MESSAGE_NOT_FOUND])

    asyncio.run(main())


async def _invisible_for(stub: MessagingServiceStub, message: pb.Message, handle: str, ms: int) -> str:
    """Group g's delivery of ``message`` in flight ``ms`` from now (ChangeInvisibleDuration): its new handle."""
    changed = await stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="g"), topic=pb.Resource(name=message.topic.name), receipt_handle=handle,
        invisible_duration={"seconds": ms // 1000, "nanos": ms % 1000 * 1_000_000},
        message_id=message.system_properties.message_id), timeout=10)
    assert changed.status.code == pb.Code.OK, changed.status
    return changed.receipt_handle


def test_a_pop_dead_letter_whose_new_topic_is_not_stored_is_kept_in_flight_and_the_receive_answered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gRPC: a message out of delivery attempts whose dead-letter topic's creation fails (the disk refused its
    record) stays in flight, and the receive that found it answers the message it delivered before it (it failed
    INTERNAL_SERVER_ERROR, that delivery's attempt spent unseen); the next receive stores the dead letter."""
    fsync = FailingFsync(1)
    fsync.release.set()

    async def main() -> None:
        async with serving_grpc(tmp_path, None) as (broker, addr, client, stub):
            await broker.topic_config_manager.update(TopicConfig("Exhausted", 1, 1))
            for _ in range(2):
                assert (await client.invoke(addr, _send("Exhausted"), 10)).code == ResponseCode.SUCCESS
            (first, _second), _ = await _grpc_received(stub, "Exhausted", 200)
            handle = await _invisible_for(stub, first, first.system_properties.receipt_handle, 30_000)
            await asyncio.sleep(0.3)
            assert [m.system_properties.delivery_attempt for m in (await _grpc_received(stub, "Exhausted", 200))[0]
                    ] == [2]  # the second message, the first still in flight
            await _invisible_for(stub, first, handle, 0)
            await asyncio.sleep(0.3)
            broker.core.pop.max_delivery_attempts = 2
            monkeypatch.setattr(config_journal, "os", SlowOs(fsync))
            got, codes = await _grpc_received(stub, "Exhausted", 200)
            assert codes == [pb.Code.OK], codes
            assert [m.system_properties.message_id for m in got] == [first.system_properties.message_id]
            assert "%DLQ%g" not in broker.topic_config_manager.table
            await asyncio.sleep(0.3)
            assert await _grpc_received(stub, "Exhausted", 200) == ([], [pb.Code.MESSAGE_NOT_FOUND])
            assert broker.store.get_max_offset_in_queue("%DLQ%g", 0) == 2

    asyncio.run(main())


def _operator(code: int, ext: dict[str, str] | None = None, body: bytes | None = None) -> RemotingCommand:
    return RemotingCommand.request(code, ext or {}, body=body or b"")


def _topic_change(topic: str, queues: int) -> RemotingCommand:
    return _operator(RequestCode.UPDATE_AND_CREATE_TOPIC,
                     {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues), "perm": "6"})


def _group_change(group: str, retries: int) -> RemotingCommand:
    return _operator(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                     body=orjson.dumps({"groupName": group, "retryMaxTimes": retries}))


async def _answered_while_held(slow: SlowFsync, addr: str, operator: RemotingClient,
                               changes: list[RemotingCommand]) -> None:
    """``changes`` sent one after another on the operator's connection while the first one's fsync is held: a
    send on another connection is answered meanwhile, the changes only once the fsync is done, each SUCCESS."""
    answers = [asyncio.ensure_future(operator.invoke(addr, change, 30)) for change in changes]
    assert await asyncio.to_thread(slow.entered.wait, 10)
    async with RemotingClient() as other:
        answered = await other.invoke(addr, _send("Existing"), 10)
    assert not slow.finished.is_set(), "another connection waited for an operator's fsync"
    assert answered.code == ResponseCode.SUCCESS, answered.remark
    await asyncio.sleep(0.2)
    assert not any(a.done() for a in answers), "an operator's change was answered before it was durable"
    slow.release.set()
    for reply in await asyncio.gather(*answers):
        assert reply.code == ResponseCode.SUCCESS, reply.remark


def _topics_reopened(root: Path) -> dict[str, int]:
    return {n: c.read_queue_nums for n, c in TopicConfigManager(
        root, auto_create=True, default_queue_nums=4, delay_levels=18).table.items()}


def _groups_reopened(root: Path) -> dict[str, int]:
    return {n: c.retry_max_times for n, c in SubscriptionGroupManager(root).table.items()}


@pytest.mark.parametrize("change, delete, reopened", [
    (_topic_change, (RequestCode.DELETE_TOPIC_IN_BROKER, "topic"), _topics_reopened),
    (_group_change, (RequestCode.DELETE_SUBSCRIPTIONGROUP, "groupName"), _groups_reopened),
], ids=["topic", "group"])
def test_an_operator_s_changes_are_answered_once_durable_without_holding_other_connections(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Callable[[str, int], RemotingCommand],
        delete: tuple[int, str], reopened: Callable[[Path], dict[str, int]]) -> None:
    """Two updates of one topic (group) and the deletion of another, their fsync slow: another connection's send
    is answered meanwhile; each change is answered once durable, and the reopened table holds the later of the
    two updates and not the deleted one."""
    slow = SlowFsync(hold=3.0)

    async def main() -> None:
        async with serving(tmp_path, slow) as (_, addr), RemotingClient() as operator:
            for made in (_topic_change("Existing", 1), change("Doomed", 1)):
                assert (await operator.invoke(addr, made, 10)).code == ResponseCode.SUCCESS
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            await _answered_while_held(slow, addr, operator, [
                change("Ops", 8), change("Ops", 2), _operator(delete[0], {delete[1]: "Doomed"})])

    asyncio.run(main())
    monkeypatch.undo()
    table = reopened(tmp_path / "store")
    assert table["Ops"] == 2 and "Doomed" not in table


def test_an_operator_s_topic_change_whose_append_fails_is_answered_as_failed_and_undone(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as (broker, addr), RemotingClient() as operator:
            journal = broker.topic_config_manager.journal.journal_path
            journal.unlink(missing_ok=True)
            journal.mkdir(parents=True)  # the append fails as an IO error makes it fail: OSError
            reply = await operator.invoke(addr, _topic_change("Failed", 2), 10)
            assert reply.code == ResponseCode.SYSTEM_ERROR, (reply.code, reply.remark)
            assert "Failed" not in broker.topic_config_manager.table
            assert "Failed" not in broker.topic_config_manager.pending
            journal.rmdir()

    asyncio.run(main())


def test_a_slave_s_copy_of_its_master_s_topics_does_not_hold_other_connections(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slave takes its master's topics (``sync_all``), its snapshot's write slow: the slave answers another
    connection meanwhile, and holds the master's topics once the write is done, also after a restart."""
    slow = SlowFsync(hold=3.0)
    write = config_journal.write_json_atomic

    def slow_write(path: Path, data: object) -> None:
        slow.entered.set()
        slow.release.wait(slow.hold)
        write(path, data)
        slow.finished.set()

    async def main() -> None:
        async with (serving(tmp_path / "master") as (_, master_addr), RemotingClient() as operator,
                    serving(tmp_path / "slave", slow, broker_role="SLAVE", broker_id=1) as (slave, addr)):
            assert (await operator.invoke(master_addr, _topic_change("FromMaster", 2), 10)).code == \
                ResponseCode.SUCCESS
            monkeypatch.setattr(config_journal, "write_json_atomic", slow_write)
            slave.slave_synchronize.master_addr = master_addr
            syncing = asyncio.ensure_future(slave.slave_synchronize.sync_all())
            assert await asyncio.to_thread(slow.entered.wait, 10)
            async with RemotingClient() as other:
                answered = await other.invoke(addr, _operator(RequestCode.GET_ALL_TOPIC_CONFIG), 10)
            assert not slow.finished.is_set(), "another connection waited for the slave's write of its topics"
            assert answered.code == ResponseCode.SUCCESS, answered.remark
            slow.release.set()
            await syncing
            assert "FromMaster" in slave.topic_config_manager.table

    asyncio.run(main())
    monkeypatch.undo()
    reopened = TopicConfigManager(tmp_path / "slave" / "store", auto_create=True, default_queue_nums=4,
                                  delay_levels=18)
    assert "FromMaster" in reopened.table


class FailingFsync:
    """An fsync that fails ``failures`` times, the first one held until ``release``: the changes made meanwhile
    are all handed to the writer before any of them fails."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, fd: int) -> None:
        if self.failures:
            self.failures -= 1
            self.entered.set()
            self.release.wait(10)
            raise OSError(5, "Input/output error")
        os.fdatasync(fd)


async def _all_failing(fsync: FailingFsync, changes: list[Callable[[], Awaitable[object]]]) -> None:
    """``changes`` begun one after another, in order, while the first one's failing fsync is held: each is answered
    as failed."""
    begun = []
    for change in changes:
        begun.append(asyncio.ensure_future(change()))
        await asyncio.sleep(0)
    fsync.release.set()
    for failed in await asyncio.gather(*begun, return_exceptions=True):
        assert isinstance(failed, OSError), failed


def test_two_changes_of_one_topic_both_failing_leave_it_as_it_was_stored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two operators change one topic, then another deletes it, each append failing (a disk gone bad): each is
    answered as failed, so the topic stays as it was stored, not as the first failed change left it for the
    second (a later fold would store what was answered as failed)."""
    manager = TopicConfigManager(tmp_path, auto_create=True, default_queue_nums=8, delay_levels=18)
    fsync = FailingFsync(failures=3)

    async def main() -> None:
        await manager.update(TopicConfig("T", 4, 4))
        monkeypatch.setattr(config_journal, "os", SlowOs(fsync))
        await _all_failing(fsync, [lambda: manager.update(TopicConfig("T", 1, 1)),
                                   lambda: manager.update(TopicConfig("T", 2, 2)), lambda: manager.delete("T")])
        assert manager.table["T"].read_queue_nums == 4

    asyncio.run(main())
    monkeypatch.undo()
    manager.persist()
    assert TopicConfigManager(tmp_path, auto_create=True, default_queue_nums=8, delay_levels=18).table[
        "T"].read_queue_nums == 4


def test_a_group_deleted_then_changed_both_failing_stays_as_it_was_stored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group's deletion and then a change of it, both appends failing: the group stays as stored, not gone."""
    manager = SubscriptionGroupManager(tmp_path)
    fsync = FailingFsync(failures=2)

    async def main() -> None:
        await manager.update(SubscriptionGroupConfig("g", retry_max_times=5))
        monkeypatch.setattr(config_journal, "os", SlowOs(fsync))
        await _all_failing(fsync, [lambda: manager.delete("g"),
                                   lambda: manager.update(SubscriptionGroupConfig("g", retry_max_times=1))])
        assert manager.table["g"].retry_max_times == 5

    asyncio.run(main())
    monkeypatch.undo()
    manager.persist()
    assert SubscriptionGroupManager(tmp_path).table["g"].retry_max_times == 5


def test_a_topic_deletion_durable_after_its_handler_was_cancelled_still_drops_the_topic_s_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """deleteTopic, its fsync slower than the stop's grace for running handlers, which cancels the handler: the
    deletion is still written, so the topic's consume queues and offsets must go with it, else a topic of that name
    created later serves the deleted topic's messages again."""
    slow = SlowFsync(hold=10.0)
    port = free_port()
    broker = BrokerController(BrokerConfig(store=StoreConfig(store_path_root_dir=str(tmp_path / "store")),
                                           listen_port=port, grpc_port=-1))
    addr = f"127.0.0.1:{port}"

    async def main() -> None:
        await broker.start()
        try:
            async with RemotingClient() as operator:  # open during the stop, which closes its connection
                assert (await operator.invoke(addr, _topic_change("Doomed", 1), 10)).code == ResponseCode.SUCCESS
                assert (await operator.invoke(addr, _send("Doomed"), 10)).code == ResponseCode.SUCCESS
                assert (tmp_path / "store" / "consumequeue" / "Doomed").exists()
                broker.consumer_offset_manager.commit("g", "Doomed", 0, 1)
                monkeypatch.setattr(config_journal, "os", SlowOs(slow))
                deleting = asyncio.ensure_future(operator.invoke(
                    addr, _operator(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Doomed"}), 30))
                assert await asyncio.to_thread(slow.entered.wait, 10)
                close = broker.server.close
                monkeypatch.setattr(broker.server, "close", lambda: close(grace=0.2))
                threading.Timer(1.0, slow.release.set).start()  # after the grace: the handler is cancelled
                await broker.shutdown()
                await asyncio.gather(deleting, return_exceptions=True)
        finally:
            slow.release.set()
            if broker.started:
                await broker.shutdown()
        assert broker.consumer_offset_manager.query("g", "Doomed", 0) < 0

    asyncio.run(main())
    monkeypatch.undo()
    assert "Doomed" not in TopicConfigManager(tmp_path / "store", auto_create=True, default_queue_nums=4,
                                              delay_levels=18).table
    assert not (tmp_path / "store" / "consumequeue" / "Doomed").exists()
    assert ConsumerOffsetManager(tmp_path / "store").query("g", "Doomed", 0) < 0


@pytest.mark.parametrize("change", [lambda: _topic_change("Ops", 2), lambda: _group_change("g", 3)],
                         ids=["topic", "group"])
def test_operator_changes_beyond_a_bound_while_the_disk_is_slow_are_refused_busy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Callable[[], RemotingCommand]) -> None:
    """Operator changes sent one after another, faster than a slow disk stores them: each, and the request waiting
    for it, is held in memory, so beyond a bound one more is answered SYSTEM_BUSY at once, changing nothing; the
    ones held are answered once durable."""
    slow = SlowFsync(hold=10.0)
    monkeypatch.setattr(config_journal, "MAX_QUEUED_CHANGES", 2, raising=False)

    async def main() -> None:
        async with serving(tmp_path, slow) as (_, addr), RemotingClient() as operator:
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            held = [asyncio.ensure_future(operator.invoke(addr, change(), 30)) for _ in range(2)]
            assert await asyncio.to_thread(slow.entered.wait, 10)
            await asyncio.sleep(0.1)
            refused = await operator.invoke(addr, change(), 10)
            assert refused.code == ResponseCode.SYSTEM_BUSY, (refused.code, refused.remark)
            assert not any(f.done() for f in held)
            slow.release.set()
            for reply in await asyncio.gather(*held):
                assert reply.code == ResponseCode.SUCCESS, reply.remark
            again = await operator.invoke(addr, change(), 10)
            assert again.code == ResponseCode.SUCCESS, again.remark

    asyncio.run(main())


def test_deletions_of_one_stored_group_beyond_the_bound_while_the_disk_is_slow_are_refused_busy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group's deletion waits in the queue, the group still stored and served: each deleteSubGroup of it sent
    meanwhile is queued too, held in memory with its request, so beyond the bound one more is answered SYSTEM_BUSY
    at once, as an update is."""
    slow = SlowFsync(hold=10.0)
    monkeypatch.setattr(config_journal, "MAX_QUEUED_CHANGES", 2, raising=False)

    def deletion() -> RemotingCommand:
        return _operator(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "g"})

    async def main() -> None:
        async with serving(tmp_path, slow) as (broker, addr), RemotingClient() as operator:
            assert (await operator.invoke(addr, _group_change("g", 3), 10)).code == ResponseCode.SUCCESS
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            held = [asyncio.ensure_future(operator.invoke(addr, deletion(), 30)) for _ in range(2)]
            assert await asyncio.to_thread(slow.entered.wait, 10)
            await asyncio.sleep(0.1)
            refusing = asyncio.ensure_future(operator.invoke(addr, deletion(), 30))
            await asyncio.wait([refusing], timeout=3)
            assert refusing.done(), "one more deletion of the group was queued beyond the bound"
            assert refusing.result().code == ResponseCode.SYSTEM_BUSY, refusing.result().remark
            assert broker.subscription_group_manager.journal.queued == 2
            slow.release.set()
            for reply in await asyncio.gather(*held):
                assert reply.code == ResponseCode.SUCCESS, reply.remark
            assert broker.subscription_group_manager.get("g") is None

    asyncio.run(main())


def _pull(group: str, topic: str, suspend_ms: int = 0) -> RemotingCommand:
    """A pull of queue 0 of ``topic`` from its start, held up to ``suspend_ms`` while it finds nothing (0: not
    held)."""
    flags = PullMessageRequestHeader.FLAG_SUBSCRIPTION | (PullMessageRequestHeader.FLAG_SUSPEND if suspend_ms else 0)
    header = PullMessageRequestHeader(consumer_group=group, topic=topic, queue_id=0, queue_offset=0,
                                      sys_flag=flags, suspend_timeout_millis=suspend_ms,
                                      subscription="*", expression_type="TAG")
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext())


async def _groups_served(client: RemotingClient, addr: str) -> dict[str, Any]:
    reply = await client.invoke(addr, _operator(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), 10)
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    return dict(orjson.loads(reply.body)["subscriptionGroupTable"])


def test_group_changes_waiting_for_their_fsync_are_served_to_no_other_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator turns a group's consumption off, creates one group and deletes another, their fsync slow:
    meanwhile other requests are served the groups as stored (the group's pulls, the groups' configs); once the
    changes are durable and answered, they are served the changes, and a restart finds them."""
    slow = SlowFsync(hold=10.0)

    async def main() -> None:
        async with serving(tmp_path, slow) as (_, addr), RemotingClient() as operator, RemotingClient() as other:
            for made in (_topic_change("Existing", 1), _group_change("g", 5), _group_change("Gone", 5),
                         _send("Existing")):
                assert (await operator.invoke(addr, made, 10)).code == ResponseCode.SUCCESS
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            off = _operator(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                            body=orjson.dumps({"groupName": "g", "consumeEnable": False}))
            changes = [asyncio.ensure_future(operator.invoke(addr, change, 30)) for change in (
                off, _group_change("Fresh", 3), _operator(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "Gone"}))]
            assert await asyncio.to_thread(slow.entered.wait, 10)
            await asyncio.sleep(0.2)  # every change handed to the journal's writer
            pulled = await other.invoke(addr, _pull("g", "Existing"), 10)
            assert pulled.code == ResponseCode.SUCCESS, (pulled.code, pulled.remark)
            served = await _groups_served(other, addr)
            assert served["g"]["consumeEnable"] and "Fresh" not in served and "Gone" in served
            assert not any(change.done() for change in changes)
            slow.release.set()
            for reply in await asyncio.gather(*changes):
                assert reply.code == ResponseCode.SUCCESS, reply.remark
            pulled = await other.invoke(addr, _pull("g", "Existing"), 10)
            assert pulled.code == ResponseCode.NO_PERMISSION, (pulled.code, pulled.remark)
            served = await _groups_served(other, addr)
            assert not served["g"]["consumeEnable"] and served["Fresh"]["retryMaxTimes"] == 3 and "Gone" not in served

    asyncio.run(main())
    monkeypatch.undo()
    reopened = SubscriptionGroupManager(tmp_path / "store")
    assert set(reopened.table) == {"g", "Fresh"} and not reopened.table["g"].consume_enable


def test_a_group_whose_creation_waits_for_the_disk_needs_update_to_be_changed_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ACL on: an account with Create on ``Group:*`` and no Update makes new groups, and must not rewrite one the
    broker has. An operator creates ``billing``, its fsync slow: meanwhile that account's updateSubGroup of
    ``billing`` (``consumeEnable=false``) is refused for want of Update, as once the creation is stored, rather
    than taken as a creation of a group the broker does not know and queued to overwrite the operator's."""
    slow = SlowFsync(hold=10.0)
    (tmp_path / "plain_acl.yml").write_text(PLAIN_ACL)
    maker = SessionCredentials("makerKey01", "makerSecret01")

    def billing(consume: bool) -> RemotingCommand:
        return _operator(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                         body=orjson.dumps({"groupName": "billing", "consumeEnable": consume}))

    async def main() -> None:
        async with (serving(tmp_path, slow, acl_enable=True, acl_file=str(tmp_path / "plain_acl.yml"),
                            access_key=ADMIN.access_key, secret_key=ADMIN.secret_key) as (broker, addr),
                    RemotingClient(rpc_hook=AclClientRPCHook(ADMIN)) as admin,
                    RemotingClient(rpc_hook=AclClientRPCHook(maker)) as by_maker):
            user = orjson.dumps({"username": maker.access_key, "password": maker.secret_key})
            policy = orjson.dumps({"subject": f"User:{maker.access_key}", "policies": [{"policyType": "Custom",
                                   "entries": [{"resource": "Group:*", "actions": ["Create"], "decision": "Allow"}]}]})
            for setup in (_operator(RequestCode.AUTH_CREATE_USER, {"username": maker.access_key}, user),
                          _operator(RequestCode.AUTH_CREATE_ACL, {"subject": f"User:{maker.access_key}"}, policy)):
                assert (answer := await admin.invoke(addr, setup, 10)).code == ResponseCode.SUCCESS, answer.remark
            monkeypatch.setattr(config_journal, "os", SlowOs(slow))
            creating = asyncio.ensure_future(admin.invoke(addr, billing(True), 30))
            assert await asyncio.to_thread(slow.entered.wait, 10)
            rewriting = asyncio.ensure_future(by_maker.invoke(addr, billing(False), 30))
            await asyncio.wait([rewriting], timeout=3)
            slow.release.set()
            assert (await creating).code == ResponseCode.SUCCESS
            rewrite = await rewriting
            assert rewrite.code == ResponseCode.NO_PERMISSION, (rewrite.code, rewrite.remark)
            assert broker.subscription_group_manager.get("billing") == SubscriptionGroupConfig("billing")
            assert (await by_maker.invoke(addr, _group_change("maker-group", 1), 10)).code == ResponseCode.SUCCESS

    asyncio.run(main())


class FsyncInTurn:
    """Fsyncs that wait for their turn (``turns``, one released per fsync), those of the call numbers in
    ``failing`` then failing: changes handed to the writer together are stored, or fail, one at a time."""

    def __init__(self, failing: set[int]) -> None:
        self.failing = failing
        self.calls = 0
        self.turns = threading.Semaphore(0)

    def __call__(self, fd: int) -> None:
        call, self.calls = self.calls, self.calls + 1
        if not self.turns.acquire(timeout=10) or call in self.failing:
            raise OSError(5, "Input/output error")
        os.fdatasync(fd)


def test_group_changes_are_served_one_by_one_in_order_once_durable_and_a_failed_one_never(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four changes handed to the writer together, the second one's append failing: the table serves none of them
    until the first is durable, then each as it becomes durable, in the order made; the failed one never, not even
    for a moment; a reopen finds the durable ones."""
    manager = SubscriptionGroupManager(tmp_path)
    fsync = FsyncInTurn(failing={1})

    def retries(group: str) -> int | None:
        cfg = manager.get(group)
        return None if cfg is None else cfg.retry_max_times

    async def main() -> None:
        await manager.update(SubscriptionGroupConfig("g", retry_max_times=5))
        monkeypatch.setattr(config_journal, "os", SlowOs(fsync))
        changes = [asyncio.ensure_future(change) for change in (
            manager.update(SubscriptionGroupConfig("g", retry_max_times=1)),
            manager.update(SubscriptionGroupConfig("g", retry_max_times=2)),
            manager.delete("g"), manager.update(SubscriptionGroupConfig("h", retry_max_times=7)))]
        await asyncio.sleep(0.1)
        assert (retries("g"), retries("h")) == (5, None)
        assert set(manager.serialize()["subscriptionGroupTable"]) == {"h"}  # a fold writes the changes queued
        for change, served in zip(changes, [(1, None), (1, None), (None, None), (None, 7)], strict=True):
            fsync.turns.release()
            await asyncio.gather(change, return_exceptions=True)
            assert (retries("g"), retries("h")) == served
        with pytest.raises(OSError):
            changes[1].result()

    asyncio.run(main())
    monkeypatch.undo()
    reopened = SubscriptionGroupManager(tmp_path)
    assert set(reopened.table) == {"h"} and reopened.table["h"].retry_max_times == 7


@pytest.mark.parametrize("first_fails", [False, True], ids=["durable", "failed"])
def test_a_fold_while_a_group_change_waits_stores_it_only_once_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first_fails: bool) -> None:
    """A change waiting for its fsync, and the next change folding the journal into the snapshot: the snapshot
    holds the first change (not served yet) unless its append failed, and the second one."""
    manager = SubscriptionGroupManager(tmp_path)
    fsync = FailingFsync(failures=1) if first_fails else SlowFsync(hold=10.0)

    async def main() -> None:
        monkeypatch.setattr(config_journal, "os", SlowOs(fsync))
        first = asyncio.ensure_future(manager.update(SubscriptionGroupConfig("first")))
        assert await asyncio.to_thread(fsync.entered.wait, 10)
        manager.journal.min_compact, manager.journal.records = 1, 5  # the next change folds the journal in
        second = asyncio.ensure_future(manager.update(SubscriptionGroupConfig("second")))
        await asyncio.sleep(0.1)
        assert "first" not in manager.table and "second" not in manager.table
        fsync.release.set()
        await asyncio.gather(first, second, return_exceptions=True)
        assert second.result() is None and (first.exception() is not None) == first_fails

    asyncio.run(main())
    monkeypatch.undo()
    stored = {"second"} if first_fails else {"first", "second"}
    assert set(manager.table) == stored and set(SubscriptionGroupManager(tmp_path).table) == stored


def test_a_group_deletion_cleans_its_offsets_once_durable_though_its_caller_was_cancelled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """deleteSubGroup with clean_offset, the request cancelled while the deletion waits for a slow disk: the
    deletion is stored all the same, and so its offsets go with it."""
    manager = SubscriptionGroupManager(tmp_path)
    slow = SlowFsync(hold=10.0)
    cleaned: list[str] = []

    async def main() -> None:
        await manager.update(SubscriptionGroupConfig("g"))
        monkeypatch.setattr(config_journal, "os", SlowOs(slow))
        deleting = asyncio.ensure_future(manager.delete("g", lambda: cleaned.append("g")))
        assert await asyncio.to_thread(slow.entered.wait, 10)
        deleting.cancel()
        slow.release.set()
        await asyncio.to_thread(manager.journal.close)
        await asyncio.sleep(0.1)
        assert cleaned == ["g"]

    asyncio.run(main())
    monkeypatch.undo()
    assert "g" not in SubscriptionGroupManager(tmp_path).table


def test_a_group_deleted_while_its_creation_waits_for_the_disk_is_deleted_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """deleteSubGroup right after the group's creation, its record not durable yet: the deletion is queued after
    the creation (the group is gone once both are durable, and after a reopen), not refused as an unknown group
    that the creation then stores."""
    manager = SubscriptionGroupManager(tmp_path)
    slow = SlowFsync(hold=10.0)

    async def main() -> None:
        monkeypatch.setattr(config_journal, "os", SlowOs(slow))
        creating = asyncio.ensure_future(manager.update(SubscriptionGroupConfig("g")))
        assert await asyncio.to_thread(slow.entered.wait, 10)
        deleting = asyncio.ensure_future(manager.delete("g"))
        await asyncio.sleep(0.1)
        slow.release.set()
        await creating
        assert await deleting
        assert "g" not in manager.table

    asyncio.run(main())
    monkeypatch.undo()
    assert "g" not in SubscriptionGroupManager(tmp_path).table


def test_sends_waiting_on_a_failed_topic_change_go_on_with_the_stored_topic_and_fail_only_on_a_failed_creation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sends (remoting and gRPC) wait for a pending change of their topic. When an operator's update of a topic
    that exists fails, the update is undone and the topic is as it was stored: the sends are stored in it. When the
    topic's creation fails, there is no topic: the sends fail (SYSTEM_ERROR, INTERNAL_SERVER_ERROR)."""

    def grpc_send(stub: MessagingServiceStub, topic: str, n: int) -> Awaitable[spb.SendMessageResponse]:
        message = pb.Message(topic=pb.Resource(name=topic), body=b"x", system_properties=pb.SystemProperties(
            message_id=f"0A00000000000000000000000000{n:04X}", body_encoding=pb.IDENTITY, message_type=pb.NORMAL))
        return stub.SendMessage(spb.SendMessageRequest(messages=[message]), metadata=[("x-mq-client-id", "c")],
                                timeout=30)

    async def main() -> None:
        async with serving_grpc(tmp_path, None) as (broker, addr, client, stub):
            manager = broker.topic_config_manager
            await manager.update(TopicConfig("Kept", 1, 1))

            failing = FailingFsync(failures=1)
            monkeypatch.setattr(config_journal, "os", SlowOs(failing))
            # the change would refuse the sends (read only): they are judged once it failed, by the topic as stored
            updating = asyncio.ensure_future(manager.update(TopicConfig("Kept", 4, 4, perm=PermName.PERM_READ)))
            assert await asyncio.to_thread(failing.entered.wait, 10)
            remoting = asyncio.ensure_future(client.invoke(addr, _send("Kept"), 30))
            grpc_sending = asyncio.ensure_future(grpc_send(stub, "Kept", 1))
            await asyncio.sleep(0.2)
            assert "Kept" in manager.pending and not remoting.done() and not grpc_sending.done()  # they wait
            failing.release.set()
            with pytest.raises(OSError):
                await updating
            reply, answer = await remoting, await grpc_sending
            assert reply.code == ResponseCode.SUCCESS, (reply.code, reply.remark)
            assert answer.status.code == pb.Code.OK, answer.status.message
            assert manager.table["Kept"].write_queue_nums == 1  # as stored, writable
            assert broker.store.get_max_offset_in_queue("Kept", 0) == 2

            failing = FailingFsync(failures=1)
            monkeypatch.setattr(config_journal, "os", SlowOs(failing))
            creating = asyncio.ensure_future(client.invoke(addr, _send("Fresh"), 30))  # creates it from TBW102
            assert await asyncio.to_thread(failing.entered.wait, 10)
            waiting = grpc_send(stub, "Fresh", 2)
            await asyncio.sleep(0.2)
            failing.release.set()
            reply, answer = await creating, await waiting
            assert reply.code == ResponseCode.SYSTEM_ERROR, (reply.code, reply.remark)
            assert answer.entries[0].status.code == pb.Code.INTERNAL_SERVER_ERROR, answer
            assert "Fresh" not in manager.table
            monkeypatch.undo()

    asyncio.run(main())
