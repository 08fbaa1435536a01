"""Access control that fails closed (issue #28), driven as an attacker holding one account would drive it: every
served request code refused to an account without permissions, sends read once (long field names, ``"m":"TRUE"``),
messages read by offset only with Sub on their topic, metadata only with Get, no secret in any answer, and no
metric series for requests that never passed the ACL."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

import orjson
import pytest

from txmq.launch import free_port
from txmq.message import Message, encode_batch
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand

from .conftest import ADMIN, ATTACKER, CONSUMER, NOBODY, VICTIM, AclServer, call, start_acl_server

# Ext fields that let nearly every request code's header parse, so that an answer other than NO_PERMISSION means
# the request was authorized, not that it was malformed.
EVERY_FIELD = {
    "topic": "orders", "consumerGroup": "billing", "producerGroup": "order-service", "group": "billing",
    "groupName": "billing", "queueId": "0", "queueOffset": "0", "commitOffset": "0", "offset": "0",
    "timestamp": "0", "key": "k", "id": "1", "outcome": "COMMIT", "limit": "1", "statsName": "TOPIC_PUT_NUMS",
    "statsKey": "orders", "clusterName": "DefaultCluster", "brokerAddr": "127.0.0.1:1", "brokerName": "b",
    "brokerId": "0", "tranStateTableOffset": "0", "commitLogOffset": "0", "commitOrRollback": "8", "index": "0",
    "a": "order-service", "b": "orders", "originTopic": "orders", "maxMsgNums": "1", "sysFlag": "0",
    "username": "nobodyKey01", "subject": "User:nobodyKey01", "recallHandle": "not-a-handle",
}
BODIES = {
    RequestCode.LOCK_BATCH_MQ: b'{"consumerGroup":"billing","clientId":"c","mqSet":[]}',
    RequestCode.UNLOCK_BATCH_MQ: b'{"consumerGroup":"billing","clientId":"c","mqSet":[]}',
    RequestCode.TXMQ_END_TRANSACTION_BATCH: b'{"producerGroup":"order-service","entries":[]}',
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: b'{"groupName":"billing"}',
    RequestCode.HEART_BEAT: b'{"clientID":"c","producerDataSet":[{"groupName":"order-service"}]}',
    RequestCode.REGISTER_BROKER: b'{"topicConfigSerializeWrapper":{"topicConfigTable":{}}}',
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: b'{"queueDatas":[]}',
    RequestCode.UPDATE_BROKER_CONFIG: b"maxMessageSize=1024\n",
    RequestCode.SEND_BATCH_MESSAGE: encode_batch([Message("orders", b"x")]),
    RequestCode.CHECK_CLIENT_CONFIG: b'{"clientId":"c","group":"billing","subscriptionData":{"topic":"orders",'
                                     b'"subString":"a > 1","expressionType":"SQL92"}}',
}
# Declared for any authenticated user: a client learns the brokers it must heartbeat.
ANY_USER = {RequestCode.GET_BROKER_CLUSTER_INFO}


def _sweep(addr: str, who) -> dict[int, RemotingCommand]:
    return {code: call(addr, code, EVERY_FIELD, BODIES.get(code, b"{}"), as_=who) for code in RequestCode}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclServer]:
    metrics_port = free_port()
    srv = start_acl_server(tmp_path_factory.mktemp("fail-closed"),
                           f"metricsExporterType=PROM\nmetricsPromExporterPort={metrics_port}\n")
    srv.metrics_port = metrics_port  # type: ignore[attr-defined]
    try:
        yield srv
    finally:
        srv.proc.stop()


@pytest.mark.parametrize("port", ["broker", "namesrv"])
def test_every_served_code_is_refused_to_an_account_without_permissions(server: AclServer, port: str):
    """Every request code the port serves answers NO_PERMISSION to a signed account with no permission (unless it
    is declared for any user); the rest are not served. Before, 17 served codes were in no table and answered."""
    stored = call(server.broker, RequestCode.SEND_MESSAGE, {"producerGroup": "p", "topic": "other", "queueId": "0"},
                  b"at offset 0: VIEW_MESSAGE_BY_ID's record", as_=ADMIN)
    assert stored.code == ResponseCode.SUCCESS
    answers = _sweep(getattr(server, port), NOBODY)
    served = {code: r for code, r in answers.items() if r.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED}
    assert len(served) >= (40 if port == "broker" else 5)
    opened = {RequestCode(c).name: (r.code, r.remark) for c, r in served.items()
              if r.code != ResponseCode.NO_PERMISSION and c not in ANY_USER}
    assert opened == {}


def test_no_answer_carries_a_secret(server: AclServer):
    """The broker's config (GET_BROKER_CONFIG) carried the admin account's accessKey/secretKey it registers with;
    signed with them, any account became admin. Now no answer of the broker or name server carries the secret,
    even to the admin, whatever it asks."""
    readers = [c for c in RequestCode if c.name.startswith(("GET_", "VIEW_", "QUERY_", "SEARCH_"))]
    readers += [RequestCode.TXMQ_STATS, RequestCode.TXMQ_TX_LIST]
    for addr in (server.broker, server.namesrv):
        for who in (ADMIN, CONSUMER):
            for code in readers:
                resp = call(addr, code, EVERY_FIELD, BODIES.get(code, b""), as_=who)
                seen = resp.body + (resp.remark or "").encode() + orjson.dumps(resp.ext_fields)
                assert ADMIN.secret_key.encode() not in seen, RequestCode(code).name
    config = call(server.broker, RequestCode.GET_BROKER_CONFIG, as_=ADMIN)
    assert config.code == ResponseCode.SUCCESS and b"aclEnable=true" in config.body
    assert b"secretKey" not in config.body and b"accessKey" not in config.body
    assert call(server.broker, RequestCode.GET_BROKER_CONFIG, as_=CONSUMER).code == ResponseCode.NO_PERMISSION


def _max_offset(server: AclServer, topic: str) -> int:
    return sum(int(call(server.broker, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)},
                        as_=ADMIN).ext_fields["offset"]) for q in range(2))


def test_long_field_names_do_not_walk_past_the_acl(server: AclServer):
    """SEND_MESSAGE_V2 with RocketMQ's long field names (the ACL read only the letters, the processor both): a
    consumer-only account stored into another team's topic, and a half into another team's producer group."""
    before = _max_offset(server, "orders")
    plain = {"producerGroup": "billing", "topic": "orders", "queueId": "0", "sysFlag": "0", "bornTimestamp": "0",
             "flag": "0", "properties": ""}
    resp = call(server.broker, RequestCode.SEND_MESSAGE_V2, plain, b"forged", as_=CONSUMER)
    assert resp.code == ResponseCode.NO_PERMISSION and "Pub permission on Topic:orders" in (resp.remark or "")
    half = dict(plain, topic="other", sysFlag="4", properties="TRAN_MSG\x01true\x02PGROUP\x01order-service\x02")
    resp = call(server.broker, RequestCode.SEND_MESSAGE_V2, half, b"forged half", as_=ATTACKER)
    assert resp.code == ResponseCode.NO_PERMISSION and "Group:order-service" in (resp.remark or "")
    mixed = dict(plain, b="attacker-topic")  # a letter and a long name for one field: one reading decides both
    resp = call(server.broker, RequestCode.SEND_MESSAGE_V2, mixed, b"forged", as_=CONSUMER)
    assert resp.code == ResponseCode.NO_PERMISSION
    assert _max_offset(server, "orders") == before


def test_a_batch_is_a_batch_to_the_acl_as_to_the_processor(server: AclServer):
    """``"m":"TRUE"`` was "not a batch" to the ACL (it compared strings) and a batch to the processor: a batch of
    halves owned by the victim's group went in unchecked."""
    body = encode_batch([Message("other", b"forged",
                                 properties={"TRAN_MSG": "true", "PGROUP": "order-service", "UNIQ_KEY": "X1"})])
    ext = {"a": "attacker-group", "b": "other", "e": "0", "f": "0", "g": "0", "h": "0", "i": "", "m": "TRUE"}
    resp = call(server.broker, RequestCode.SEND_MESSAGE_V2, ext, body, as_=ATTACKER)
    assert resp.code == ResponseCode.NO_PERMISSION and "Group:order-service" in (resp.remark or "")
    listed = orjson.loads(call(server.broker, RequestCode.TXMQ_TX_LIST, {"group": "order-service"}, as_=VICTIM).body)
    assert listed["totals"] == [{"pending": 0, "discarded": 0}]


