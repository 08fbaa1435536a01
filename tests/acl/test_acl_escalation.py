"""Attacks beyond issue 28's list, each driven as an attacker holding one low-privilege account would drive it
against a running ``txmq server``: a user administrator making itself Super, plain_acl.yml permissions widened by
their defaults, retry topics changed with Sub alone, messages of other topics read through a consumer group's
send-back, the commit log's bounds learned from refusals, topics created by reading their route."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import grpc
import orjson
import pytest

from txmq.acl.signer import AclClientRPCHook, SessionCredentials
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol import service_pb2_grpc
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import RemotingClient

from .conftest import ADMIN, ATTACKER, CONSUMER, NOBODY, PLAIN_ACL, VICTIM, AclServer, call, start_acl_server
from .test_acl_grpc_attacks import _metadata

USER_ADMIN = SessionCredentials("userAdmin01", "userAdminSecret01")  # made below: Update and Get on the cluster
READ_ONLY = SessionCredentials("readOnly01", "readOnlySecret01")  # reads orders; publishes anywhere else
MEMBER = SessionCredentials("memberKey01", "memberSecret01")  # a member of group billing, without any topic
READER = SessionCredentials("readerKey01", "readerSecret01")  # reads every topic, publishes none
ANY_GROUP = SessionCredentials("anyGroup01", "anyGroupSecret01")  # consumes orders in any group (defaultGroupPerm)

EXTRA_ACCOUNTS = f"""\
  - accessKey: {READ_ONLY.access_key}
    secretKey: {READ_ONLY.secret_key}
    defaultTopicPerm: PUB|SUB
    topicPerms: [orders=SUB]
  - accessKey: {MEMBER.access_key}
    secretKey: {MEMBER.secret_key}
    groupPerms: [billing=SUB]
  - accessKey: {READER.access_key}
    secretKey: {READER.secret_key}
    defaultTopicPerm: SUB
  - accessKey: {ANY_GROUP.access_key}
    secretKey: {ANY_GROUP.secret_key}
    defaultGroupPerm: SUB
    topicPerms: [orders=SUB]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclServer]:
    srv = start_acl_server(tmp_path_factory.mktemp("acl-escalation"), "autoCreateTopicEnable=true\n",
                           plain_acl=PLAIN_ACL + EXTRA_ACCOUNTS)
    try:
        yield srv
    finally:
        srv.proc.stop()


def create_user(server: AclServer, name: str, password: str, as_: SessionCredentials,
                user_type: str | None = None) -> RemotingCommand:
    info = {"username": name, "password": password, **({"userType": user_type} if user_type else {})}
    return call(server.broker, RequestCode.AUTH_CREATE_USER, {"username": name}, orjson.dumps(info), as_=as_)


def create_acl(server: AclServer, name: str, entries: list[dict[str, object]],
               as_: SessionCredentials) -> RemotingCommand:
    body = orjson.dumps({"subject": f"User:{name}", "policies": [{"policyType": "Custom", "entries": entries}]})
    return call(server.broker, RequestCode.AUTH_CREATE_ACL, {"subject": f"User:{name}"}, body, as_=as_)


def test_a_user_administrator_cannot_make_itself_super(server):
    """A Normal user with Update on the cluster manages Normal users, and only a Super user makes a Super user.
    The user commands took who asked by name and looked it up again, and a global white address's identity by its
    name: a user administrator created a user named ``(white address)``, signed as it, and created a Super user
    (then everything: the broker's config, its users, replication). Now the gate's admitted user is what counts."""
    assert create_user(server, USER_ADMIN.access_key, USER_ADMIN.secret_key, ADMIN).code == ResponseCode.SUCCESS
    granted = create_acl(server, USER_ADMIN.access_key,
                         [{"resource": "Cluster", "actions": ["Update", "Get"], "decision": "Allow"}], ADMIN)
    assert granted.code == ResponseCode.SUCCESS
    refused = create_user(server, "superEvil01", "superEvil01", USER_ADMIN, "Super")
    assert refused.code == ResponseCode.NO_PERMISSION, refused.remark

    lookalike = SessionCredentials("(white address)", "lookalike01")
    assert create_user(server, lookalike.access_key, lookalike.secret_key, USER_ADMIN).code == ResponseCode.SUCCESS
    assert create_acl(server, lookalike.access_key, [{"resource": "Cluster", "actions": ["Update"],
                                                      "decision": "Allow"}], USER_ADMIN).code == ResponseCode.SUCCESS
    made = create_user(server, "superEvil02", "superEvil02", lookalike, "Super")
    assert made.code == ResponseCode.NO_PERMISSION, made.remark
    evil = call(server.broker, RequestCode.GET_BROKER_CONFIG, as_=SessionCredentials("superEvil02", "superEvil02"))
    assert evil.code == ResponseCode.NO_PERMISSION


