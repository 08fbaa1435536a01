"""Issue #14's attacks, each repeated against an ACL-enabled broker and name server: every one is refused, the
victim's transactions and routes are untouched. The attacker holds a valid account of another team."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from txmq.acl.signer import AclClientRPCHook
from txmq.client.admin import Admin
from txmq.client.transaction import LocalTransactionState, TransactionProducer
from txmq.message import Message, MessageSysFlag
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient

from .conftest import ADMIN, ATTACKER, VICTIM, AclServer, call, start_acl_server

GROUP = "order-service"


class VictimListener:
    """The order service: leaves every transaction UNKNOWN until a decision is set, counts the checks."""

    def __init__(self) -> None:
        self.decisions: dict[str, LocalTransactionState] = {}
        self.checks: Counter[str] = Counter()
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        with self.lock:
            self.checks[msg.transaction_id] += 1
            return self.decisions.get(msg.transaction_id, LocalTransactionState.UNKNOWN)


@pytest.fixture(scope="module")
def victim(acl_server: AclServer) -> Iterator[tuple[TransactionProducer, VictimListener]]:
    listener = VictimListener()
    producer = TransactionProducer(GROUP, listener, acl_server.namesrv)
    producer.set_session_credentials(VICTIM.access_key, VICTIM.secret_key).start()
    try:
        yield producer, listener
    finally:
        producer.shutdown()


@pytest.fixture(scope="module")
def admin(acl_server: AclServer) -> Iterator[Admin]:
    with Admin(acl_server.namesrv).set_session_credentials(ADMIN.access_key, ADMIN.secret_key) as a:
        yield a


@pytest.fixture
def pending(victim, admin) -> dict[str, Any]:
    """A pending transaction of the victim, as ``tx show`` describes it (what a leak would give an attacker)."""
    producer, _ = victim
    result = producer.send_message_in_transaction(Message("orders", b"order #1: 3 items"))
    return admin.tx_show(result.transaction_id)


def _state(admin: Admin, tx: dict[str, Any]) -> str:
    return admin.tx_show(tx["transactionId"])["state"]


def _end(tx: dict[str, Any], flag: int, group: str = GROUP, check: bool = False) -> dict[str, str]:
    return {"producerGroup": group, "tranStateTableOffset": str(tx["halfOffset"]),
            "commitLogOffset": str(tx["commitLogOffset"]), "commitOrRollback": str(flag),
            "fromTransactionCheck": str(check).lower(), "msgId": tx["transactionId"],
            "transactionId": tx["transactionId"]}


def test_tx_list_and_show_only_for_admin_or_the_groups_own(acl_server: AclServer, pending):
    broker, half = acl_server.broker, str(pending["halfOffset"])
    for creds in (None, ATTACKER):
        assert call(broker, RequestCode.TXMQ_TX_LIST, {}, as_=creds).code == ResponseCode.NO_PERMISSION
        assert call(broker, RequestCode.TXMQ_TX_SHOW, {"id": half}, as_=creds).code == ResponseCode.NO_PERMISSION
        assert call(broker, RequestCode.TXMQ_TX_SHOW, {"id": half, "group": GROUP}, as_=creds).code == \
            ResponseCode.NO_PERMISSION
    # the attacker's own group: allowed, and it shows nothing of the victim's
    own = call(broker, RequestCode.TXMQ_TX_LIST, {"group": "attacker-group"}, as_=ATTACKER)
    assert own.code == ResponseCode.SUCCESS and GROUP.encode() not in own.body
    assert call(broker, RequestCode.TXMQ_TX_SHOW, {"id": half, "group": "attacker-group"}, as_=ATTACKER).code == \
        ResponseCode.QUERY_NOT_FOUND
    mine = call(broker, RequestCode.TXMQ_TX_SHOW, {"id": half, "group": GROUP}, as_=VICTIM)
    assert mine.code == ResponseCode.SUCCESS
    # the broker recorded the account that stored the half
    assert orjson.loads(mine.body)["properties"]["TXMQ_HALF_ACCOUNT"] == VICTIM.access_key


def test_end_transaction_from_another_account_refused(acl_server: AclServer, admin: Admin, pending):
    broker = acl_server.broker
    commit = MessageSysFlag.TRANSACTION_COMMIT_TYPE
    for creds in (None, ATTACKER):
        for check in (False, True):  # an END_TRANSACTION and a "check answer"
            resp = call(broker, RequestCode.END_TRANSACTION, _end(pending, commit, check=check), as_=creds)
            assert resp.code == ResponseCode.NO_PERMISSION
    # naming a group the attacker may publish for does not make the victim's half his
    resp = call(broker, RequestCode.END_TRANSACTION, _end(pending, commit, "attacker-group"), as_=ATTACKER)
    assert resp.code != ResponseCode.SUCCESS and "no half message of group attacker-group" in (resp.remark or "")
    batch = orjson.dumps({"producerGroup": GROUP, "entries": [
        {"tranStateTableOffset": pending["halfOffset"], "commitLogOffset": pending["commitLogOffset"],
         "commitOrRollback": commit}]})
    assert call(broker, RequestCode.TXMQ_END_TRANSACTION_BATCH, body=batch, as_=ATTACKER).code == \
        ResponseCode.NO_PERMISSION
    assert _state(admin, pending) == "PENDING"
    # the owner's decision is the one that counts
    resp = call(broker, RequestCode.END_TRANSACTION, _end(pending, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE),
                as_=VICTIM)
    assert resp.code == ResponseCode.SUCCESS
    assert _state(admin, pending) == "ROLLBACK"


def test_tx_resume_refused_to_others(acl_server: AclServer, pending):
    for creds, ext in ((None, {}), (ATTACKER, {}), (ATTACKER, {"group": GROUP})):
        resp = call(acl_server.broker, RequestCode.TXMQ_TX_RESUME, {"id": str(pending["halfOffset"]), **ext},
                    as_=creds)
        assert resp.code == ResponseCode.NO_PERMISSION


def test_attacker_cannot_join_the_group_for_check_backs(acl_server: AclServer, admin: Admin, victim, pending):
    _, listener = victim
    received: list[RemotingCommand] = []
    heartbeat = orjson.dumps({"clientID": "127.0.0.1@evil@1", "producerDataSet": [{"groupName": GROUP}],
                              "consumerDataSet": []})

    tx = pending["transactionId"]

    async def attack() -> tuple[int, int]:
        async with RemotingClient(lambda conn, cmd: received.append(cmd),
                                  rpc_hook=AclClientRPCHook(ATTACKER)) as client:
            resp = await client.invoke(acl_server.broker, RemotingCommand.request(RequestCode.HEART_BEAT,
                                                                                  body=heartbeat), 5.0)
            before = listener.checks[tx]
            deadline = time.monotonic() + 60
            # several checks (timeout 1 s, interval 0.5 s) while the attacker is connected, however slow the machine
            while listener.checks[tx] < before + 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return resp.code, listener.checks[tx] - before

    code, checks_meanwhile = asyncio.run(attack())
    assert code == ResponseCode.NO_PERMISSION
    assert not [c for c in received if c.code == RequestCode.CHECK_TRANSACTION_STATE]
    assert checks_meanwhile >= 3  # the checks went to the owner
    listener.decisions[pending["transactionId"]] = LocalTransactionState.COMMIT
    deadline = time.monotonic() + 10
    while _state(admin, pending) != "COMMIT" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _state(admin, pending) == "COMMIT"


def test_attacker_cannot_store_a_half_in_the_victims_group(acl_server: AclServer):
    """A half owned by order-service (PGROUP) sent under the attacker's own producer group: its check-backs
    would go to the victim, and it would count as the victim's transaction."""
    props = f"TRAN_MSG\x01true\x02PGROUP\x01{GROUP}\x02"
    ext = {"producerGroup": "attacker-group", "topic": "other", "queueId": "0", "sysFlag": "4",
           "bornTimestamp": "0", "flag": "0", "properties": props}
    resp = call(acl_server.broker, RequestCode.SEND_MESSAGE, ext, b"x", as_=ATTACKER)
    assert resp.code == ResponseCode.NO_PERMISSION and f"permission on Group:{GROUP}" in (resp.remark or "")
    own = {**ext, "properties": "TRAN_MSG\x01true\x02PGROUP\x01attacker-group\x02"}
    assert call(acl_server.broker, RequestCode.SEND_MESSAGE, own, b"x", as_=ATTACKER).code == ResponseCode.SUCCESS


