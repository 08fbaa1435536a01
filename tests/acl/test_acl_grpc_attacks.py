"""Attacks on the gRPC endpoint with ACL on, over raw gRPC calls (txmq's generated stubs) as an attacker holding
a valid account would make them: a gRPC EndTransaction aimed at another account's remoting transaction,
check-backs of another group, duplicated security headers, another account's client id, the broker's own
properties set by a client, stale and future signatures, a flood of sessions."""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from txmq.acl.signer import SessionCredentials, grpc_authorization
from txmq.client.admin import Admin
from txmq.client.transaction import LocalTransactionState, TransactionProducer
from txmq.grpc.convert import transaction_id
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol import service_pb2_grpc
from txmq.message import Message

from .conftest import ADMIN, ATTACKER, VICTIM, AclServer, start_acl_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # real servers, the official clients' sessions


def _date_time(offset_s: float = 0) -> str:
    """An ``x-mq-date-time`` ``offset_s`` from now (the wall clock, as the clients sign)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() + offset_s))


def _metadata(creds: SessionCredentials | None, client_id: str = "evil@1",
              date_time: str | None = None) -> list[tuple[str, str]]:
    date_time = _date_time() if date_time is None else date_time
    meta = [("x-mq-date-time", date_time), ("x-mq-client-id", client_id)]
    return meta + ([("authorization", grpc_authorization(creds, date_time))] if creds else [])


def test_grpc_end_transaction_cannot_decide_a_remoting_transaction(acl_server: AclServer):
    class Undecided:
        def execute_local_transaction(self, msg: Any, arg: Any) -> LocalTransactionState:
            return LocalTransactionState.UNKNOWN

        def check_local_transaction(self, msg: Any) -> LocalTransactionState:
            return LocalTransactionState.UNKNOWN

    with TransactionProducer("order-service", Undecided(), acl_server.namesrv).set_session_credentials(
            VICTIM.access_key, VICTIM.secret_key) as producer, \
            Admin(acl_server.namesrv).set_session_credentials(ADMIN.access_key, ADMIN.secret_key) as admin:
        sent = producer.send_message_in_transaction(Message("orders", b"remoting half"))
        tx = admin.tx_show(sent.transaction_id)
        request = spb.EndTransactionRequest(
            topic=pb.Resource(name="order-service"), message_id=tx["transactionId"],
            transaction_id=transaction_id(tx["commitLogOffset"], tx["halfOffset"]), resolution=pb.COMMIT,
            source=pb.SOURCE_CLIENT)
        with grpc.insecure_channel(acl_server.proc.grpc) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            for creds, code in ((None, pb.UNAUTHORIZED), (ATTACKER, pb.FORBIDDEN),
                                (SessionCredentials(VICTIM.access_key, "wrongSecret1"), pb.UNAUTHORIZED)):
                answer = stub.EndTransaction(request, metadata=_metadata(creds), timeout=5)
                assert answer.status.code == code, answer.status
            assert admin.tx_show(sent.transaction_id)["state"] == "PENDING"
            # the victim's client id gives the attacker nothing either
            answer = stub.EndTransaction(request, metadata=_metadata(ATTACKER, "victim@7"), timeout=5)
            assert answer.status.code == pb.FORBIDDEN, answer.status
            answer = stub.EndTransaction(request, metadata=_metadata(VICTIM), timeout=5)
            assert answer.status.code == pb.OK, answer.status
        assert admin.tx_show(sent.transaction_id)["state"] == "COMMIT"


def _telemetry(stub: Any, metadata: list[tuple[str, str]], seconds: float,
               settings: bool = True) -> tuple[list[Any], bool]:
    """What a producer session publishing ``orders`` receives on a Telemetry stream within ``seconds`` (a stream
    that sends no settings when ``settings`` is false), and whether the broker ended the stream before."""
    command = spb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="orders")])))

    def requests() -> Any:
        if settings:
            yield command
        time.sleep(seconds + 1)

    got: list[Any] = []
    try:
        for cmd in stub.Telemetry(requests(), metadata=metadata, timeout=seconds):
            got.append(cmd)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        return got, False
    return got, True


def _telemetry_commands(stub: Any, creds: SessionCredentials, client_id: str, seconds: float) -> list[Any]:
    return _telemetry(stub, _metadata(creds, client_id), seconds)[0]


def _checks(commands: list[Any]) -> list[Any]:
    return [c for c in commands if c.HasField("recover_orphaned_transaction_command")]


def _half(topic: str = "orders", **user_properties: str) -> pb.Message:
    return pb.Message(topic=pb.Resource(name=topic), body=b"grpc half", user_properties=user_properties,
                      system_properties=pb.SystemProperties(message_id=uuid.uuid4().hex.upper(),
                                                            message_type=pb.TRANSACTION, body_encoding=pb.IDENTITY))


def test_grpc_check_backs_only_reach_the_groups_own_accounts(acl_server: AclServer):
    """A pending 5.x transaction of ``orders`` (its producer group is its topic): a session of an account that may
    not publish for that group gets no check-back; the owner's session does."""
    half = pb.Message(topic=pb.Resource(name="orders"), body=b"grpc half", system_properties=pb.SystemProperties(
        message_id="0100007F000000000000000000000001", message_type=pb.TRANSACTION, body_encoding=pb.IDENTITY))
    with grpc.insecure_channel(acl_server.proc.grpc) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        sent = stub.SendMessage(spb.SendMessageRequest(messages=[half]), metadata=_metadata(VICTIM, "owner@1"),
                                timeout=5)
        assert sent.status.code == pb.OK, sent.status
        stolen = _telemetry_commands(stub, ATTACKER, "evil@2", 3.0)
        assert not [c for c in stolen if c.HasField("recover_orphaned_transaction_command")]
        mine = _telemetry_commands(stub, VICTIM, "owner@1", 3.0)
        assert [c for c in mine if c.HasField("recover_orphaned_transaction_command")]