def send(server: AclServer, topic: str, as_: SessionCredentials) -> RemotingCommand:
    return call(server.broker, RequestCode.SEND_MESSAGE, {"producerGroup": "p", "topic": topic, "queueId": "0"},
                b"forged", as_=as_)


def test_a_topic_plain_acl_lists_as_sub_only_takes_no_sends_from_the_defaults(server):
    """plain_acl.yml ``topicPerms: [orders=SUB]`` beside ``defaultTopicPerm: PUB|SUB``: in ACL 1.0 the account only
    reads ``orders``. Migrated to ACL 2.0 the default answered for Pub, and its sends were stored in ``orders``."""
    refused = send(server, "orders", READ_ONLY)
    assert refused.code == ResponseCode.NO_PERMISSION, refused.remark
    assert send(server, "other", READ_ONLY).code == ResponseCode.SUCCESS
    route = call(server.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}, as_=READ_ONLY)
    assert route.code == ResponseCode.SUCCESS, route.remark  # Sub is enough to find it


def billing_heartbeat() -> bytes:
    return orjson.dumps({"clientID": "billing@1", "producerDataSet": [], "consumerDataSet": [
        {"groupName": "billing", "messageModel": "CLUSTERING", "subscriptionDataSet": [{"topic": "orders"}]}]})


def heartbeat_as_billing(server: AclServer) -> None:
    """The billing consumer's heartbeat: the broker creates the group's retry topic."""
    answer = call(server.broker, RequestCode.HEART_BEAT, {}, billing_heartbeat(), as_=CONSUMER)
    assert answer.code == ResponseCode.SUCCESS


def test_a_consumer_cannot_create_change_or_delete_its_groups_retry_topic(server):
    """A retry topic %RETRY%G is group G's resource, but every action on it was read as Sub on G: a consumer
    holding Sub on billing deleted %RETRY%billing (the retries of every member of the group, their offsets) and
    recreated it unwritable. Now Create, Update and Delete on it need those actions on the group."""
    heartbeat_as_billing(server)
    retry = "%RETRY%billing"
    create = {"topic": retry, "readQueueNums": "1", "writeQueueNums": "1", "perm": "0"}
    for code, ext in ((RequestCode.UPDATE_AND_CREATE_TOPIC, create), (RequestCode.DELETE_TOPIC_IN_BROKER,
                                                                       {"topic": retry})):
        answer = call(server.broker, code, ext, as_=CONSUMER)
        assert answer.code == ResponseCode.NO_PERMISSION, (code, answer.code, answer.remark)
    topics = orjson.loads(call(server.broker, RequestCode.GET_ALL_TOPIC_CONFIG, as_=ADMIN).body)["topicConfigTable"]
    assert topics[retry]["perm"] == 6
    # what a consumer does with its retry topic still works: read its offsets, send a retry into it
    offset = call(server.broker, RequestCode.QUERY_CONSUMER_OFFSET,
                  {"consumerGroup": "billing", "topic": retry, "queueId": "0"}, as_=CONSUMER)
    assert offset.code in (ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND), offset.remark
    assert send(server, retry, CONSUMER).code == ResponseCode.SUCCESS


def send_back_ext(offset: int) -> dict[str, str]:
    return {"offset": str(offset), "group": "billing", "delayLevel": "1", "originTopic": "orders"}