@pytest.mark.parametrize("prop", ["TXMQ_HALF_ACCOUNT", "TXMQ_HALF_BATCH", "TXMQ_OP"])
def test_sender_cannot_forge_the_half_account(acl_server: AclServer, prop: str):
    """A send that sets a property only the broker sets (the account of a half; before, over remoting, also a
    half's batch count or a transaction op's kind went through) breaks a rule of the message, whoever sends it:
    MESSAGE_ILLEGAL, as over gRPC (test_acl_grpc_attacks.py)."""
    props = f"TRAN_MSG\x01true\x02PGROUP\x01attacker-group\x02{prop}\x01orderKey01\x02"
    ext = {"producerGroup": "attacker-group", "topic": "other", "queueId": "0", "sysFlag": "4",
           "bornTimestamp": "0", "flag": "0", "properties": props}
    resp = call(acl_server.broker, RequestCode.SEND_MESSAGE, ext, b"x", as_=ATTACKER)
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "set by the broker only" in (resp.remark or "")


def _route_addrs(acl_server: AclServer) -> set[str]:
    resp = call(acl_server.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}, as_=VICTIM)
    assert resp.code == ResponseCode.SUCCESS
    return {a for bd in orjson.loads(resp.body)["brokerDatas"] for a in bd["brokerAddrs"].values()}