def test_reading_a_message_by_offset_needs_sub_on_its_topic(server: AclServer):
    """VIEW_MESSAGE_BY_ID needed only a signature: a consumer-only account walked the commit log and read another
    topic's bodies. Now the record is read, then Sub on its topic is required, and the bytes authorized are the
    bytes answered."""
    secret = call(server.broker, RequestCode.SEND_MESSAGE, {"producerGroup": "p", "topic": "other", "queueId": "0",
                                                            "sysFlag": "0", "bornTimestamp": "0", "flag": "0",
                                                            "properties": ""}, b"another team's secret", as_=ADMIN)
    mine = call(server.broker, RequestCode.SEND_MESSAGE, {"producerGroup": "p", "topic": "orders", "queueId": "0",
                                                          "sysFlag": "0", "bornTimestamp": "0", "flag": "0",
                                                          "properties": ""}, b"an order", as_=VICTIM)
    assert secret.code == mine.code == ResponseCode.SUCCESS
    for resp, allowed in ((secret, False), (mine, True)):
        offset = int(resp.ext_fields["msgId"][16:], 16)  # an offset message id: host, port, commit-log offset
        viewed = call(server.broker, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}, as_=CONSUMER)
        if allowed:
            assert viewed.code == ResponseCode.SUCCESS and b"an order" in viewed.body
        else:
            assert viewed.code == ResponseCode.NO_PERMISSION and b"secret" not in viewed.body
            assert "Sub permission on Topic:other" in (viewed.remark or "")