def _victims_stream_against(stub: Any, client_id: str, attack: Any) -> tuple[list[Any], bool]:
    """The victim's producer session ``client_id`` with a pending half of ``orders``, its Telemetry stream open
    for 8 s while ``attack()`` runs: what the stream received and whether the broker ended it early."""
    sent = stub.SendMessage(spb.SendMessageRequest(messages=[_half()]), metadata=_metadata(VICTIM, client_id),
                            timeout=5)
    assert sent.status.code == pb.OK, sent.status
    with ThreadPoolExecutor(1) as pool:
        victim = pool.submit(_telemetry, stub, _metadata(VICTIM, client_id), 8.0)
        time.sleep(1.0)
        attack()
        return victim.result()


def test_duplicated_client_id_is_refused(acl_server: AclServer):
    """Two x-mq-client-id headers, the victim's first and the attacker's own last. Before: the interceptor
    authorized the last and the servicer used the first, so the attacker's Telemetry stream joined the victim's
    session (and took its check-backs, bodies included) and NotifyClientTermination ended the victim's stream."""
    client_id = f"victim@{uuid.uuid4().hex[:8]}"
    doubled = [("x-mq-client-id", client_id), *_metadata(ATTACKER, f"evil@{uuid.uuid4().hex[:8]}")]
    stolen: list[Any] = []
    ended: list[Any] = []

    with grpc.insecure_channel(acl_server.proc.grpc) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)

        def attack() -> None:
            stolen.extend(_telemetry(stub, doubled, 4.0, settings=False)[0])
            ended.append(stub.NotifyClientTermination(spb.NotifyClientTerminationRequest(), metadata=doubled,
                                                      timeout=5))

        mine, ended_early = _victims_stream_against(stub, client_id, attack)
    assert stolen and stolen[0].status.code == pb.BAD_REQUEST, stolen[:1]
    assert "x-mq-client-id is given more than once" in stolen[0].status.message
    assert not _checks(stolen)
    assert ended[0].status.code == pb.BAD_REQUEST
    assert _checks(mine) and not ended_early
    # every security header, not only the client id
    with grpc.insecure_channel(acl_server.proc.grpc) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for header, value in (("authorization", grpc_authorization(ATTACKER, _date_time())),
                              ("x-mq-date-time", _date_time()), ("x-mq-session-token", "t")):
            meta = [*_metadata(ATTACKER, "evil@3"), (header, value)]
            if header == "x-mq-session-token":
                meta.append((header, value))
            answer = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="orders")), metadata=meta,
                                     timeout=5)
            assert answer.status.code == pb.BAD_REQUEST and header in answer.status.message, (header, answer.status)


