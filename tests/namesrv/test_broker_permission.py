"""The broker's permission (RocketMQ's ``brokerPermission``) and the name server's WIPE_WRITE_PERM_OF_BROKER /
ADD_WRITE_PERM_OF_BROKER, with a real name server and real brokers in this process over sockets on 127.0.0.1:
a broker that does not write registers every topic without write and refuses sends on both protocols, one that
does not read refuses pulls, a store that lost durability makes its broker read-only in the routes, and a wipe at
the name server lasts until the broker registers a changed topic table."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
from google.protobuf.duration_pb2 import Duration

from tests.acl.conftest import ADMIN, ATTACKER, PLAIN_ACL
from tests.broker.test_journal_off_loop import _grpc_received, _pull, _send, _send_back
from tests.broker.test_journal_off_loop import _until as until
from tests.namesrv.test_registration_version import _registration, broker_of, namesrv, queue
from tests.store.test_store_fsync_failure import fail_once
from txmq.acl.setup import namesrv_validator
from txmq.acl.signer import AclClientRPCHook
from txmq.broker.controller import BrokerController
from txmq.conf import parse_properties
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub
from txmq.namesrv.controller import NamesrvController
from txmq.ports import free_port
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient
from txmq.store.config import FlushDiskType
from txmq.topic import TopicConfig

FORBIDDEN_SEND = "the broker[127.0.0.1] sending message is forbidden"


async def perm_of(ns: NamesrvController, topic: str, perm: int) -> None:
    """Until the name server routes ``topic`` of broker ``b`` with ``perm``."""
    await until(lambda: (qd := queue(ns, topic)) is not None and qd.perm == perm)


async def update_config(client: RemotingClient, addr: str, key: str, value: str) -> None:
    reply = await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG,
                                                              body=f"{key}={value}\n".encode()), 10)
    assert reply.code == ResponseCode.SUCCESS, reply.remark


async def served(client: RemotingClient, broker: BrokerController) -> tuple[str, str]:
    """(brokerPermission as GET_BROKER_CONFIG has it, as GET_BROKER_RUNTIME_INFO shows it served)."""
    addr = broker.config.broker_addr
    config = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG), 10)
    info = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 10)
    return (parse_properties(config.body.decode())["brokerPermission"],
            orjson.loads(info.body)["table"]["brokerPermission"])


async def grpc_send(stub: MessagingServiceStub, topic: str) -> pb.Status:
    message = pb.Message(topic=pb.Resource(name=topic), body=b"x", system_properties=pb.SystemProperties(
        message_id="0A0000000000000000000000000000B1", body_encoding=pb.IDENTITY, message_type=pb.NORMAL))
    answer = await stub.SendMessage(spb.SendMessageRequest(messages=[message]),
                                    metadata=[("x-mq-client-id", "c")], timeout=10)
    return answer.status


async def grpc_route(stub: MessagingServiceStub, topic: str) -> set[int]:
    """The permissions of ``topic``'s queues in the broker's own gRPC route."""
    answer = await stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
                                   metadata=[("x-mq-client-id", "c")], timeout=10)
    assert answer.status.code == pb.Code.OK, answer.status
    return {q.permission for q in answer.message_queues}


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, **broker: Any) -> AsyncIterator[
        tuple[NamesrvController, BrokerController, RemotingClient, MessagingServiceStub]]:
    """A name server and broker ``b`` (its gRPC endpoint on), a remoting client and a gRPC stub of the broker."""
    grpc_port = free_port()
    async with (namesrv() as ns, broker_of(ns, tmp_path, broker_name="b", grpc_port=grpc_port, **broker) as b,
                RemotingClient() as client, grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel):
        yield ns, b, client, MessagingServiceStub(channel)


def test_a_read_only_broker_registers_its_topics_without_write_and_refuses_sends(tmp_path: Path) -> None:
    """brokerPermission changed to 4 at run time: registered at once, every topic (and one created afterwards,
    registered alone) routed without write, by the name server and by the broker's gRPC route; remoting and gRPC
    sends, and a consumer's send-back, refused NO_PERMISSION; pulls served. Back to 6, the routes and sends are
    writable again. A read-write broker registers a topic's perm as it is, its inherit bit too."""
    async def main() -> None:
        async with serving(tmp_path) as (ns, broker, client, stub):
            addr = broker.config.broker_addr
            await broker.topic_config_manager.update(TopicConfig("T", 1, 1))
            await perm_of(ns, "T", 6)
            assert (await client.invoke(addr, _send("T"), 10)).code == ResponseCode.SUCCESS

            await broker.topic_config_manager.update(TopicConfig("Inherited", 1, 1, perm=7))  # registered alone
            await perm_of(ns, "Inherited", 7)
            assert await grpc_route(stub, "T") == {pb.READ_WRITE}

            await update_config(client, addr, "brokerPermission", "4")
            await perm_of(ns, "T", 4)
            assert await served(client, broker) == ("4", "4")
            assert await grpc_route(stub, "T") == {pb.READ}
            reply = await client.invoke(addr, _send("T"), 10)
            assert (reply.code, reply.remark) == (ResponseCode.NO_PERMISSION, FORBIDDEN_SEND)
            status = await grpc_send(stub, "T")
            assert (status.code, status.message) == (pb.Code.FORBIDDEN, FORBIDDEN_SEND)
            reply = await client.invoke(addr, _send_back(0, "g", 0), 10)  # the consumer retries through another
            assert (reply.code, reply.remark) == (ResponseCode.NO_PERMISSION, FORBIDDEN_SEND)
            pulled = await client.invoke(addr, _pull("g", "T"), 10)
            assert pulled.code == ResponseCode.SUCCESS, pulled.remark
            await broker.topic_config_manager.update(TopicConfig("Later", 1, 1))
            await perm_of(ns, "Later", 4)

            await update_config(client, addr, "brokerPermission", "6")
            await perm_of(ns, "T", 6)
            await perm_of(ns, "Later", 6)
            assert (await client.invoke(addr, _send("T"), 10)).code == ResponseCode.SUCCESS
            assert (await grpc_send(stub, "T")).code == pb.Code.OK
            assert await grpc_route(stub, "T") == {pb.READ_WRITE}

    asyncio.run(main())