def test_name_server_route_writes_need_the_clusters_credentials(acl_server: AclServer, victim):
    assert _route_addrs(acl_server) == {acl_server.broker}
    evil = "127.0.0.1:1"
    table = {"orders": {"topicName": "orders", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6}}
    body = orjson.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table, "dataVersion": {}},
                         "filterServerList": []})
    broker = {"brokerName": "broker-a", "brokerAddr": evil, "clusterName": "DefaultCluster", "brokerId": "0"}
    for creds in (None, ATTACKER, VICTIM):
        assert call(acl_server.namesrv, RequestCode.REGISTER_BROKER, {**broker, "haServerAddr": "",
                                                                      "compressed": "false"}, body,
                    as_=creds).code == ResponseCode.NO_PERMISSION
        assert call(acl_server.namesrv, RequestCode.UNREGISTER_BROKER,
                    {**broker, "brokerAddr": acl_server.broker}, as_=creds).code == ResponseCode.NO_PERMISSION
        assert call(acl_server.namesrv, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "orders"},
                    as_=creds).code == ResponseCode.NO_PERMISSION
    assert _route_addrs(acl_server) == {acl_server.broker}
    # the victim's sends still reach the real broker
    producer, _ = victim
    result = producer.send(Message("orders", b"after the attacks"))
    assert result.status.value == "SEND_OK"


