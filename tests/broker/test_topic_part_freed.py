"""The cache of encoded topic names (``txmq.message``: 16,384 slots, none admitted once full) frees a topic's slot
when the topic is deleted (DELETE_TOPIC_IN_BROKER), so that slots of topics that are gone do not keep new topics'
out. A broker on a real socket, in a process of its own: the cache is the process's, and the suite's earlier tests in
the same worker may have filled it (a full cache admits no new topic, so there would be no slot to free)."""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tests.broker.test_journal_off_loop import _send, serving
from txmq.message import _topic_part, forget_topic
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient


def _delete_and_look(tmp_path: Path) -> None:
    """Send to a topic, delete it, and check its slot was freed; runs in a fresh process (an empty cache)."""
    async def main() -> None:
        async with serving(tmp_path) as (broker, addr):
            client = RemotingClient()
            try:
                sent = await client.invoke(addr, _send("SoonGone"), 5)
                assert sent.code == ResponseCode.SUCCESS, sent.remark
                deleted = await client.invoke(addr, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER,
                                                                            {"topic": "SoonGone"}), 5)
                assert deleted.code == ResponseCode.SUCCESS, deleted.remark
                await broker.topic_config_manager.durable("SoonGone")  # the deletion's callbacks have run
            finally:
                await client.close()

    asyncio.run(main())
    assert not forget_topic("SoonGone")  # already freed by the deletion
    _topic_part("SoonGone")
    assert forget_topic("SoonGone") and not forget_topic("SoonGone")


def test_a_deleted_topic_s_slot_is_freed(tmp_path: Path) -> None:
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(_delete_and_look, tmp_path).result(timeout=120)  # raises the child's assertion, if any