def test_a_write_only_broker_refuses_pulls_on_both_protocols(tmp_path: Path) -> None:
    """brokerPermission=2 from the start: routes without read, sends taken, remoting pulls and gRPC receives
    refused, no gRPC assignment."""
    async def main() -> None:
        async with serving(tmp_path, broker_permission=2) as (ns, broker, client, stub):
            addr = broker.config.broker_addr
            await broker.topic_config_manager.update(TopicConfig("T", 1, 1))
            await perm_of(ns, "T", 2)
            assert (await client.invoke(addr, _send("T"), 10)).code == ResponseCode.SUCCESS
            reply = await client.invoke(addr, _pull("g", "T"), 10)
            assert (reply.code, reply.remark) == (ResponseCode.NO_PERMISSION,
                                                  "the broker[127.0.0.1] pulling message is forbidden")
            messages, codes = await _grpc_received(stub, "T", 30_000)
            assert not messages and codes == [pb.Code.FORBIDDEN], codes
            # a push consumer is assigned nothing to receive from, as RocketMQ's proxy answers it
            assigned = await stub.QueryAssignment(spb.QueryAssignmentRequest(
                topic=pb.Resource(name="T"), group=pb.Resource(name="g")), metadata=[("x-mq-client-id", "c")],
                timeout=10)
            assert (assigned.status.code, assigned.status.message, list(assigned.assignments)) == (
                pb.Code.FORBIDDEN, "no readable queue", [])

    asyncio.run(main())


