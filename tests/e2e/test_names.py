"""Topic and group names are checked where they enter (RocketMQ's rules: ``^[%|a-zA-Z0-9_-]+$``, topics up to
127 characters, groups up to 255), by every request of the broker, the name server and gRPC; none reaches the
file system unchecked."""

from __future__ import annotations

import grpc
import orjson
import pytest

from tests.e2e.helpers import RawClient
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub
from txmq.remoting.codes import RequestCode, ResponseCode

BAD_NAMES = ["/../../../victim", "..", "a/b", "sp ace", "dot.ted", "x" * 256]


def consumer_heartbeat(group: str, topic: str = "names") -> bytes:
    return orjson.dumps({"clientID": "names-test", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": [{"topic": topic, "subString": "*"}]}]})


@pytest.fixture
def broker(cluster):
    return cluster.start_broker_with_topic("names")


def test_a_group_name_cannot_reach_outside_the_store(cluster, broker):
    """The adversarial run's case: a heartbeat's group ``/../../../victim`` made topic ``%RETRY%/../../../victim``,
    and deleting that topic removed an empty directory outside the store."""
    victim = cluster.root / "victim"
    victim.mkdir()
    with RawClient(broker.addrs["broker"]) as raw:
        header = {"producerGroup": "p", "topic": "%RETRY%", "defaultTopic": "TBW102", "defaultTopicQueueNums": "1",
                  "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": "",
                  "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
        assert raw.call(RequestCode.SEND_MESSAGE, header, b"x").code == ResponseCode.SUCCESS  # consumequeue/%RETRY%
        resp = raw.call(RequestCode.HEART_BEAT, body=consumer_heartbeat("/../../../victim"))
        assert resp.code != ResponseCode.SUCCESS and "illegal characters" in (resp.remark or "")
        resp = raw.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "%RETRY%/../../../victim"})
        assert resp.code != ResponseCode.SUCCESS
    assert victim.is_dir()


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_are_refused_by_every_entry(cluster, broker, name):
    with RawClient(broker.addrs["broker"]) as raw:
        calls = {
            "heartbeat group": (RequestCode.HEART_BEAT, {}, consumer_heartbeat(name)),
            "heartbeat subscription": (RequestCode.HEART_BEAT, {}, consumer_heartbeat("g_names", name)),
            "heartbeat producer": (RequestCode.HEART_BEAT, {}, orjson.dumps({
                "clientID": "names-test", "producerDataSet": [{"groupName": name}], "consumerDataSet": []})),
            "pull group": (RequestCode.PULL_MESSAGE, {"consumerGroup": name, "topic": "names", "queueId": "0",
                                                     "queueOffset": "0", "sysFlag": "1", "commitOffset": "0"}, b""),
            "update offset group": (RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": name, "topic": "names",
                                                                         "queueId": "0", "commitOffset": "1"}, b""),
            "update offset topic": (RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": name,
                                                                         "queueId": "0", "commitOffset": "1"}, b""),
            "query offset group": (RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": name, "topic": "names",
                                                                       "queueId": "0"}, b""),
            "create topic": (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": name}, b""),
            "delete topic": (RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": name}, b""),
            "send-back group": (RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": "0", "group": name}, b""),
        }
        for what, (code, ext, body) in calls.items():
            resp = raw.call(code, ext, body)
            assert resp.code != ResponseCode.SUCCESS, what
            assert resp.remark and ("illegal" in resp.remark or "longer than" in resp.remark), (what, resp.remark)
        topics = orjson.loads(raw.call(RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
        offsets = orjson.loads(raw.call(RequestCode.GET_ALL_CONSUMER_OFFSET).body)["offsetTable"]
        assert not [t for t in topics if name in t] and not [k for k in offsets if name in k]
    with RawClient(cluster.namesrv_addr) as raw:
        wrapper = {"topicConfigSerializeWrapper": {"topicConfigTable": {name: {"topicName": name}}}}
        resp = raw.call(RequestCode.REGISTER_BROKER, {"clusterName": "c", "brokerAddr": "127.0.0.1:1",
                                                      "brokerName": "evil", "brokerId": "0"}, orjson.dumps(wrapper))
        assert resp.code != ResponseCode.SUCCESS
        assert resp.remark and ("illegal" in resp.remark or "longer than" in resp.remark), resp.remark
        resp = raw.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": name})
        assert resp.code != ResponseCode.SUCCESS
    with grpc.insecure_channel(broker.addrs["grpc"]) as channel:
        stub, md = MessagingServiceStub(channel), [("x-mq-client-id", "names-grpc")]
        queue = pb.MessageQueue(topic=pb.Resource(name="names"), id=0)
        got = list(stub.ReceiveMessage(spb.ReceiveMessageRequest(
            group=pb.Resource(name=name), message_queue=pb.MessageQueue(topic=pb.Resource(name="names"), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=1,
            invisible_duration={"seconds": 30}, long_polling_timeout={"seconds": 0}), metadata=md, timeout=10))
        assert got[0].status.code == pb.Code.ILLEGAL_CONSUMER_GROUP
        r = stub.UpdateOffset(spb.UpdateOffsetRequest(group=pb.Resource(name=name), message_queue=queue, offset=1),
                              metadata=md, timeout=10)
        assert r.status.code == pb.Code.ILLEGAL_CONSUMER_GROUP
        r = stub.GetOffset(spb.GetOffsetRequest(group=pb.Resource(name=name), message_queue=queue),
                           metadata=md, timeout=10)
        assert r.status.code == pb.Code.ILLEGAL_CONSUMER_GROUP
        r = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=name)), metadata=md, timeout=10)
        assert r.status.code == pb.Code.ILLEGAL_TOPIC


def test_a_consumer_group_is_short_enough_to_name_its_retry_topic(broker):
    """Groups may have 255 characters, but a consuming group names ``%RETRY%<group>`` (at most 127): 120."""
    long_group = "g" * 121
    with RawClient(broker.addrs["broker"]) as raw:
        resp = raw.call(RequestCode.HEART_BEAT, body=consumer_heartbeat(long_group))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "longer than 120" in (resp.remark or ""), resp.remark
        resp = raw.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": "0", "group": long_group})
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "longer than 120" in (resp.remark or ""), resp.remark
        assert raw.call(RequestCode.HEART_BEAT, body=consumer_heartbeat("g" * 120)).code == ResponseCode.SUCCESS
    with grpc.insecure_channel(broker.addrs["grpc"]) as channel:
        got = list(MessagingServiceStub(channel).ReceiveMessage(spb.ReceiveMessageRequest(
            group=pb.Resource(name=long_group), message_queue=pb.MessageQueue(topic=pb.Resource(name="names"), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=1,
            invisible_duration={"seconds": 30}, long_polling_timeout={"seconds": 0}),
            metadata=[("x-mq-client-id", "names-grpc")], timeout=10))
        assert got[0].status.code == pb.Code.ILLEGAL_CONSUMER_GROUP