def test_a_client_id_is_no_claim_on_another_accounts_session(acl_server: AclServer):
    """The attacker uses the victim's client id before the victim does. Before: the id became the attacker's and
    the victim's own calls were refused FORBIDDEN. Now each account has its own session of that id: the
    victim's works, and the attacker's gets none of its check-backs and cannot end it."""
    client_id = f"victim@{uuid.uuid4().hex[:8]}"
    producer = spb.HeartbeatRequest(client_type=pb.PRODUCER)
    stolen: list[Any] = []
    ended: list[Any] = []

    with grpc.insecure_channel(acl_server.proc.grpc) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        assert stub.Heartbeat(producer, metadata=_metadata(ATTACKER, client_id), timeout=5).status.code == pb.OK
        answer = stub.Heartbeat(producer, metadata=_metadata(VICTIM, client_id), timeout=5)
        assert answer.status.code == pb.OK, answer.status

        def attack() -> None:
            stolen.extend(_telemetry(stub, _metadata(ATTACKER, client_id), 4.0, settings=False)[0])
            ended.append(stub.NotifyClientTermination(spb.NotifyClientTerminationRequest(),
                                                      metadata=_metadata(ATTACKER, client_id), timeout=5))

        mine, ended_early = _victims_stream_against(stub, client_id, attack)
    assert not _checks(stolen)
    assert ended[0].status.code == pb.OK  # the attacker ended its own session of that id
    assert _checks(mine) and not ended_early


@pytest.mark.parametrize("prop", ["TXMQ_HALF_ACCOUNT", "TXMQ_HALF_BATCH", "TXMQ_OP"])
@pytest.mark.parametrize("kind", [pb.NORMAL, pb.TRANSACTION], ids=["normal", "transaction"])
def test_broker_only_properties_are_refused_over_grpc(acl_server: AclServer, prop, kind):
    """Before: a gRPC client set TXMQ_HALF_ACCOUNT (the account ``tx show`` names) on its own halves."""
    message = _half(**{prop: ADMIN.access_key})
    message.system_properties.message_type = kind
    with grpc.insecure_channel(acl_server.proc.grpc) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        answer = stub.SendMessage(spb.SendMessageRequest(messages=[message]), metadata=_metadata(VICTIM, "forger@1"),
                                  timeout=5)
    assert answer.entries[0].status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY, answer.entries[0].status
    assert prop in answer.entries[0].status.message


def test_grpc_halves_are_stamped_with_the_sending_account(acl_server: AclServer):
    """As on remoting, the broker records which account stored a half (before: gRPC halves had none)."""
    with grpc.insecure_channel(acl_server.proc.grpc) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        sent = stub.SendMessage(spb.SendMessageRequest(messages=[_half()]), metadata=_metadata(VICTIM, "stamp@1"),
                                timeout=5)
    assert sent.status.code == pb.OK, sent.status
    with Admin(acl_server.namesrv).set_session_credentials(ADMIN.access_key, ADMIN.secret_key) as admin:
        tx = admin.tx_show(str(sent.entries[0].offset))
    assert tx["properties"]["TXMQ_HALF_ACCOUNT"] == VICTIM.access_key


