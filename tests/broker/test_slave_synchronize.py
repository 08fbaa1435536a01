"""A slave's copy of its master's metadata (``SlaveSynchronize``) from replies that do not have the shape they
should: the peer's bytes are parsed once, before anything is adopted, and a reply that does not parse is one log
line for the run of failed syncs (not a traceback every 3 s), adopts nothing, and the next sync goes on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.broker.test_journal_off_loop import serving
from txmq.broker.controller import BrokerController
from txmq.broker.subscription_group_manager import SubscriptionGroupConfig
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.server import RemotingServer
from txmq.remoting.transport import Connection, RemotingClient
from txmq.topic import TopicConfig

TOPICS, OFFSETS, DELAYS, GROUPS = (RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_ALL_CONSUMER_OFFSET,
                                   RequestCode.GET_ALL_DELAY_OFFSET, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
GOOD: dict[int, Any] = {TOPICS: {"topicConfigTable": {"T": TopicConfig("T", 2, 2).to_json()}},
                        OFFSETS: {"offsetTable": {"T@g": {"0": 5}}}, DELAYS: {"offsetTable": {"1": 7}},
                        GROUPS: {"subscriptionGroupTable": {
                            "g": SubscriptionGroupConfig("g", consume_enable=False).to_json()}}}


class Master:
    """A peer answering the four requests with the documents in ``bodies``."""

    def __init__(self, bodies: dict[int, Any]) -> None:
        self.bodies = bodies

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=orjson.dumps(self.bodies[cmd.code]))


@contextlib.asynccontextmanager
async def slave_of(master: Master, tmp_path: Path, **config: Any) -> AsyncIterator[BrokerController]:
    """A slave broker whose ``SlaveSynchronize`` asks ``master`` (a real remoting server) for its metadata."""
    server = RemotingServer(master)
    await server.start()
    try:
        async with serving(tmp_path, broker_role="SLAVE", broker_id=1, **config) as (slave, _):
            slave.slave_synchronize.master_addr = f"127.0.0.1:{server.port}"
            yield slave
    finally:
        await server.close()


@pytest.mark.parametrize("code, body", [
    (TOPICS, []), (TOPICS, {"topicConfigTable": ["T"]}), (OFFSETS, {"offsetTable": {"T@g": [5]}}),
    (OFFSETS, {"offsetTable": {"T@g": {"0": "x"}}}), (OFFSETS, {"offsetTable": {"T@g": {"0": [1]}}}),
    (DELAYS, {"offsetTable": {"1": None}}), (DELAYS, "text"), (GROUPS, ["g"]), (GROUPS, {"subscriptionGroupTable": 1}),
], ids=["topics-list", "table-list", "queues-list", "offset-text", "offset-list", "delay-null", "delays-text",
        "groups-list", "group-table-number"])
def test_a_malformed_reply_of_the_master_is_one_log_line_and_adopts_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, code: int, body: Any) -> None:
    master = Master({**GOOD, code: body})

    async def main() -> None:
        async with slave_of(master, tmp_path) as slave:
            sync = slave.slave_synchronize
            with caplog.at_level(logging.INFO, "txmq.broker"):
                for _ in range(3):
                    await sync.sync_all()
            lines = [r for r in caplog.records if "slave synchronize" in r.getMessage()]
            assert len(lines) == 1 and lines[0].exc_info is None, [r.getMessage() for r in lines]
            assert "T" not in slave.topic_config_manager.table
            assert slave.consumer_offset_manager.query("g", "T", 0) < 0
            assert slave.subscription_group_manager.get("g") is None
            master.bodies.update(GOOD)
            await sync.sync_all()
            assert slave.topic_config_manager.table["T"].read_queue_nums == 2
            assert slave.consumer_offset_manager.query("g", "T", 0) == 5
            assert slave.subscription_group_manager.get("g") == SubscriptionGroupConfig("g", consume_enable=False)

    asyncio.run(main())


OUT_OF_BOUNDS = pytest.mark.parametrize("read, write", [(0, 2), (2, -1), (2, 1025), (10**9, 10**9)],
                                        ids=["zero", "negative", "over-1024", "huge"])


@OUT_OF_BOUNDS
def test_updateTopic_refuses_the_queue_numbers_a_slave_skips(tmp_path: Path, read: int, write: int) -> None:
    async def main() -> RemotingCommand:
        async with serving(tmp_path) as (_, addr):
            client = RemotingClient()
            try:
                return await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                    "topic": "Bad", "readQueueNums": str(read), "writeQueueNums": str(write), "perm": "6"}), 5)
            finally:
                await client.close()

    resp = asyncio.run(main())
    assert resp.code == ResponseCode.SYSTEM_ERROR and "queue numbers" in (resp.remark or ""), resp.remark


@OUT_OF_BOUNDS
def test_a_master_topic_with_queue_numbers_updateTopic_refuses_is_skipped_with_one_log_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, read: int, write: int) -> None:
    """A topic's queue numbers size the slave's loops over its queues, its registration and its clients' routes:
    the master's are held to the bounds the broker's own updateTopic enforces; the other topics are adopted."""
    bad = {**TopicConfig("Bad", 2, 2).to_json(), "readQueueNums": read, "writeQueueNums": write}
    master = Master({**GOOD, TOPICS: {"topicConfigTable": {**GOOD[TOPICS]["topicConfigTable"], "Bad": bad}}})

    async def main() -> None:
        async with slave_of(master, tmp_path) as slave:
            with caplog.at_level(logging.INFO, "txmq.broker"):
                for _ in range(3):  # one line, not one per sync
                    await slave.slave_synchronize.sync_all()
            table = slave.topic_config_manager.table
            assert "Bad" not in table and table["T"].read_queue_nums == 2
            lines = [r.getMessage() for r in caplog.records if "Bad" in r.getMessage()]
            assert len(lines) == 1 and "queue numbers" in lines[0], lines

    asyncio.run(main())


def test_a_slave_s_offset_table_taken_from_its_master_counts_against_its_bound(tmp_path: Path) -> None:
    """The offsets a slave takes from its master are its table's entries (``consumerOffsetMaxEntries``): a new
    offset beyond them is refused, as on a master (serving as one, once promoted). (The count of entries was not
    the adopted table's: 0 after the copy, new offsets were taken beyond the bound.)"""
    master = Master({**GOOD, OFFSETS: {"offsetTable": {"T@g": {"0": 5, "1": 5}}}})

    async def main() -> None:
        async with slave_of(master, tmp_path, consumer_offset_max_entries=2) as slave:
            await slave.slave_synchronize.sync_all()
            offsets = slave.consumer_offset_manager
            assert offsets.query("g", "T", 1) == 5
            assert not offsets.commit("other", "T", 0, 1)
            assert offsets.commit("g", "T", 0, 6)

    asyncio.run(main())


def test_a_slave_takes_its_master_s_subscription_groups_and_keeps_them_across_a_restart(tmp_path: Path) -> None:
    """RocketMQ's syncSubscriptionGroupConfig: a group an operator changed on the master (here paused,
    ``consumeEnable=false``) is the slave's too, a group the master dropped is dropped, a document that does not
    parse is left out, and an unchanged copy appends nothing to the slave's journal."""
    paused = SubscriptionGroupConfig("g", consume_enable=False).to_json()
    retried = SubscriptionGroupConfig("r", retry_max_times=3).to_json()
    master = Master({**GOOD, GROUPS: {"subscriptionGroupTable": {"g": paused, "r": retried, "bad name!": {}}}})

    async def main() -> None:
        async with slave_of(master, tmp_path) as slave:
            groups = slave.subscription_group_manager
            await slave.slave_synchronize.sync_all()
            assert sorted(groups.table) == ["g", "r"] and groups.table["r"].retry_max_times == 3
            appended = groups.journal.records
            await slave.slave_synchronize.sync_all()
            assert groups.journal.records == appended
            master.bodies[GROUPS] = {"subscriptionGroupTable": {"r": retried}}
            await slave.slave_synchronize.sync_all()
            assert sorted(groups.table) == ["r"]
        async with serving(tmp_path, broker_role="SLAVE", broker_id=1) as (restarted, _):
            assert sorted(restarted.subscription_group_manager.table) == ["r"]

    asyncio.run(main())


def test_a_copy_that_cannot_be_stored_is_one_log_line_for_the_run(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk under the slave's config journal: each copy's write fails (every 3 s); one line says so, not a
    traceback each time, and one more when copies are stored again."""
    master = Master(dict(GOOD))

    async def main() -> None:
        async with slave_of(master, tmp_path) as slave:
            sync = slave.slave_synchronize
            groups = slave.subscription_group_manager

            def full(document: Any) -> asyncio.Future[None]:
                done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                done.set_exception(OSError(28, "No space left on device"))
                return done

            monkeypatch.setattr(groups.journal, "append_soon", lambda *args: full(args[0]))
            with caplog.at_level(logging.INFO, "txmq.broker"):
                for n in range(3):
                    master.bodies[GROUPS] = {"subscriptionGroupTable": {
                        f"g{n}": SubscriptionGroupConfig(f"g{n}").to_json()}}
                    await sync.sync_all()  # raised OSError before
                monkeypatch.undo()
                await sync.sync_all()
            lines = [r for r in caplog.records if "slave synchronize" in r.getMessage()]
            assert [r.exc_info for r in lines] == [None, None], [r.getMessage() for r in lines]
            assert "could not be stored" in lines[0].getMessage() and "works again" in lines[1].getMessage()
            assert sorted(groups.table) == ["g2"]

    asyncio.run(main())


def test_a_topics_copy_whose_write_failed_is_written_by_the_next_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copied topics are served from memory when their write fails; the next copy, though its table is the
    same, writes them, so a restart reads what was served (it read the table before the failure)."""
    master = Master(dict(GOOD))

    async def main() -> None:
        async with slave_of(master, tmp_path) as slave:
            topics = slave.topic_config_manager

            def full(document: Any) -> asyncio.Future[None]:
                done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                done.set_exception(OSError(28, "No space left on device"))
                return done

            monkeypatch.setattr(topics.journal, "replace_soon", full)
            await slave.slave_synchronize.sync_all()
            assert "T" in topics.table
            monkeypatch.undo()
            await slave.slave_synchronize.sync_all()
            stored = orjson.loads(topics.journal.path.read_bytes())["topicConfigTable"]
            assert stored["T"]["readQueueNums"] == 2, sorted(stored)

    asyncio.run(main())