@pytest.mark.parametrize("code,ext", [
    (RequestCode.GET_ALL_TOPIC_CONFIG, {}),
    (RequestCode.GET_ALL_CONSUMER_OFFSET, {}),
    (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}),
    (RequestCode.GET_BROKER_RUNTIME_INFO, {}),
    (RequestCode.GET_BROKER_HA_STATUS, {}),
    (RequestCode.GET_CONSUME_STATS, {"consumerGroup": "order-service"}),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "order-service"}),
    (RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "order-service"}),
    (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "other"}),
    (RequestCode.GET_TOPIC_STATS_INFO, {"topic": "other"}),
    (RequestCode.QUERY_CONSUMER_OFFSET, {"topic": "orders", "consumerGroup": "order-service", "queueId": "0"}),
])
def test_metadata_reads_need_permission_on_what_they_show(server: AclServer, code: RequestCode, ext: dict):
    """Topic configs, any group's offsets and consume stats, connection lists, runtime and HA status were open to
    every account. A consumer of "orders" in group "billing" now reads none of another's; the admin reads all."""
    assert call(server.broker, code, ext, as_=CONSUMER).code == ResponseCode.NO_PERMISSION
    assert call(server.broker, code, ext, as_=ADMIN).code != ResponseCode.NO_PERMISSION


def test_a_consumer_still_reads_its_own_offsets_and_lag(server: AclServer):
    own = {"topic": "orders", "consumerGroup": "billing", "queueId": "0"}
    for code in (RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET):
        assert call(server.broker, code, own, as_=CONSUMER).code != ResponseCode.NO_PERMISSION
    stats = call(server.broker, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "billing"}, as_=CONSUMER)
    assert stats.code == ResponseCode.SUCCESS


@pytest.mark.parametrize("code", [RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
                                  RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_EARLIEST_MSG_STORETIME])
