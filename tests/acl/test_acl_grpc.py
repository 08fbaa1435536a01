"""The gRPC endpoint with ACL on: the official RocketMQ 5 Python and Node.js clients with their session
credentials, each refusal, and a gRPC EndTransaction aimed at another account's remoting transaction."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
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

from .conftest import ADMIN, ATTACKER, CONSUMER, VICTIM, AclServer

ROOT = Path(__file__).resolve().parents[2]
PY = [str(ROOT / ".venv-rmq5" / "bin" / "python"), str(ROOT / "tests" / "grpc" / "drivers" / "rmq5_py.py")]
NODE = [shutil.which("node") or "node", str(ROOT / "tests" / "grpc" / "node" / "driver.js")]

pytestmark = pytest.mark.skipif(
    not (Path(PY[0]).exists() and (ROOT / "tests" / "grpc" / "node" / "node_modules" / ".installed").exists()),
    reason="the official RocketMQ 5 clients are not installed (make grpc-clients)")


def drive(argv: list[str], endpoint: str, home: Path, creds: SessionCredentials | None, timeout: float = 60,
          env: dict[str, str] | None = None, **args: Any) -> tuple[bool, list[dict]]:
    """Run one driver command; (whether it ended ok, its events)."""
    if creds is not None:
        args.update(ak=creds.access_key, sk=creds.secret_key)
    p = subprocess.Popen([*argv, json.dumps({"endpoint": endpoint, "timeout": 3, **args})], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "HOME": str(home), **(env or {})},
                         start_new_session=True)
    try:
        stdout, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        stdout, _ = p.communicate()
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    ok = bool(events) and events[-1]["event"] == "done" and events[-1]["ok"]
    return ok, events


@pytest.mark.parametrize("client", ["py", "node"])
def test_official_clients_send_receive_and_transact_with_their_accounts(acl_server: AclServer, tmp_path, client):
    argv = PY if client == "py" else NODE
    grpc_addr = acl_server.proc.grpc
    ok, _ = drive(argv, grpc_addr, tmp_path, VICTIM, cmd="send", topic="orders", count=2, body=f"{client}-acl")
    assert ok
    ok, events = drive(PY, grpc_addr, tmp_path, CONSUMER, cmd="simple", topic="orders", group="billing", expect=2,
                       wait=15, filter="*")
    assert ok and {f"{client}-acl-0", f"{client}-acl-1"} <= {e["body"] for e in events if e["event"] == "received"}
    # a transaction left open: the broker's check-back reaches the authenticated producer, whose answer counts
    ok, events = drive(argv, grpc_addr, tmp_path, VICTIM, cmd="tx", topic="orders", mode="none", wait_check=20)
    assert ok and any(e["event"] == "checked" for e in events)


@pytest.mark.parametrize(("client", "creds", "why"), [
    ("py", None, "no AccessKey"),
    ("py", SessionCredentials(VICTIM.access_key, "wrongSecret1"), "signature check failed for AccessKey orderKey01"),
    ("py", SessionCredentials("unknownKey1", "whatever1"), "no account for AccessKey unknownKey1"),
    ("py", CONSUMER, "AccessKey billingKey01: no Pub permission on Topic:orders"),
    ("node", None, "no AccessKey"),
    ("node", SessionCredentials(VICTIM.access_key, "wrongSecret1"), "signature check failed"),
    ("node", SessionCredentials("unknownKey1", "whatever1"), "no account for AccessKey unknownKey1"),
    ("node", CONSUMER, "AccessKey billingKey01: no Pub permission on Topic:orders"),
])
def test_official_clients_refused(acl_server: AclServer, tmp_path, client, creds, why):
    ok, events = drive(PY if client == "py" else NODE, acl_server.proc.grpc, tmp_path, creds, cmd="send",
                       topic="orders", count=1, body="refused", timeout=40)
    assert not ok and not any(e["event"] == "sent" for e in events)
    assert "gRPC " in acl_server.log and why in acl_server.log


def _metadata(creds: SessionCredentials | None, client_id: str = "evil@1") -> list[tuple[str, str]]:
    date_time = "20260101T000000Z"
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
            # a client id the victim's account used stays the victim's
            stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="orders")),
                            metadata=_metadata(VICTIM, "victim@7"), timeout=5)
            stolen = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="orders")),
                                     metadata=_metadata(ATTACKER, "victim@7"), timeout=5)
            assert stolen.status.code == pb.FORBIDDEN and "belongs to another account" in stolen.status.message
            answer = stub.EndTransaction(request, metadata=_metadata(VICTIM), timeout=5)
            assert answer.status.code == pb.OK, answer.status
        assert admin.tx_show(sent.transaction_id)["state"] == "COMMIT"


def _telemetry_commands(stub: Any, creds: SessionCredentials, client_id: str, seconds: float) -> list[Any]:
    """What a producer session publishing ``orders`` receives on its Telemetry stream within ``seconds``."""
    settings = spb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="orders")])))

    def requests() -> Any:
        yield settings
        time.sleep(seconds + 1)

    got: list[Any] = []
    try:
        for cmd in stub.Telemetry(requests(), metadata=_metadata(creds, client_id), timeout=seconds):
            got.append(cmd)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    return got


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
