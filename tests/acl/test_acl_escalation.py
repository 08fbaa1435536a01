"""Attacks beyond issue 28's list, each driven as an attacker holding one low-privilege account would drive it
against a running ``txmq server``: a user administrator making itself Super, plain_acl.yml permissions widened by
their defaults, retry topics changed with Sub alone, messages of other topics read through a consumer group's
send-back, the commit log's bounds learned from refusals, topics created by reading their route."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from txmq.acl.signer import SessionCredentials
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand

from .conftest import ADMIN, CONSUMER, PLAIN_ACL, AclServer, call, start_acl_server

USER_ADMIN = SessionCredentials("userAdmin01", "userAdminSecret01")  # made below: Update and Get on the cluster
READ_ONLY = SessionCredentials("readOnly01", "readOnlySecret01")  # reads orders; publishes anywhere else

EXTRA_ACCOUNTS = f"""\
  - accessKey: {READ_ONLY.access_key}
    secretKey: {READ_ONLY.secret_key}
    defaultTopicPerm: PUB|SUB
    topicPerms: [orders=SUB]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclServer]:
    srv = start_acl_server(tmp_path_factory.mktemp("acl-escalation"), plain_acl=PLAIN_ACL + EXTRA_ACCOUNTS)
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


def heartbeat_as_billing(server: AclServer) -> None:
    """The billing consumer's heartbeat: the broker creates the group's retry topic."""
    body = orjson.dumps({"clientID": "billing@1", "producerDataSet": [], "consumerDataSet": [
        {"groupName": "billing", "messageModel": "CLUSTERING", "subscriptionDataSet": [{"topic": "orders"}]}]})
    assert call(server.broker, RequestCode.HEART_BEAT, {}, body, as_=CONSUMER).code == ResponseCode.SUCCESS


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