def test_a_send_back_copies_only_a_message_its_sender_may_read(server):
    """CONSUMER_SEND_MSG_BACK needed Sub on the group only, and copied the message at any offset of a topic the
    group consumes into the group's retry topic, which Sub on the group reads: while billing's consumer was
    connected, an account in group billing without Sub on orders walked the log by offset and read the orders'
    bodies. Now the record is read first and its topic needs Sub too; the group's consumer still sends back."""
    stored = call(server.broker, RequestCode.SEND_MESSAGE, {"producerGroup": "p", "topic": "orders", "queueId": "0"},
                  b"confidential order", as_=ADMIN)
    offset = int(stored.ext_fields["msgId"][-16:], 16)
    pull = {"consumerGroup": "billing", "topic": "%RETRY%billing", "queueId": "0", "queueOffset": "0",
            "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"}

    async def attack() -> tuple[RemotingCommand, bytes, RemotingCommand]:
        async with RemotingClient(rpc_hook=AclClientRPCHook(CONSUMER)) as consumer, \
                RemotingClient(rpc_hook=AclClientRPCHook(MEMBER)) as member:
            beat = await consumer.invoke(server.broker, RemotingCommand.request(RequestCode.HEART_BEAT, {},
                                                                                 billing_heartbeat()), 5.0)
            assert beat.code == ResponseCode.SUCCESS  # billing consumes orders while this connection lasts
            copied = await member.invoke(server.broker, RemotingCommand.request(
                RequestCode.CONSUMER_SEND_MSG_BACK, send_back_ext(offset)), 5.0)
            await asyncio.sleep(1.5)  # past delay level 1
            retried = await member.invoke(server.broker, RemotingCommand.request(RequestCode.PULL_MESSAGE, pull), 5.0)
            own = await consumer.invoke(server.broker, RemotingCommand.request(
                RequestCode.CONSUMER_SEND_MSG_BACK, send_back_ext(offset)), 5.0)
            return copied, retried.body, own

    copied, retried, own = asyncio.run(attack())
    assert b"confidential order" not in retried
    assert copied.code == ResponseCode.NO_PERMISSION, copied.remark
    assert "Topic:orders" in (copied.remark or "")
    assert own.code == ResponseCode.SUCCESS, own.remark


def test_refusals_tell_nobody_where_the_log_begins_and_ends(server):
    """VIEW_MESSAGE_BY_ID read its offset's record before authorizing it and answered a missing one as a bad
    request naming the log's bounds (``commit-log offset 1000000000 outside [0, 517)``), to an account without any
    permission. Now only Get on the cluster learns that an offset holds no record."""
    for offset in (1, 10**9):
        for code in (RequestCode.VIEW_MESSAGE_BY_ID, RequestCode.CONSUMER_SEND_MSG_BACK):
            ext = {"offset": str(offset), "group": "billing", "delayLevel": "1"}
            for who in (NOBODY, MEMBER):
                answer = call(server.broker, code, ext, as_=who)
                assert answer.code == ResponseCode.NO_PERMISSION, (code, who.access_key, answer.remark)
                assert "outside" not in (answer.remark or "") and "offset" not in (answer.remark or ""), answer.remark
        missing = call(server.broker, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}, as_=ADMIN)
        assert missing.code == ResponseCode.SYSTEM_ERROR and "no message at" in (missing.remark or "")


def topics(server: AclServer) -> set[str]:
    return set(orjson.loads(call(server.broker, RequestCode.GET_ALL_TOPIC_CONFIG, as_=ADMIN).body)["topicConfigTable"])


def test_reading_a_route_creates_no_topic(server):
    """With autoCreateTopicEnable, gRPC QueryRoute created the topic it was asked about: an account allowed only to
    read (Sub) created topics at will, each persisted and routed, where remoting creates a topic only for a send
    (Pub). Now a route of an unknown topic is the one its first send will create it with; the send creates it."""
    with grpc.insecure_channel(server.proc.grpc) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for who, topic in ((READER, "made_by_a_reader"), (READ_ONLY, "made_by_a_producer")):
            route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=_metadata(who),
                                    timeout=5)
            assert route.status.code == pb.OK and route.message_queues, route.status
        assert not {"made_by_a_reader", "made_by_a_producer"} & topics(server)
        sent = stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
            topic=pb.Resource(name="made_by_a_producer"), body=b"first",
            system_properties=pb.SystemProperties(message_id="0123456789ABCDEF0123456789ABCDEF",
                                                  body_encoding=pb.IDENTITY))]),
            metadata=_metadata(READ_ONLY), timeout=5)
        assert sent.status.code == pb.OK, sent.status
    assert "made_by_a_producer" in topics(server) and "made_by_a_reader" not in topics(server)