@pytest.mark.parametrize(("date_time", "why"), [
    ("20200101T000000Z", "s old, beyond grpcSignatureWindowSeconds (900)"),
    (-16 * 60, "s old, beyond grpcSignatureWindowSeconds"),
    (16 * 60, "s ahead of the broker's clock, beyond grpcSignatureWindowSeconds"),
    ("2020-01-01T00:00:00Z", "is not a date"),
    ("20201301T000000Z", "is not a date"),
    ("yesterday", "is not a date"),
])
def test_signatures_outside_the_window_are_refused(acl_server: AclServer, date_time, why):
    """A captured signed request cannot be replayed later, nor one signed ahead used until then. Before: a
    request signed in 2020 was accepted."""
    value = _date_time(date_time) if isinstance(date_time, int) else date_time
    with grpc.insecure_channel(acl_server.proc.grpc) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        answer = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="orders")),
                                 metadata=_metadata(VICTIM, "replay@1", value), timeout=5)
        assert answer.status.code == pb.UNAUTHORIZED and why in answer.status.message, answer.status
        assert "x-mq-date-time" in answer.status.message
        for within in (-14 * 60, 14 * 60):  # a client's clock may be off by less than the window
            answer = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="orders")),
                                     metadata=_metadata(VICTIM, "replay@1", _date_time(within)), timeout=5)
            assert answer.status.code == pb.OK, answer.status


def test_sessions_per_account_are_capped(tmp_path: Path):
    """One account opening sessions (client ids) and Telemetry streams as fast as it can: beyond
    grpcMaxSessionsPerAccount each is refused TOO_MANY_REQUESTS, logged once, and other accounts are not
    affected. Before: 30,000 sessions of one account in 11 s."""
    cap = 8
    server = start_acl_server(tmp_path / "server", f"grpcMaxSessionsPerAccount={cap}\n")
    try:
        asyncio.run(_flood(server.proc.grpc, cap))
        log = server.log
    finally:
        server.proc.stop()
    sessions_lines = [line for line in log.splitlines() if "gRPC sessions open" in line]
    stream_lines = [line for line in log.splitlines() if "gRPC Telemetry streams open" in line]
    # one line per kind (and host and 10 s), not one per refusal
    assert 1 <= len(sessions_lines) <= 2 and 1 <= len(stream_lines) <= 2, sessions_lines + stream_lines


async def _flood(endpoint: str, cap: int) -> None:
    producer = spb.HeartbeatRequest(client_type=pb.PRODUCER)
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        answers = await asyncio.gather(*(stub.Heartbeat(producer, metadata=_metadata(ATTACKER, f"flood@{i}"),
                                                        timeout=60) for i in range(300)))
        codes = [a.status.code for a in answers]
        assert codes.count(pb.OK) == cap and codes.count(pb.TOO_MANY_REQUESTS) == 300 - cap, codes
        accepted = [f"flood@{i}" for i, code in enumerate(codes) if code == pb.OK]
        refused = next(a.status for a in answers if a.status.code != pb.OK)
        assert "AccessKey attackKey01 has 8 gRPC sessions open" in refused.message
        assert "grpcMaxSessionsPerAccount" in refused.message
        # another account is not affected
        answer = await stub.Heartbeat(producer, metadata=_metadata(VICTIM, "victim@1"), timeout=5)
        assert answer.status.code == pb.OK
        # a session that ends frees its place
        await stub.NotifyClientTermination(spb.NotifyClientTerminationRequest(),
                                           metadata=_metadata(ATTACKER, accepted[0]), timeout=5)
        answer = await stub.Heartbeat(producer, metadata=_metadata(ATTACKER, "flood@again"), timeout=5)
        assert answer.status.code == pb.OK, answer.status
        # Telemetry streams: as many per account, whatever client ids they name. A refused stream answers at
        # once; an open one waits for the client's settings.
        calls = [stub.Telemetry(metadata=_metadata(ATTACKER, accepted[1 + i % 2]), timeout=60) for i in range(cap + 4)]
        try:
            reads = [asyncio.ensure_future(call.read()) for call in calls]
            deadline = time.monotonic() + 30  # a refused stream answers at once, however loaded the machine
            while sum(r.done() for r in reads) < 4 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            done = {r for r in reads if r.done()}
            refused = [r.result().status for r in done]
            assert len(refused) == 4 and {s.code for s in refused} == {pb.TOO_MANY_REQUESTS}, refused
            assert "gRPC Telemetry streams open" in refused[0].message
            open_calls = [call for call, r in zip(calls, reads, strict=True) if r not in done]
            for call in open_calls:
                await call.write(spb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER)))
            replies = await asyncio.gather(*(r for r in reads if r not in done))
            assert [r.status.code for r in replies] == [pb.OK] * cap
        finally:
            for call in calls:
                call.cancel()