def test_one_tx_list_reads_a_bounded_number_of_halves(tmp_path):
    """TXMQ_TX_LIST read every pending and discarded half up to the ``limit`` the caller named (2^31), on the event
    loop: a producer account piling up halves of its own group (discarded ones stay until retention) made each
    of its lists read them all and answer them all (20,000 halves: 0.26 s with the broker answering nobody).
    Now a list reads at most 1,000 of each state."""
    server = start_acl_server(tmp_path / "tx-list")
    try:
        async def pile(n: int) -> None:
            async with RemotingClient(rpc_hook=AclClientRPCHook(VICTIM)) as client:
                for i in range(n):
                    ext = {"producerGroup": "order-service", "topic": "orders", "queueId": "0", "sysFlag": "4",
                           "bornTimestamp": "0", "flag": "0",
                           "properties": f"TRAN_MSG\x01true\x02PGROUP\x01order-service\x02UNIQ_KEY\x01PILE{i}\x02"}
                    sent = await client.invoke(server.broker, RemotingCommand.request(RequestCode.SEND_MESSAGE, ext,
                                                                                     b"half"), 10.0)
                    assert sent.code == ResponseCode.SUCCESS, sent.remark

        asyncio.run(pile(2100))
        listed = call(server.broker, RequestCode.TXMQ_TX_LIST, {"group": "order-service", "limit": "2000000000"},
                      as_=VICTIM)
        assert listed.code == ResponseCode.SUCCESS
        body = orjson.loads(listed.body)
        assert len(body["pending"]) <= 1000 and len(body["discarded"]) <= 1000
        assert len(body["pending"]) + len(body["discarded"]) >= 1000
    finally:
        server.proc.stop()


def test_a_plain_send_cannot_pass_for_the_commit_of_another_groups_half(tmp_path):
    """After a restart (or a failover) a pending transaction whose COMMIT's real message is in the log already is
    recorded as committed without asking its producer (a crash can cut a COMMIT between its real message and its op
    record); a real message is known by its UNIQ_KEY, its record's PREPAREDTRANSACTIONOFFSET (the half's
    commit-log offset) and its sysFlag's COMMIT type. A plain send took its sysFlag from the producer as sent, so an
    account that may only publish to the topic stored a record of END_TRANSACTION's COMMIT type with the victim's
    UNIQ_KEY: against a half at commit-log offset 0 (a plain message's PREPAREDTRANSACTIONOFFSET), it stood for
    the victim's commit, and after a restart the victim's ROLLBACK was overruled into a COMMIT whose real message
    was the attacker's. Now a send's sysFlag carries no decision (COMMIT or ROLLBACK type): refused, nothing
    stored, and the victim's own decision stands."""
    server = start_acl_server(tmp_path / "forged-commit")
    try:
        half = {"producerGroup": GROUP, "topic": "orders", "queueId": "0", "sysFlag": "4", "bornTimestamp": "0",
                "flag": "0", "properties": f"TRAN_MSG\x01true\x02PGROUP\x01{GROUP}\x02UNIQ_KEY\x01ORDER-0001\x02"}
        assert call(server.broker, RequestCode.SEND_MESSAGE, half, b"order #1", as_=VICTIM).code == \
            ResponseCode.SUCCESS
        shown = call(server.broker, RequestCode.TXMQ_TX_SHOW, {"id": "ORDER-0001", "group": GROUP}, as_=VICTIM)
        tx = orjson.loads(shown.body)
        assert tx["commitLogOffset"] == 0  # the first record: a plain message's PREPAREDTRANSACTIONOFFSET
        for decision in (MessageSysFlag.TRANSACTION_COMMIT_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE):
            forged = {"producerGroup": "attacker-group", "topic": "orders", "queueId": "0", "sysFlag": str(decision),
                      "bornTimestamp": "0", "flag": "0", "properties": "UNIQ_KEY\x01ORDER-0001\x02"}
            resp = call(server.broker, RequestCode.SEND_MESSAGE, forged, b"forged by the attacker", as_=ATTACKER)
            assert resp.code == ResponseCode.MESSAGE_ILLEGAL, (resp.code, resp.remark)
        server.proc.stop()
        server.proc.start()
        resp = call(server.broker, RequestCode.END_TRANSACTION, _end(tx, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE),
                    as_=VICTIM)
        assert resp.code == ResponseCode.SUCCESS and not resp.remark, resp.remark
        shown = call(server.broker, RequestCode.TXMQ_TX_SHOW, {"id": str(tx["halfOffset"]), "group": GROUP},
                     as_=VICTIM)
        assert orjson.loads(shown.body)["state"] == "ROLLBACK"
    finally:
        server.proc.stop()
