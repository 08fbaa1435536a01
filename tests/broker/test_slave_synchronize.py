"""A slave's copy of its master's metadata (``SlaveSynchronize``) from replies that do not have the shape they
should: the peer's bytes are parsed once, before anything is adopted, and a reply that does not parse is one log
line for the run of failed syncs (not a traceback every 3 s), adopts nothing, and the next sync goes on."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.broker.test_journal_off_loop import serving
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.server import RemotingServer
from txmq.remoting.transport import Connection
from txmq.topic import TopicConfig

TOPICS, OFFSETS, DELAYS = (RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_ALL_CONSUMER_OFFSET,
                           RequestCode.GET_ALL_DELAY_OFFSET)
GOOD: dict[int, Any] = {TOPICS: {"topicConfigTable": {"T": TopicConfig("T", 2, 2).to_json()}},
                        OFFSETS: {"offsetTable": {"T@g": {"0": 5}}}, DELAYS: {"offsetTable": {"1": 7}}}


class Master:
    """A peer answering the three requests with the documents in ``bodies``."""

    def __init__(self, bodies: dict[int, Any]) -> None:
        self.bodies = bodies

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=orjson.dumps(self.bodies[cmd.code]))


@pytest.mark.parametrize("code, body", [
    (TOPICS, []), (TOPICS, {"topicConfigTable": ["T"]}), (OFFSETS, {"offsetTable": {"T@g": [5]}}),
    (OFFSETS, {"offsetTable": {"T@g": {"0": "x"}}}), (OFFSETS, {"offsetTable": {"T@g": {"0": [1]}}}),
    (DELAYS, {"offsetTable": {"1": None}}), (DELAYS, "text"),
], ids=["topics-list", "table-list", "queues-list", "offset-text", "offset-list", "delay-null", "delays-text"])
def test_a_malformed_reply_of_the_master_is_one_log_line_and_adopts_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, code: int, body: Any) -> None:
    master = Master({**GOOD, code: body})

    async def main() -> None:
        server = RemotingServer(master)
        await server.start()
        try:
            async with serving(tmp_path, broker_role="SLAVE", broker_id=1) as (slave, _):
                sync = slave.slave_synchronize
                sync.master_addr = f"127.0.0.1:{server.port}"
                with caplog.at_level(logging.INFO, "txmq.broker"):
                    for _ in range(3):
                        await sync.sync_all()
                lines = [r for r in caplog.records if "slave synchronize" in r.getMessage()]
                assert len(lines) == 1 and lines[0].exc_info is None, [r.getMessage() for r in lines]
                assert "T" not in slave.topic_config_manager.table
                assert slave.consumer_offset_manager.query("g", "T", 0) < 0
                master.bodies.update(GOOD)
                await sync.sync_all()
                assert slave.topic_config_manager.table["T"].read_queue_nums == 2
                assert slave.consumer_offset_manager.query("g", "T", 0) == 5
        finally:
            await server.close()

    asyncio.run(main())