def test_a_store_that_lost_durability_makes_its_broker_read_only_in_the_routes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The commit log's fsync fails: the broker registers its topics without write at once (producers route away
    at their next route poll), says so in one line, and still refuses a send, and a consumer's send-back, as a store
    that lost durability does; its configured brokerPermission stays 6, the permission it serves is 4, and setting
    6 again does not bring write back."""
    async def main() -> None:
        async with (namesrv() as ns, broker_of(ns, tmp_path, broker_name="b",
                                               store={"flush_disk_type": FlushDiskType.SYNC_FLUSH}) as broker,
                    RemotingClient() as client):
            addr = broker.config.broker_addr
            await broker.topic_config_manager.update(TopicConfig("T", 1, 1))
            await perm_of(ns, "T", 6)
            failed = fail_once(monkeypatch, "commitlog")
            reply = await client.invoke(addr, _send("T"), 10)
            assert failed and reply.code == ResponseCode.FLUSH_DISK_TIMEOUT, (reply.code, reply.remark)
            await perm_of(ns, "T", 4)
            reply = await client.invoke(addr, _send("T"), 10)
            assert reply.code == ResponseCode.SERVICE_NOT_AVAILABLE and "failed an fsync" in reply.remark, reply.remark
            reply = await client.invoke(addr, _send_back(0, "g", 0), 10)  # a consumer's give-back: the same answer
            assert reply.code == ResponseCode.SERVICE_NOT_AVAILABLE and "failed an fsync" in reply.remark, reply.remark
            assert await served(client, broker) == ("6", "4")
            await update_config(client, addr, "brokerPermission", "6")
            assert await served(client, broker) == ("6", "4")
            await broker.registration.register_all()
            assert queue(ns, "T").perm == 4

    with caplog.at_level("WARNING", logger="txmq.broker"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if "now serves permission" in r.getMessage()]
    assert len(lines) == 1 and "R-" in lines[0] and "failed an fsync" in lines[0], lines


def test_a_wiped_write_permission_lasts_until_the_broker_registers_a_changed_table(tmp_path: Path) -> None:
    """WIPE_WRITE_PERM_OF_BROKER takes write off every topic of the broker and answers how many; an unchanged
    registration leaves it so; ADD_WRITE_PERM_OF_BROKER makes them writable again. Wiped again, the broker's next
    registration of a changed topic table puts its own permissions back, as RocketMQ's name server does."""
    async def main() -> None:
        async with namesrv() as ns, broker_of(ns, tmp_path, broker_name="b") as broker, RemotingClient() as client:
            topics = broker.topic_config_manager
            await topics.update(TopicConfig("T", 1, 1))
            await perm_of(ns, "T", 6)
            await broker.registration.register_all()  # the name server records the table's version
            routed = sum("b" in queues for queues in ns.routes.topic_queue_table.values())

            async def write_perm(code: int, field: str) -> int:
                reply = await client.invoke(ns.addr, RemotingCommand.request(code, {"brokerName": "b"}), 10)
                assert reply.code == ResponseCode.SUCCESS, reply.remark
                return int(reply.ext_fields[field])

            assert await write_perm(RequestCode.WIPE_WRITE_PERM_OF_BROKER, "wipeTopicCount") == routed
            assert queue(ns, "T").perm == 4
            await broker.registration.register_all()
            assert queue(ns, "T").perm == 4
            assert await write_perm(RequestCode.ADD_WRITE_PERM_OF_BROKER, "addTopicCount") == routed
            assert queue(ns, "T").perm == 6

            assert await write_perm(RequestCode.WIPE_WRITE_PERM_OF_BROKER, "wipeTopicCount") == routed
            topics.on_change = None  # the change reaches the name server with the next full registration only
            await topics.update(TopicConfig("Other", 1, 1))
            await broker.registration.register_all()
            assert queue(ns, "T").perm == 6 and queue(ns, "Other").perm == 6

    asyncio.run(main())


def test_only_an_admin_may_wipe_or_add_a_broker_s_write_permission(tmp_path: Path) -> None:
    """Under ACL both requests need Update on the cluster: another team's account is refused and changes nothing."""
    (tmp_path / "plain_acl.yml").write_text(PLAIN_ACL)
    acl = namesrv_validator(str(tmp_path / "plain_acl.yml"), tmp_path / "namesrv-auth.json")

    async def main() -> None:
        async with (namesrv(acl=acl) as ns, RemotingClient(rpc_hook=AclClientRPCHook(ADMIN)) as admin,
                    RemotingClient(rpc_hook=AclClientRPCHook(ATTACKER)) as attacker):
            registered = await admin.invoke(ns.addr, _registration("127.0.0.1:1", "b", 0, None, {"T": 1}))
            assert registered.code == ResponseCode.SUCCESS, registered.remark
            for code in (RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER):
                reply = await attacker.invoke(ns.addr, RemotingCommand.request(code, {"brokerName": "b"}), 10)
                assert reply.code == ResponseCode.NO_PERMISSION, (code, reply.code, reply.remark)
            assert queue(ns, "T").perm == 6
            reply = await admin.invoke(ns.addr, RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER,
                                                                        {"brokerName": "b"}), 10)
            assert reply.code == ResponseCode.SUCCESS and reply.ext_fields["wipeTopicCount"] == "1"
            assert queue(ns, "T").perm == 4

    asyncio.run(main())


async def grpc_pulled(stub: MessagingServiceStub, topic: str, poll_s: int) -> list[pb.Status]:
    """The statuses a gRPC PullMessage of queue 0 of ``topic`` from its start answers, held up to ``poll_s``."""
    call = stub.PullMessage(spb.PullMessageRequest(
        group=pb.Resource(name="g"), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        offset=0, batch_size=32, filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        long_polling_timeout=Duration(seconds=poll_s)), metadata=[("x-mq-client-id", "c")], timeout=30)
    return [answer.status async for answer in call if answer.HasField("status")]


