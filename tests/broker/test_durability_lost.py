"""A real broker (SYNC_FLUSH) whose commit-log fsync fails once with EIO, over real sockets: the send whose fsync
failed is answered FLUSH_DISK_TIMEOUT (stored, not durable), later sends are refused SERVICE_NOT_AVAILABLE saying
the disk failed an fsync and the broker must be restarted, and brokerStatus shows it; restarted on the same store,
the broker takes sends again and every send answered SUCCESS before the failure is there."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from tests.broker.test_journal_off_loop import _send, serving
from tests.store.test_store_fsync_failure import fail_once
from txmq.message import decode_message
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient
from txmq.store.config import FlushDiskType
from txmq.topic import TopicConfig

TOPIC = "Durable"
SYNC_FLUSH = {"flush_disk_type": FlushDiskType.SYNC_FLUSH}


def test_a_failed_fsync_refuses_sends_until_a_restart_and_loses_no_acknowledged_send(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def send(client: RemotingClient, addr: str, body: bytes) -> RemotingCommand:
        return await client.invoke(addr, _send(TOPIC, body=body), 10)

    async def before_and_during() -> list[bytes]:
        acknowledged = []
        async with serving(tmp_path, store=SYNC_FLUSH) as (broker, addr), RemotingClient() as client:
            await broker.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))
            for i in range(3):
                body = b"before %d" % i
                reply = await send(client, addr, body)
                assert reply.code == ResponseCode.SUCCESS, reply.remark
                acknowledged.append(body)
            failed = fail_once(monkeypatch, "commitlog")
            reply = await send(client, addr, b"during")
            assert failed and reply.code == ResponseCode.FLUSH_DISK_TIMEOUT, (reply.code, reply.remark)
            reply = await send(client, addr, b"after")
            assert reply.code == ResponseCode.SERVICE_NOT_AVAILABLE, (reply.code, reply.remark)
            assert "failed an fsync" in (reply.remark or "") and "restarted" in (reply.remark or ""), reply.remark
            info = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 10)
            assert orjson.loads(info.body)["table"]["durability_lost"] == "1"
        return acknowledged

    async def restarted(acknowledged: list[bytes]) -> None:
        async with serving(tmp_path, store=SYNC_FLUSH) as (broker, addr), RemotingClient() as client:
            reply = await send(client, addr, b"after the restart")
            assert reply.code == ResponseCode.SUCCESS, reply.remark
            got = broker.store.get_message(TOPIC, 0, 0, 100, 1 << 30)
            stored = [decode_message(w)[0].body for w in got.messages]
            assert stored[: len(acknowledged)] == acknowledged and stored[-1] == b"after the restart", stored

    acknowledged = asyncio.run(before_and_during())
    monkeypatch.undo()
    asyncio.run(restarted(acknowledged))
