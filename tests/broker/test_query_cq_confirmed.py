"""QUERY_CONSUME_QUEUE (mqadmin ``queryCq``) under a confirm offset (controller mode, on a master with slaves or
on a slave): the entries whose records end past it are not yet readable by consumers, and RocketMQ's consume queue
does not hold them yet (its dispatch stops at the confirm offset), so the admin view lists the queue up to it, as
a pull sees it. A broker on a real socket; the confirm offset set on its store as replication sets it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from tests.broker.test_journal_off_loop import _send, serving
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient


def test_entries_past_the_confirm_offset_are_not_listed(tmp_path: Path) -> None:
    async def main() -> list[dict]:
        async with serving(tmp_path) as (broker, addr):
            client = RemotingClient()
            try:
                ends = []
                for _ in range(5):
                    sent = await client.invoke(addr, _send("ConfirmedCq"), 5)
                    assert sent.code == ResponseCode.SUCCESS, sent.remark
                    ends.append(broker.store.max_phy_offset)
                queue = next(q for q in range(8) if broker.store.get_max_offset_in_queue("ConfirmedCq", q) == 5)

                async def query(index: int) -> tuple[dict, str]:
                    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.QUERY_CONSUME_QUEUE, {
                        "topic": "ConfirmedCq", "queueId": str(queue), "index": str(index), "count": "10"}), 5)
                    assert resp.code == ResponseCode.SUCCESS, resp.remark
                    return orjson.loads(resp.body), resp.remark or ""

                everything, _ = await query(0)
                broker.store.set_confirm_offset(ends[1])  # the first two records acknowledged by the in-sync set
                confirmed, _ = await query(0)
                past, remark = await query(2)
                broker.store.set_confirm_offset(None)
                again, _ = await query(0)
                return [everything, confirmed, past, again, {"remark": remark}]
            finally:
                await client.close()

    everything, confirmed, past, again, remark = asyncio.run(main())
    assert len(everything["queueData"]) == 5 and everything["maxQueueIndex"] == 5
    assert confirmed["queueData"] == everything["queueData"][:2] and confirmed["maxQueueIndex"] == 2
    assert past["queueData"] == [] and "past the queue's end (2)" in remark["remark"]
    assert again == everything