def test_pulls_held_while_the_broker_stops_reading_are_refused_when_they_wake(tmp_path: Path) -> None:
    """Long-polling pulls (remoting and gRPC) held on an empty queue when brokerPermission becomes 2 (write only):
    the send that wakes them is taken, and they are answered NO_PERMISSION, as RocketMQ runs a woken pull's request
    again, rather than with the message."""
    async def main() -> None:
        async with serving(tmp_path) as (_ns, broker, client, stub):
            addr = broker.config.broker_addr
            await broker.topic_config_manager.update(TopicConfig("T", 1, 1))
            held = asyncio.ensure_future(client.invoke(addr, _pull("g", "T", suspend_ms=20_000), 30))
            grpc_held = asyncio.ensure_future(grpc_pulled(stub, "T", 20))
            await until(lambda: broker.core.pulls.hold_service.held == 2)
            await update_config(client, addr, "brokerPermission", "2")
            assert (await client.invoke(addr, _send("T"), 10)).code == ResponseCode.SUCCESS
            reply = await held
            assert (reply.code, reply.remark) == (ResponseCode.NO_PERMISSION,
                                                  "the broker[127.0.0.1] pulling message is forbidden")
            assert [(s.code, s.message) for s in await grpc_held] == [
                (pb.Code.FORBIDDEN, "the broker[127.0.0.1] pulling message is forbidden")]

    asyncio.run(main())


def test_a_read_only_broker_refuses_a_forward_to_the_dead_letters(tmp_path: Path) -> None:
    """gRPC ForwardMessageToDeadLetterQueue is the send-back of RocketMQ's proxy (CONSUMER_SEND_MSG_BACK): a broker
    without write refuses it FORBIDDEN, nothing stored, the message still in flight; back to 6, it is forwarded."""
    async def main() -> None:
        async with serving(tmp_path) as (_ns, broker, client, stub):
            addr = broker.config.broker_addr
            await broker.topic_config_manager.update(TopicConfig("T", 1, 1))
            assert (await client.invoke(addr, _send("T"), 10)).code == ResponseCode.SUCCESS
            (received,), _ = await _grpc_received(stub, "T", 30_000)
            forward = spb.ForwardMessageToDeadLetterQueueRequest(
                group=pb.Resource(name="g"), topic=pb.Resource(name="T"),
                receipt_handle=received.system_properties.receipt_handle,
                message_id=received.system_properties.message_id)
            await update_config(client, addr, "brokerPermission", "4")
            end = broker.store.commit_log.max_offset
            refused = (await stub.ForwardMessageToDeadLetterQueue(forward, timeout=10)).status
            assert (refused.code, refused.message) == (pb.Code.FORBIDDEN, FORBIDDEN_SEND)
            assert broker.store.commit_log.max_offset == end and "%DLQ%g" not in broker.topic_config_manager.table
            await update_config(client, addr, "brokerPermission", "6")
            assert (await stub.ForwardMessageToDeadLetterQueue(forward, timeout=10)).status.code == pb.Code.OK
            await until(lambda: broker.store.get_max_offset_in_queue("%DLQ%g", 0) == 1)

    asyncio.run(main())


def test_a_slave_routes_gRPC_clients_to_its_master_with_the_master_s_permission(tmp_path: Path) -> None:
    """A slave's gRPC route points at its master's endpoint: the queues' permission there is the master's, as the
    name servers have it, not the slave's own: a master that stopped writing is routed read-only, and a slave that
    stopped writing (its store lost durability) does not take write off a master that writes."""
    async def main() -> None:
        master_grpc, slave_grpc = free_port(), free_port()
        async with (namesrv() as ns,
                    broker_of(ns, tmp_path / "m", broker_name="b", grpc_port=master_grpc) as master,
                    broker_of(ns, tmp_path / "s", broker_name="b", grpc_port=slave_grpc, broker_id=1,
                              broker_role="SLAVE") as slave,
                    RemotingClient() as client,
                    grpc.aio.insecure_channel(f"127.0.0.1:{slave_grpc}") as channel):
            stub = MessagingServiceStub(channel)
            await master.topic_config_manager.update(TopicConfig("T", 1, 1))
            await perm_of(ns, "T", 6)
            assert await grpc_route(stub, "T") == {pb.READ_WRITE}
            await update_config(client, master.config.broker_addr, "brokerPermission", "4")
            await perm_of(ns, "T", 4)
            assert await grpc_route(stub, "T") == {pb.READ}
            await update_config(client, master.config.broker_addr, "brokerPermission", "6")
            await update_config(client, slave.config.broker_addr, "brokerPermission", "4")
            await perm_of(ns, "T", 6)
            assert await grpc_route(stub, "T") == {pb.READ_WRITE}

    asyncio.run(main())
