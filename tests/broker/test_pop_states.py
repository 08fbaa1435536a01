"""Pop's per-group state (``PopService.states``, one per group, topic and queue a receive names) is bounded
(``popStateMaxEntries``): a client receiving under ever new group names does not grow the broker's memory. A
state with nothing in flight is dropped to make room (it is read again from the group's committed offset), then one
whose deliveries are all overdue; when every state holds a delivery still invisible, a receive that needs a new
one is refused TOO_MANY_REQUESTS, nothing lost.
A state goes, too, when what it read on from goes: its group's offsets set by an operator, its topic or its group
deleted."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.broker.test_journal_off_loop import _grpc_received, _send, serving_grpc
from txmq.broker.controller import BrokerController
from txmq.broker.core import pop as pop_module
from txmq.broker.subscription_group_manager import SubscriptionGroupConfig
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub
from txmq.remoting.admin_headers import DeleteSubscriptionGroupRequestHeader, ResetOffsetRequestHeader
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient
from txmq.topic import TopicConfig

TOPIC = "Popped"


async def _acked(stub: MessagingServiceStub, group: str, messages: list[pb.Message]) -> None:
    """``group`` acks ``messages`` (each answered OK)."""
    answer = await stub.AckMessage(spb.AckMessageRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=TOPIC), entries=[spb.AckMessageEntry(
            message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle)
            for m in messages]), timeout=10)
    assert answer.status.code == pb.Code.OK, answer.status
    assert [e.status.code for e in answer.entries] == [pb.Code.OK] * len(messages), answer.entries


async def _consumed(stub: MessagingServiceStub, group: str) -> list[bytes]:
    """``group`` receives what it has not consumed yet and acks it: the bodies."""
    got, codes = await _grpc_received(stub, TOPIC, 30_000, group=group)
    assert codes == [pb.Code.OK], (group, codes)
    await _acked(stub, group, got)
    return [m.body for m in got]


async def _overdue(due: float) -> None:
    """Until deliveries invisible until ``due`` (monotonic) count as left by their group (``ABANDONED_GRACE_MS``
    past it)."""
    await asyncio.sleep(max(0.0, due + pop_module.ABANDONED_GRACE_MS / 1000 - time.monotonic()) + 0.05)


async def _two_consumed(broker: BrokerController, addr: str, client: RemotingClient,
                        stub: MessagingServiceStub) -> None:
    """A one-queue topic holding m0 and m1, which group ``g`` received and acked: its pop state exists."""
    await broker.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))
    for body in (b"m0", b"m1"):
        assert (await client.invoke(addr, _send(TOPIC, body=body), 10)).code == ResponseCode.SUCCESS
    assert await _consumed(stub, "g") == [b"m0", b"m1"]


def test_pop_states_stay_within_the_bound_dropping_idle_ones_and_refusing_when_all_hold_messages(
        tmp_path: Path) -> None:
    async def main() -> None:
        async with serving_grpc(tmp_path, pop_state_max_entries=4) as (broker, addr, client, stub):
            pop = broker.core.pop
            await broker.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))  # one queue: one state per group
            assert (await client.invoke(addr, _send(TOPIC, body=b"m0"), 10)).code == ResponseCode.SUCCESS
            kept, _ = await _grpc_received(stub, TOPIC, 30_000, group="kept")
            await _acked(stub, "kept", kept)
            assert (await client.invoke(addr, _send(TOPIC, body=b"m1"), 10)).code == ResponseCode.SUCCESS
            for i in range(10):  # made-up groups, each consuming all
                assert await _consumed(stub, f"made_up{i}") == [b"m0", b"m1"]
                assert len(pop.states) <= 4
            assert len(pop.states) == 4
            assert ("kept", TOPIC, 0) not in pop.states
            await _acked(stub, "kept", kept)  # acking twice is harmless, the state dropped or not

            # dropped, the group reads on from its committed offset: m1, a first delivery
            (again,), _ = await _grpc_received(stub, TOPIC, 30_000, group="kept")
            assert (again.body, again.system_properties.delivery_attempt) == (b"m1", 1)

            held = [(await _grpc_received(stub, TOPIC, 30_000, group=f"holder{i}"))[0] for i in range(3)]
            assert [len(h) for h in held] == [2, 2, 2]
            assert len(pop.states) == 4  # every state holds messages in flight
            refused, codes = await _grpc_received(stub, TOPIC, 30_000, group="one_too_many")
            assert (refused, codes) == ([], [pb.Code.TOO_MANY_REQUESTS])
            assert len(pop.states) == 4

            await _acked(stub, "kept", [again])  # nothing in flight: room for one more
            assert await _consumed(stub, "one_too_many") == [b"m0", b"m1"]
            assert len(pop.states) == 4

    asyncio.run(main())


def test_states_whose_groups_left_their_deliveries_overdue_make_room_for_new_groups(tmp_path: Path) -> None:
    """Groups that received and left, their deliveries never acked, do not lock new groups out for good: once every
    delivery of a state is overdue (no receive of its group came to deliver them again), the state may be dropped,
    the longest untouched first, and its group reads on from its committed offset (what it had in flight comes
    again as a first attempt). A state with a delivery still invisible is kept."""
    async def main() -> None:
        async with serving_grpc(tmp_path, pop_state_max_entries=3) as (broker, addr, client, stub):
            pop = broker.core.pop
            await broker.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))
            for body in (b"m0", b"m1"):
                assert (await client.invoke(addr, _send(TOPIC, body=body), 10)).code == ResponseCode.SUCCESS
            invisible_ms = 2000
            for group in ("left0", "left1"):
                got, _ = await _grpc_received(stub, TOPIC, invisible_ms, group=group)
                assert [m.body for m in got] == [b"m0", b"m1"]
            due = time.monotonic() + invisible_ms / 1000  # no later than the leavers' deadlines
            holding, _ = await _grpc_received(stub, TOPIC, 30_000, group="holding")
            assert len(holding) == 2
            # every state holds a delivery still invisible: refused, as before
            assert await _grpc_received(stub, TOPIC, 30_000, group="newcomer") == ([], [pb.Code.TOO_MANY_REQUESTS])
            # just past their deadlines, the leavers' states are left to a receive of their own group
            await asyncio.sleep(max(0.0, due - time.monotonic()) + 0.05)
            assert await _grpc_received(stub, TOPIC, 30_000, group="newcomer") == ([], [pb.Code.TOO_MANY_REQUESTS])

            await _overdue(due)  # the leavers' deliveries are overdue by the grace
            assert await _consumed(stub, "newcomer") == [b"m0", b"m1"]
            assert set(pop.states) == {("left1", TOPIC, 0), ("holding", TOPIC, 0), ("newcomer", TOPIC, 0)}

            # dropped, "left0" reads on from its committed offset: its messages again, as first attempts
            again, _ = await _grpc_received(stub, TOPIC, 30_000, group="left0")
            assert [(m.body, m.system_properties.delivery_attempt) for m in again] == [(b"m0", 1), (b"m1", 1)]
            # idle states go before overdue ones: "newcomer" (all acked) made the room, "left1" is still kept
            assert set(pop.states) == {("left0", TOPIC, 0), ("left1", TOPIC, 0), ("holding", TOPIC, 0)}
            await _acked(stub, "holding", holding)  # kept throughout: its handles still ack

    asyncio.run(main())


def test_a_state_whose_offset_only_it_knows_is_dropped_after_those_the_offset_table_holds(tmp_path: Path) -> None:
    """With the offset table full (consumerOffsetMaxEntries), a new group's committed offset is kept by its pop
    state alone: such a state is dropped only when no state the offset table holds can be, though it was idle
    longer; dropped, its group reads the queue again from its first offset, as after a restart."""
    async def main() -> None:
        async with serving_grpc(tmp_path, pop_state_max_entries=2, consumer_offset_max_entries=1) as (
                broker, addr, client, stub):
            pop = broker.core.pop
            await broker.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))
            assert (await client.invoke(addr, _send(TOPIC, body=b"m0"), 10)).code == ResponseCode.SUCCESS
            kept, _ = await _grpc_received(stub, TOPIC, 30_000, group="kept")  # the offset table's one entry
            assert await _consumed(stub, "unkept") == [b"m0"]
            await _acked(stub, "kept", kept)  # idle after "unkept"
            (held,), _ = await _grpc_received(stub, TOPIC, 30_000, group="third")
            assert set(pop.states) == {("unkept", TOPIC, 0), ("third", TOPIC, 0)}
            assert await _grpc_received(stub, TOPIC, 30_000, group="kept") == ([], [pb.Code.MESSAGE_NOT_FOUND])
            assert set(pop.states) == {("kept", TOPIC, 0), ("third", TOPIC, 0)}
            (again,), _ = await _grpc_received(stub, TOPIC, 30_000, group="unkept")
            assert (again.body, again.system_properties.delivery_attempt) == (b"m0", 1)
            assert set(pop.states) == {("unkept", TOPIC, 0), ("third", TOPIC, 0)}
            await _acked(stub, "third", [held])

    asyncio.run(main())


def test_a_receive_reads_from_where_an_operator_reset_the_group_s_offsets(tmp_path: Path) -> None:
    """An operator's resetOffset (remoting INVOKE_BROKER_TO_RESET_OFFSET) moves the group's offsets while its pop
    states exist: its next receive reads from there, as after gRPC's UpdateOffset. (The states were kept: the
    group read on from where it was, and its next ack wrote the old offset over the reset one.)"""
    async def main() -> None:
        async with serving_grpc(tmp_path) as (broker, addr, client, stub):
            await _two_consumed(broker, addr, client, stub)
            reset = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                                            ResetOffsetRequestHeader(TOPIC, "g", 0).to_ext())
            assert (await client.invoke(addr, reset, 10)).code == ResponseCode.SUCCESS
            assert broker.consumer_offset_manager.query("g", TOPIC, 0) == 0
            assert await _consumed(stub, "g") == [b"m0", b"m1"]
            assert broker.consumer_offset_manager.query("g", TOPIC, 0) == 2

    asyncio.run(main())


def test_a_group_receives_a_deleted_then_recreated_topic_from_its_first_message(tmp_path: Path) -> None:
    """A topic deleted (DELETE_TOPIC_IN_BROKER: its messages and offsets go) and created again starts its queues
    at 0: a group that received from the old one reads the new one from its first message. (Its pop state was
    kept: it read on from the old topic's offset, and the new topic's messages below it never reached the group.)"""
    async def main() -> None:
        async with serving_grpc(tmp_path) as (broker, addr, client, stub):
            await _two_consumed(broker, addr, client, stub)
            deleted = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": TOPIC})
            assert (await client.invoke(addr, deleted, 10)).code == ResponseCode.SUCCESS
            await broker.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))
            assert (await client.invoke(addr, _send(TOPIC, body=b"new"), 10)).code == ResponseCode.SUCCESS
            assert await _consumed(stub, "g") == [b"new"]

    asyncio.run(main())



def test_a_group_deleted_with_its_offsets_receives_again_as_a_new_group(tmp_path: Path) -> None:
    """A group deleted with its offsets (DELETE_SUBSCRIPTIONGROUP, cleanOffset) starts again as a new group, at
    the queue's first message; its old offsets stay gone until it acks. (Its pop states were kept: it read on from
    where it was, and its next ack wrote back an offset the operator had cleaned.)"""
    async def main() -> None:
        async with serving_grpc(tmp_path) as (broker, addr, client, stub):
            await broker.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))
            assert (await client.invoke(addr, _send(TOPIC, body=b"m0"), 10)).code == ResponseCode.SUCCESS
            await broker.subscription_group_manager.update(SubscriptionGroupConfig("g"))
            assert await _consumed(stub, "g") == [b"m0"]
            deleted = RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP,
                                              DeleteSubscriptionGroupRequestHeader("g", True).to_ext())
            assert (await client.invoke(addr, deleted, 10)).code == ResponseCode.SUCCESS
            assert broker.consumer_offset_manager.query("g", TOPIC, 0) == -1
            assert await _consumed(stub, "g") == [b"m0"]

    asyncio.run(main())


def test_a_group_deleted_with_its_offsets_makes_room_in_a_full_offset_table(tmp_path: Path) -> None:
    """With the offset table full (consumerOffsetMaxEntries), a group deleted with its offsets frees their entries:
    the next group's committed offset is kept. (The table's count of entries was not lowered by a group's deletion:
    full for good, every new group's pop state was the only holder of its offset.)"""
    async def main() -> None:
        async with serving_grpc(tmp_path, consumer_offset_max_entries=1) as (broker, addr, client, stub):
            offsets = broker.consumer_offset_manager
            await broker.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))
            await broker.subscription_group_manager.update(SubscriptionGroupConfig("g"))
            assert (await client.invoke(addr, _send(TOPIC, body=b"m0"), 10)).code == ResponseCode.SUCCESS
            assert await _consumed(stub, "g") == [b"m0"]
            deleted = RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP,
                                              DeleteSubscriptionGroupRequestHeader("g", True).to_ext())
            assert (await client.invoke(addr, deleted, 10)).code == ResponseCode.SUCCESS
            assert offsets.table == {}
            assert await _consumed(stub, "h") == [b"m0"]
            assert offsets.query("h", TOPIC, 0) == 1

    asyncio.run(main())


