"""Bad values inside well-formed requests get a clear error code and one log line, never SYSTEM_ERROR with a
traceback: a JSON body that is not the object expected, a property that is not a number, header numbers
beyond Java's int/long (what RocketMQ's headers are), a gRPC born timestamp beyond the message layout."""

from __future__ import annotations

import uuid

import grpc
import orjson
import pytest

from tests.e2e.helpers import RawClient
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub
from txmq.message import MessageConst, properties_to_string
from txmq.remoting.codes import RequestCode, ResponseCode


def send_header(**over: str) -> dict[str, str]:
    return {"producerGroup": "p_err", "topic": "errs", "defaultTopic": "TBW102", "defaultTopicQueueNums": "1",
            "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": "",
            "reconsumeTimes": "0", "unitMode": "false", "batch": "false", **over}


BROKER_CASES = [
    pytest.param(RequestCode.HEART_BEAT, {}, b"[1]", ResponseCode.SYSTEM_ERROR, "object", id="heartbeat-array"),
    pytest.param(RequestCode.HEART_BEAT, {}, b'{"consumerDataSet": [[1]]}', ResponseCode.SYSTEM_ERROR, "consumerData",
                 id="heartbeat-nested"),
    pytest.param(RequestCode.LOCK_BATCH_MQ, {}, b'"x"', ResponseCode.SYSTEM_ERROR, "object", id="lock-string"),
    pytest.param(RequestCode.TXMQ_END_TRANSACTION_BATCH, {}, b"[1]", ResponseCode.SYSTEM_ERROR, "object",
                 id="end-batch-array"),
    pytest.param(RequestCode.SEND_MESSAGE,
                 send_header(properties=properties_to_string({MessageConst.DELAY_TIME_LEVEL: "abc"})), b"x",
                 ResponseCode.MESSAGE_ILLEGAL, "DELAY", id="delay-abc"),
    pytest.param(RequestCode.SEND_MESSAGE, send_header(flag=str(2**40)), b"x", ResponseCode.MESSAGE_ILLEGAL, "flag",
                 id="flag-beyond-int"),
    pytest.param(RequestCode.SEND_MESSAGE, send_header(bornTimestamp=str(2**64)), b"x", ResponseCode.MESSAGE_ILLEGAL,
                 "bornTimestamp", id="born-beyond-long"),
    pytest.param(RequestCode.SEND_MESSAGE, send_header(reconsumeTimes=str(-2**40)), b"x",
                 ResponseCode.MESSAGE_ILLEGAL, "reconsumeTimes", id="reconsume-beyond-int"),
]


@pytest.fixture
def broker(cluster):
    return cluster.start_broker_with_topic("errs")


def log_of(cluster, name: str) -> str:
    return (cluster.root / f"{name}.log").read_text()


@pytest.mark.parametrize(("code", "ext", "body", "expected", "named"), BROKER_CASES)
def test_bad_values_get_a_clear_code_and_one_log_line(cluster, broker, code, ext, body, expected, named):
    before = len(log_of(cluster, "broker-a").splitlines())
    with RawClient(broker.addrs["broker"]) as raw:
        resp = raw.call(code, ext, body)
        assert resp.code == expected, resp.remark
        assert named in (resp.remark or ""), resp.remark
        assert raw.call(RequestCode.SEND_MESSAGE, send_header(), b"ok").code == ResponseCode.SUCCESS
    text = log_of(cluster, "broker-a")
    assert "Traceback" not in text
    said = [line for line in text.splitlines()[before:] if " WARNING " in line or " ERROR " in line]
    assert len(said) <= 1, said


NESTED = orjson.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": {"a": [1]}}})


@pytest.mark.parametrize("body", [b"[1]", NESTED], ids=["array", "nested"])
def test_name_server_answers_bad_bodies_clearly(cluster, body):
    with RawClient(cluster.namesrv_addr) as raw:
        resp = raw.call(RequestCode.REGISTER_BROKER, {"clusterName": "c", "brokerAddr": "127.0.0.1:1",
                                                      "brokerName": "b", "brokerId": "0"}, body)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "bad request" in (resp.remark or ""), resp.remark
    assert "Traceback" not in log_of(cluster, "namesrv")


def test_grpc_born_timestamp_beyond_the_layout(cluster, broker):
    with grpc.insecure_channel(broker.addrs["grpc"]) as channel:
        stub = MessagingServiceStub(channel)
        msg = pb.Message(topic=pb.Resource(name="errs"), body=b"x", system_properties=pb.SystemProperties(
            message_id=uuid.uuid4().hex.upper(), body_encoding=pb.IDENTITY, born_timestamp={"seconds": 2**62}))
        r = stub.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=[("x-mq-client-id", "errs")], timeout=10)
        assert r.status.code == pb.Code.BAD_REQUEST and "born" in r.status.message, r.status
    assert "Traceback" not in log_of(cluster, "broker-a")