def test_a_signed_account_cannot_write_a_log_line_per_request(server):
    """Refusals of the ACL were folded per host, but past it a signed account with a group of its own wrote one
    warning line per request, at will: send-backs refused by the handler, refused oneway END_TRANSACTIONs, sends
    naming an illegal topic, repeated conflicting decisions of its own transaction. 4,000 requests wrote 4,000
    lines. Now each such refusal is folded per host as the ACL's are."""
    topic = {"producerGroup": "attacker-group", "topic": "other", "queueId": "0"}
    tx = call(server.broker, RequestCode.SEND_MESSAGE, {**topic, "properties": "TRAN_MSG\x01true\x02PGROUP\x01"
                                                        "attacker-group\x02"}, b"half", as_=ATTACKER)
    assert tx.code == ResponseCode.SUCCESS, tx.remark
    half_offset, clo = tx.ext_fields["queueOffset"], str(int(tx.ext_fields["msgId"][-16:], 16))
    decision = {"producerGroup": "attacker-group", "tranStateTableOffset": half_offset, "commitLogOffset": clo,
                "fromTransactionCheck": "false"}
    assert call(server.broker, RequestCode.END_TRANSACTION, {**decision, "commitOrRollback": "8"},
                as_=ATTACKER).code == ResponseCode.SUCCESS
    before = len(server.log.splitlines())

    async def flood() -> None:
        async with RemotingClient(rpc_hook=AclClientRPCHook(ATTACKER)) as client:
            for i in range(1000):
                for code, ext, body, oneway in (
                        (RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": clo, "group": "attacker-group",
                                                              "originMsgId": f"m{i}"}, b"", False),
                        (RequestCode.END_TRANSACTION, {**decision, "commitLogOffset": str(i),
                                                       "commitOrRollback": "8"}, b"", True),
                        (RequestCode.SEND_MESSAGE, {**topic, "topic": f"bad topic {i}"}, b"x", False),
                        (RequestCode.END_TRANSACTION, {**decision, "commitOrRollback": "12"}, b"", False)):
                    cmd = RemotingCommand.request(code, ext, body, oneway=oneway)
                    if oneway:
                        await client.invoke_oneway(server.broker, cmd)
                    else:
                        answer = await client.invoke(server.broker, cmd, 5.0)
                        assert answer.code != ResponseCode.SUCCESS, (code, answer.remark)
            await asyncio.sleep(1.0)  # the oneway ones are decided

    asyncio.run(flood())
    written = server.log.splitlines()[before:]
    assert len(written) < 200, (len(written), written[:5], written[-5:])


def test_refusals_tell_nobody_which_access_keys_exist_or_are_disabled(server):
    """An unsigned stranger told apart an unknown access key (``no account for AccessKey …``), a known one
    (``signature check failed …``) and a disabled one (``user … is disabled``), on remoting, gRPC and the console's
    login: a list of the cluster's accounts for the guessing. Now all three are answered in the same words; the
    server's log says which it was."""
    assert create_user(server, "disabledKey1", "disabledSecret1", ADMIN).code == ResponseCode.SUCCESS
    disable = orjson.dumps({"username": "disabledKey1", "userStatus": "disable"})
    assert call(server.broker, RequestCode.AUTH_UPDATE_USER, {"username": "disabledKey1"}, disable,
                as_=ADMIN).code == ResponseCode.SUCCESS
    tries = {"unknown": SessionCredentials("guessedKey01", "whatever01"),
             "known": SessionCredentials(ADMIN.access_key, "notTheSecret1"),
             "disabled": SessionCredentials("disabledKey1", "disabledSecret1")}
    for addr in (server.broker, server.namesrv):
        remarks = {kind: (call(addr, RequestCode.GET_BROKER_CLUSTER_INFO, as_=creds).remark or "")
                   .replace(creds.access_key, "K") for kind, creds in tries.items()}
        assert len(set(remarks.values())) == 1, remarks
    with grpc.insecure_channel(server.proc.grpc) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        messages = {kind: stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="orders")),
                                          metadata=_metadata(creds), timeout=5).status.message
                    .replace(creds.access_key, "K") for kind, creds in tries.items()}
    assert len(set(messages.values())) == 1, messages
    for why in ("no account for AccessKey guessedKey01", "signature check failed for AccessKey adminKey01",
                "user disabledKey1 is disabled"):
        assert why in server.log