def test_a_topic_internal_to_the_broker_shows_its_queues_only_to_the_cluster_readers(server: AclServer, code):
    """The half queue holds every producer group's halves (the wheel and schedule topics every topic's timed
    messages): no topic's permission covers them, so QUERY_CONSUME_QUEUE and GET_TOPIC_STATS_INFO show them only
    to Get on the cluster. The offset and time reads answered them to any account with Sub on ``Topic:*``
    (plain_acl.yml's ``defaultTopicPerm: SUB``): how many halves every other team stored, and when (by time, how
    many in any window). Now they need Get on the cluster too."""
    half = {"producerGroup": "order-service", "topic": "orders", "queueId": "0", "sysFlag": "4", "bornTimestamp": "0",
            "flag": "0", "properties": "TRAN_MSG\x01true\x02PGROUP\x01order-service\x02UNIQ_KEY\x01INTERNAL-1\x02"}
    assert call(server.broker, RequestCode.SEND_MESSAGE, half, b"half", as_=VICTIM).code == ResponseCode.SUCCESS
    ext = {"queueId": "0", "timestamp": "0"}
    for topic in ("RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX"):
        resp = call(server.broker, code, {**ext, "topic": topic}, as_=ATTACKER)  # Sub on Topic:* by default
        assert resp.code == ResponseCode.NO_PERMISSION, (topic, resp.code, resp.ext_fields)
        assert "Get permission on Cluster" in (resp.remark or "")
    assert call(server.broker, code, {**ext, "topic": "RMQ_SYS_TRANS_HALF_TOPIC"}, as_=ADMIN).code == \
        ResponseCode.SUCCESS
    assert call(server.broker, code, {**ext, "topic": "orders"}, as_=ATTACKER).code == ResponseCode.SUCCESS


def _series(server: AclServer) -> str:
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"  # type: ignore[attr-defined]
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def test_requests_that_never_passed_the_acl_create_no_metric_series(server: AclServer):
    """Each (request code, response code) pair got a histogram before the ACL: 100,000 unsigned requests with
    distinct codes made /metrics 240 MB. Now only requests past the ACL with a declared code are timed."""
    before = _series(server)
    for code in range(20_000, 20_200):  # unsigned, and signed with codes no server declares
        call(server.broker, code, as_=None if code % 2 else CONSUMER)
    call(server.broker, RequestCode.GET_BROKER_CONFIG, as_=CONSUMER)  # refused: not timed either
    after = _series(server)
    assert not re.search(r'request_code="20[0-9]{3}"', after) and 'response_code="16"' not in after
    assert len(after) < len(before) + 4096
    assert call(server.broker, RequestCode.GET_MAX_OFFSET, {"topic": "orders", "queueId": "0"},
                as_=CONSUMER).code == ResponseCode.SUCCESS
    assert 'request_code="30"' in _series(server)  # a served, authorized request is still timed


def test_the_bare_retry_prefix_is_no_topic_without_an_owner(server: AclServer):
    """A topic named ``%RETRY%`` (a legal name) is group ""'s retry topic to the ACL, and the empty name needs
    nothing: an account without any permission created it, sent to it, read it by offset and deleted it. No entry
    means deny: each is refused."""
    topic = "%RETRY%"
    created = call(server.broker, RequestCode.UPDATE_AND_CREATE_TOPIC,
                   {"topic": topic, "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}, as_=NOBODY)
    sent = call(server.broker, RequestCode.SEND_MESSAGE, {"producerGroup": "p", "topic": topic, "queueId": "0",
                                                          "sysFlag": "0", "bornTimestamp": "0", "flag": "0",
                                                          "properties": ""}, b"unowned", as_=NOBODY)
    routed = call(server.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, as_=NOBODY)
    deleted = call(server.broker, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}, as_=NOBODY)
    answers = {"create": created.code, "send": sent.code, "route": routed.code, "delete": deleted.code}
    assert answers == dict.fromkeys(answers, ResponseCode.NO_PERMISSION)
