"""Long polling without a task: a held pull is answered from the store's arrival listener, in the loop callback that
writes the message that wakes it, or from its own timer; a connection that closes drops its held pulls unanswered,
and a gRPC pull whose call is cancelled is released. A real broker in this process, over sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
from pathlib import Path

from google.protobuf.duration_pb2 import Duration

from tests.broker.test_journal_off_loop import _pull, _until, serving, serving_grpc
from tests.remoting.test_transport import TransportSpy
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.message import MessageExt
from txmq.remoting.codes import ResponseCode
from txmq.remoting.transport import RemotingClient, RemotingConnectError
from txmq.store import PutMessageResult
from txmq.topic import TopicConfig


def test_a_held_pull_is_answered_in_the_write_that_wakes_it_and_costs_no_task(tmp_path: Path) -> None:
    """Held pulls leave no task behind them; the put that wakes them finds their answers handed to the socket by
    the time the put itself is answered (same loop callback: nothing else ran between the write and the answer),
    those of one connection in one write. A held pull whose time is up is answered PULL_NOT_FOUND by its timer."""
    async def main() -> None:
        async with serving(tmp_path) as (broker, addr), RemotingClient() as client:
            await broker.topic_config_manager.update(TopicConfig("T", 1, 1))
            await broker.topic_config_manager.update(TopicConfig("Quiet", 1, 1))
            held = [asyncio.ensure_future(client.invoke(addr, _pull(f"g{i}", "T", suspend_ms=30_000), 40))
                    for i in range(3)]
            timed = asyncio.ensure_future(client.invoke(addr, _pull("g", "Quiet", suspend_ms=300), 10))
            await _until(lambda: broker.core.pulls.hold_service.held == 4)
            (conn,) = broker.server.connections
            assert not conn.tasks  # none per held pull
            spy = TransportSpy(conn._transport)
            conn._transport = spy  # type: ignore[assignment]
            handed_at_answer: list[list[int]] = []

            def answer(result: PutMessageResult) -> PutMessageResult:
                handed_at_answer.append(list(spy.handed))
                return result

            put = broker.store.put_message(MessageExt("T", b"wakes them", {}, queue_id=0), answer)
            assert (await put).ok
            assert handed_at_answer == [[3]]
            replies = await asyncio.gather(*held)
            assert [r.code for r in replies] == [ResponseCode.SUCCESS] * 3
            assert (await timed).code == ResponseCode.PULL_NOT_FOUND
            assert broker.core.pulls.hold_service.held == 0

    asyncio.run(main())


def test_held_pulls_of_a_closed_connection_and_a_cancelled_grpc_call_are_released(tmp_path: Path) -> None:
    """A remoting connection that closes with pulls held, and a gRPC PullMessage cancelled while held, leave no held
    pull behind (nor its timer): the next message wakes nobody and is read by the next pull."""
    async def main() -> None:
        async with serving_grpc(tmp_path) as (broker, addr, client, stub):
            await broker.topic_config_manager.update(TopicConfig("T", 1, 1))
            dropped = [asyncio.ensure_future(client.invoke(addr, _pull(f"g{i}", "T", suspend_ms=30_000), 40))
                       for i in range(2)]
            call = stub.PullMessage(spb.PullMessageRequest(
                group=pb.Resource(name="grpc"), message_queue=pb.MessageQueue(topic=pb.Resource(name="T"), id=0),
                offset=0, batch_size=32, filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                long_polling_timeout=Duration(seconds=20)), metadata=[("x-mq-client-id", "c")], timeout=30)
            await _until(lambda: broker.core.pulls.hold_service.held == 3)
            call.cancel()
            await _until(lambda: broker.core.pulls.hold_service.held == 2)
            await client.close()
            assert all(isinstance(e, RemotingConnectError)
                       for e in await asyncio.gather(*dropped, return_exceptions=True))
            await _until(lambda: broker.core.pulls.hold_service.held == 0)
            assert not broker.core.pulls.hold_service.waiters
            assert (await broker.store.put_message(MessageExt("T", b"after", {}, queue_id=0))).ok
            async with RemotingClient() as again:
                reply = await again.invoke(addr, _pull("g0", "T", suspend_ms=30_000), 10)
                assert reply.code == ResponseCode.SUCCESS

    asyncio.run(main())