def test_a_stranger_cannot_write_log_lines_by_connecting(server):
    """Before any ACL, every connection opened and closed wrote two lines (accepted, closed), a garbage one three:
    a stranger looping connect and close wrote the log at will. Now they are folded per host like refusals."""
    host, port = server.broker.rsplit(":", 1)
    before = len(server.log.splitlines())
    for i in range(600):
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            if i % 2:
                sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
                sock.recv(1)
    time.sleep(0.5)
    written = server.log.splitlines()[before:]
    assert len(written) < 100, (len(written), written[:3])


def test_a_stranger_cannot_write_megabytes_to_the_log_with_long_access_keys(server):
    """A refusal's line named the access key whole: a stranger's requests each carrying a new 1 MB access key wrote
    20 lines of a megabyte per 10 s (and kept each line's text in memory to fold its repeats). Now a refusal's
    line is at most a few hundred characters, whatever the peer sent."""
    log = server.root / "server.log"
    before = log.stat().st_size
    for i in range(30):
        key = f"{i:08d}" + "K" * 1_000_000
        resp = call(server.broker, RequestCode.GET_MAX_OFFSET,
                    {"AccessKey": key, "Signature": "x", "topic": "orders", "queueId": "0"})
        assert resp.code == ResponseCode.NO_PERMISSION
    assert call(server.broker, RequestCode.GET_MAX_OFFSET, {"topic": "orders", "queueId": "0"},
                as_=CONSUMER).code == ResponseCode.SUCCESS  # served after them
    assert log.stat().st_size - before < 64 * 1024


def test_a_heartbeat_cannot_write_megabytes_to_the_log_with_a_long_client_id(server):
    """Each heartbeat joining a group from a new connection logs its client id: an account with a producer group of
    its own wrote a 1 MB line per connection with 1 MB client ids (10 MB in 10 requests). Now a client id longer
    than RocketMQ's clients make is refused as a malformed heartbeat, and a usual one still joins."""
    log = server.root / "server.log"
    before = log.stat().st_size
    for i in range(10):
        beat = {"clientID": f"{i}@" + "C" * 1_000_000, "producerDataSet": [{"groupName": "attacker-group"}]}
        resp = call(server.broker, RequestCode.HEART_BEAT, {}, orjson.dumps(beat), as_=ATTACKER)
        assert resp.code != ResponseCode.SUCCESS and "client id" in (resp.remark or ""), resp.remark
    assert log.stat().st_size - before < 64 * 1024
    beat = {"clientID": "127.0.0.1@attacker", "producerDataSet": [{"groupName": "attacker-group"}]}
    assert call(server.broker, RequestCode.HEART_BEAT, {}, orjson.dumps(beat),
                as_=ATTACKER).code == ResponseCode.SUCCESS


def test_one_heartbeat_makes_a_bounded_amount_of_work(server):
    """A consumer account allowed Sub on every group (plain_acl.yml's ``defaultGroupPerm: SUB``) named 2,000 new
    groups in one heartbeat: each got its retry topic with a rewrite of the whole topic table, the broker answered
    nobody for 40 s, and the log got 6,000 lines. Now one heartbeat names at most 1,024 groups, their retry topics
    are stored with one write, and its joins are one line."""
    def beat(names: list[str]) -> bytes:
        return orjson.dumps({"clientID": "many@1", "producerDataSet": [], "consumerDataSet": [
            {"groupName": name, "messageModel": "CLUSTERING", "subscriptionDataSet": [{"topic": "orders"}]}
            for name in names]})

    async def heartbeat(names: list[str]) -> RemotingCommand:
        async with RemotingClient(rpc_hook=AclClientRPCHook(ANY_GROUP)) as client:
            return await client.invoke(server.broker, RemotingCommand.request(RequestCode.HEART_BEAT, {},
                                                                             beat(names)), 120.0)

    too_many = asyncio.run(heartbeat([f"too-many-{i}" for i in range(1025)]))
    assert too_many.code != ResponseCode.SUCCESS and "1024" in (too_many.remark or ""), too_many.remark
    assert not any(t.startswith("%RETRY%too-many-") for t in topics(server))
    before = len(server.log.splitlines())
    answer = asyncio.run(heartbeat([f"many-{i}" for i in range(1000)]))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert sum(t.startswith("%RETRY%many-") for t in topics(server)) == 1000
    written = server.log.splitlines()[before:]
    assert len(written) < 20, (len(written), written[:5])