def test_states_still_invisible_do_not_hide_from_new_groups_those_their_groups_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A receive that needs room looks at a bounded number of deliveries (``ABANDONED_SCAN``, here 2), and the
    states it looked at and kept go last: states untouched longest whose deliveries are still invisible do not
    hide, for as long as they hold them, a state behind them whose group left. A new group gets room within a few
    receives."""
    monkeypatch.setattr(pop_module, "ABANDONED_SCAN", 2)

    async def main() -> None:
        async with serving_grpc(tmp_path, pop_state_max_entries=4) as (broker, addr, client, stub):
            await broker.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))
            for body in (b"m0", b"m1"):
                assert (await client.invoke(addr, _send(TOPIC, body=body), 10)).code == ResponseCode.SUCCESS
            for group in ("holding0", "holding1", "holding2"):
                assert len((await _grpc_received(stub, TOPIC, 30_000, group=group))[0]) == 2
            invisible_ms = 200
            assert len((await _grpc_received(stub, TOPIC, invisible_ms, group="left"))[0]) == 2
            due = time.monotonic() + invisible_ms / 1000  # no later than the leaver's deadlines
            await _overdue(due)  # the leaver's deliveries are overdue
            codes = []
            while pb.Code.OK not in codes and len(codes) < 4:
                codes += (await _grpc_received(stub, TOPIC, 30_000, group="newcomer"))[1]
            assert codes[-1] == pb.Code.OK, codes
            assert ("left", TOPIC, 0) not in broker.core.pop.states

    asyncio.run(main())


def test_states_whose_groups_left_make_room_with_the_offset_table_full(tmp_path: Path) -> None:
    """With the offset table full (consumerOffsetMaxEntries, which groups that come and go fill first: their offsets
    stay when their states go), a new group's offset is kept by its pop state alone; such a state, its deliveries
    all overdue, is dropped too, after those the offset table holds: otherwise groups that receive and leave would
    lock new groups out for good again once the table is full. Its group then reads the queue from its first
    offset, as after a restart."""
    async def main() -> None:
        async with serving_grpc(tmp_path, pop_state_max_entries=2, consumer_offset_max_entries=1) as (
                broker, addr, client, stub):
            pop = broker.core.pop
            await broker.topic_config_manager.update(TopicConfig(TOPIC, 1, 1))
            for body in (b"m0", b"m1"):
                assert (await client.invoke(addr, _send(TOPIC, body=body), 10)).code == ResponseCode.SUCCESS
            invisible_ms = 200
            for group in ("left_kept", "left_unkept"):  # the first takes the offset table's one entry
                assert len((await _grpc_received(stub, TOPIC, invisible_ms, group=group))[0]) == 2
            due = time.monotonic() + invisible_ms / 1000  # no later than the leavers' deadlines
            await _overdue(due)  # both leavers' deliveries are overdue
            assert len((await _grpc_received(stub, TOPIC, 30_000, group="newcomer"))[0]) == 2
            assert set(pop.states) == {("left_unkept", TOPIC, 0), ("newcomer", TOPIC, 0)}
            got, codes = await _grpc_received(stub, TOPIC, 30_000, group="third")
            assert codes == [pb.Code.OK] and len(got) == 2, codes
            assert set(pop.states) == {("newcomer", TOPIC, 0), ("third", TOPIC, 0)}

    asyncio.run(main())
