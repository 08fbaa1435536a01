"""QUERY_CONSUME_QUEUE (321, mqadmin's queryCq) under ACL: Get on the topic, and on the consumer group when the
request names one; refused to the unsigned and to accounts without it (fail closed)."""

from __future__ import annotations

import pytest

from txmq.acl.signer import SessionCredentials
from txmq.broker.visibility import INTERNAL_TOPICS
from txmq.remoting.codes import RequestCode, ResponseCode

from .conftest import ADMIN, ATTACKER, CONSUMER, NOBODY, AclServer, call
from .test_acl_users import ok


def query(server: AclServer, as_: object, topic: str = "orders", group: str | None = None) -> tuple[int, str]:
    ext = {"topic": topic, "queueId": "0", "index": "0", "count": "5"}
    if group is not None:
        ext["consumerGroup"] = group
    resp = call(server.broker, RequestCode.QUERY_CONSUME_QUEUE, ext, as_=as_)  # type: ignore[arg-type]
    return resp.code, resp.remark or ""


def test_query_cq_takes_get_on_the_topic_and_the_group(acl_server: AclServer) -> None:
    assert query(acl_server, ADMIN)[0] == ResponseCode.SUCCESS
    assert query(acl_server, ADMIN, group="billing")[0] == ResponseCode.SUCCESS
    user = SessionCredentials("cqReader01", "cqSecret0001")
    ok(acl_server, "createUser", "-u", user.access_key, "-p", user.secret_key)
    ok(acl_server, "createAcl", "-s", f"User:{user.access_key}", "-r", "Topic:orders", "-a", "Get", "-d", "Allow")
    assert query(acl_server, user)[0] == ResponseCode.SUCCESS
    assert query(acl_server, user, topic="other")[0] == ResponseCode.NO_PERMISSION
    code, remark = query(acl_server, user, group="billing")  # the group's subscription needs Get on the group
    assert code == ResponseCode.NO_PERMISSION and "Group:billing" in remark, remark
    ok(acl_server, "createAcl", "-s", f"User:{user.access_key}", "-r", "Group:billing", "-a", "Get", "-d", "Allow")
    assert query(acl_server, user, group="billing")[0] == ResponseCode.SUCCESS


@pytest.mark.parametrize(("as_", "topic", "group"), [
    (None, "orders", None),  # unsigned
    (NOBODY, "orders", None),  # no permission at all
    (CONSUMER, "orders", None),  # Sub is no Get: it is an admin request (RocketMQ asks Get too)
    (ATTACKER, "orders", "billing"),  # Pub and Sub on every topic by its defaults
])
def test_query_cq_is_refused_without_get(acl_server: AclServer, as_: object, topic: str, group: str | None) -> None:
    code, remark = query(acl_server, as_, topic, group)
    assert code == ResponseCode.NO_PERMISSION, remark


@pytest.mark.parametrize("topic", sorted(INTERNAL_TOPICS))
def test_an_internal_topics_entries_take_get_on_the_cluster_not_a_topic_pattern(acl_server: AclServer,
                                                                                 topic: str) -> None:
    """The half topic's entries are every producer's transactions in flight (TXMQ_TX_LIST shows them only with Get
    on the cluster), the schedule and timer topics' every delayed message: Get on ``Topic:*``, which a monitoring
    account holds to watch its topics, is not enough."""
    user = SessionCredentials("cqPattern01", "cqSecret0002")
    if user.access_key not in ok(acl_server, "listUser"):
        ok(acl_server, "createUser", "-u", user.access_key, "-p", user.secret_key)
        ok(acl_server, "createAcl", "-s", f"User:{user.access_key}", "-r", "Topic:*", "-a", "Get", "-d", "Allow")
    assert query(acl_server, user)[0] == ResponseCode.SUCCESS  # the pattern holds for the user's topics
    assert call(acl_server.broker, RequestCode.TXMQ_TX_LIST, {}, as_=user).code == ResponseCode.NO_PERMISSION
    code, remark = query(acl_server, user, topic=topic)
    assert code == ResponseCode.NO_PERMISSION, remark
    assert query(acl_server, ADMIN, topic=topic)[0] == ResponseCode.SUCCESS