def test_create_on_a_pattern_rewrites_no_existing_topic_or_group(server):
    """A user allowed to create topics and groups (Create on ``Topic:*`` and ``Group:*``, no Update) rewrote other
    teams' existing ones through the same requests: ``orders`` made unwritable and unreadable (perm 0), billing's
    consumers stopped (``consumeEnable=false``). Now a topic or group the broker has already needs Update."""
    maker = SessionCredentials("makerKey01", "makerSecret01")
    assert create_user(server, maker.access_key, maker.secret_key, ADMIN).code == ResponseCode.SUCCESS
    assert create_acl(server, maker.access_key, [{"resource": r, "actions": ["Create"], "decision": "Allow"}
                                                 for r in ("Topic:*", "Group:*")], ADMIN).code == ResponseCode.SUCCESS
    heartbeat_as_billing(server)  # billing is known: its retry topic, and offsets below
    offset = {"consumerGroup": "billing", "topic": "orders", "queueId": "0", "commitOffset": "0"}
    assert call(server.broker, RequestCode.UPDATE_CONSUMER_OFFSET, offset, as_=CONSUMER).code == ResponseCode.SUCCESS

    def create_topic(topic: str) -> RemotingCommand:
        return call(server.broker, RequestCode.UPDATE_AND_CREATE_TOPIC,
                    {"topic": topic, "readQueueNums": "1", "writeQueueNums": "1", "perm": "0"}, as_=maker)

    def create_group(group: str) -> RemotingCommand:
        return call(server.broker, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                    orjson.dumps({"groupName": group, "consumeEnable": False}), as_=maker)

    for answer in (create_topic("orders"), create_group("billing")):
        assert answer.code == ResponseCode.NO_PERMISSION and "no Update permission" in (answer.remark or ""), \
            answer.remark
    configs = orjson.loads(call(server.broker, RequestCode.GET_ALL_TOPIC_CONFIG, as_=ADMIN).body)
    assert configs["topicConfigTable"]["orders"]["perm"] == 6
    groups = orjson.loads(call(server.broker, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, as_=ADMIN).body)
    assert "billing" not in str(groups)
    assert create_topic("maker-topic").code == ResponseCode.SUCCESS  # what it may do: make new ones
    assert create_group("maker-group").code == ResponseCode.SUCCESS


def test_a_producers_decisions_learn_nothing_of_other_groups_halves(server):
    """END_TRANSACTION needs Pub on the group it names, and the transaction service refuses another group's half;
    but its answers told a producer with a group of its own where other groups' halves are (``The producer group
    wrong``), where plain messages are (``is not a half message``) and where the log ends (``outside [0, N)``).
    Now all three are the same words."""
    half = call(server.broker, RequestCode.SEND_MESSAGE, {"producerGroup": "order-service", "topic": "orders",
                                                          "queueId": "0", "properties": "TRAN_MSG\x01true\x02"
                                                          "PGROUP\x01order-service\x02"}, b"victim's half", as_=VICTIM)
    plain = call(server.broker, RequestCode.SEND_MESSAGE, {"producerGroup": "p", "topic": "other", "queueId": "0"},
                 b"plain", as_=ADMIN)
    assert half.code == plain.code == ResponseCode.SUCCESS
    remarks = set()
    for answer, offset in ((half, None), (plain, None), (None, 10**12)):
        clo = offset if answer is None else int(answer.ext_fields["msgId"][-16:], 16)
        decided = call(server.broker, RequestCode.END_TRANSACTION, {
            "producerGroup": "attacker-group", "tranStateTableOffset": "0", "commitLogOffset": str(clo),
            "commitOrRollback": "8", "fromTransactionCheck": "false"}, as_=ATTACKER)
        assert decided.code == ResponseCode.SYSTEM_ERROR
        remarks.add((decided.remark or "").replace(str(clo), "N"))
    assert len(remarks) == 1, remarks
