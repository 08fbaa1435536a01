"""A half message is never visible, by any request that can name a stored record: by topic (pull, gRPC receive
and pull), by commit-log offset (send-back, view by id, end transaction), by key (query), by receipt handle
(gRPC), by txmq's own admin requests. Also the records that hold what a half holds or must not be served yet:
discarded halves (``TRANS_CHECK_MAX_TIME_TOPIC``), delayed messages not yet due, records whose sys flag says
prepared (a send whose sys flag says committed or rolled back is refused: tests/acl/test_acl_attacks.py).
Everything over real TCP against one broker process."""

from __future__ import annotations

import time
import uuid
from typing import Any

import grpc
import pytest

from tests.e2e.helpers import RawClient, heartbeat, wait_until
from txmq import Admin, LocalTransactionState, Message, SendStatus, TransactionProducer
from txmq.broker.core.pop import ReceiptHandle
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol.service_pb2_grpc import MessagingServiceStub
from txmq.launch import free_port
from txmq.message import MessageConst, MessageSysFlag, decode_messages, decode_offset_msg_id, properties_to_string
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand

TOPIC = "vis"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
SECRET = b"uncommitted-secret"


def send(raw: RawClient, body: bytes, props: dict[str, str], sys_flag: int = 0) -> int:
    """A raw SEND_MESSAGE; the commit-log offset of the stored record. Its answer carries RocketMQ's send response
    header, and a half's its transaction id (its ``UNIQ_KEY``), exactly."""
    uniq = uuid.uuid4().hex
    header = {"producerGroup": "p_vis", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": "1",
              "queueId": "0", "sysFlag": str(sys_flag), "bornTimestamp": "0", "flag": "0",
              "properties": properties_to_string({MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq, **props}),
              "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
    resp = raw.call(RequestCode.SEND_MESSAGE, header, body)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    ext = resp.ext_fields
    half = props.get(MessageConst.TRANSACTION_PREPARED) == "true"
    assert list(ext) == ["msgId", "queueId", "queueOffset", *(["transactionId"] if half else []), "MSG_REGION",
                         "TRACE_ON"]
    assert int(ext["queueId"]) >= 0 and int(ext["queueOffset"]) >= 0 and ext.get("transactionId", uniq) == uniq
    assert (ext["MSG_REGION"], ext["TRACE_ON"]) == ("DefaultRegion", "true")
    return decode_offset_msg_id(ext["msgId"])[1]


def pull(raw: RawClient, topic: str, group: str = "g_vis_pull") -> RemotingCommand:
    return raw.call(RequestCode.PULL_MESSAGE, {"consumerGroup": group, "topic": topic, "queueId": "0",
                                               "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "0"})


def send_back(raw: RawClient, offset: int, group: str) -> RemotingCommand:
    return raw.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": str(offset), "group": group, "delayLevel": "1",
                                                         "originMsgId": "", "originTopic": TOPIC})


class NeverDecides:
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN


@pytest.fixture
def broker(cluster):
    b = cluster.start_broker(conf={"transactionTimeOut": 1000, "transactionCheckInterval": 500,
                                   "transactionCheckMax": 2, "grpcPort": free_port(), "messageDelayLevel": "1s 2h"})
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(TOPIC, queue_nums=1)
    cluster.wait_route(TOPIC)
    return b


def test_no_request_serves_a_half_or_a_record_not_yet_visible(cluster, broker):
    addr = broker.addrs["broker"]
    with RawClient(addr) as raw:
        half_key, prepared_key = uuid.uuid4().hex, uuid.uuid4().hex
        hidden = {
            "half": send(raw, SECRET, {MessageConst.TRANSACTION_PREPARED: "true", MessageConst.PRODUCER_GROUP: "p_vis",
                                       MessageConst.KEYS: half_key}),
            "delayed, not yet due": send(raw, SECRET, {MessageConst.DELAY_TIME_LEVEL: "2"}),
            "prepared sys flag": send(raw, SECRET, {MessageConst.KEYS: prepared_key},
                                      MessageSysFlag.TRANSACTION_PREPARED_TYPE),
        }
        visible = send(raw, b"visible", {})
        heartbeat(raw, "g_vis", TOPIC)

        for what, offset in hidden.items():
            # CONSUMER_SEND_MSG_BACK (36), by a group that consumes the topic and by one that does not
            for group in ("g_vis", "g_any"):
                resp = send_back(raw, offset, group)
                assert resp.code == ResponseCode.NO_PERMISSION, (what, group, resp.code, resp.remark)
            # VIEW_MESSAGE_BY_ID (33)
            resp = raw.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})
            assert resp.code == ResponseCode.NO_PERMISSION and SECRET not in resp.body, what
        # QUERY_MESSAGE (12) by the keys of the half and of the prepared record, in the real and the half topic
        for topic, key in ((TOPIC, half_key), (TOPIC, prepared_key), (HALF_TOPIC, half_key)):
            resp = raw.call(RequestCode.QUERY_MESSAGE, {"topic": topic, "key": key, "maxNum": "32",
                                                        "beginTimestamp": "0", "endTimestamp": str(2**62)})
            assert resp.code != ResponseCode.SUCCESS and SECRET not in resp.body, (topic, key, resp.remark)
        # END_TRANSACTION (37) naming a record that is not the half of that transaction
        for offset in (hidden["delayed, not yet due"], hidden["prepared sys flag"], visible):
            raw.call(RequestCode.END_TRANSACTION, {"producerGroup": "p_vis", "tranStateTableOffset": "0",
                                                   "commitLogOffset": str(offset), "commitOrRollback": "8"})
        # txmq's own: tx list names the half's topic and keys, never its body (tx show is the operator's view of
        # one transaction, body included; with ACL on, only for admin accounts and the group's own: tests/acl)
        resp = raw.call(RequestCode.TXMQ_TX_LIST, {})
        assert resp.code == ResponseCode.SUCCESS and b"p_vis" in resp.body and SECRET not in resp.body

        # The send-back of a real message of the group's topic still works.
        assert send_back(raw, visible, "g_vis").code == ResponseCode.SUCCESS
        time.sleep(2.0)  # past delay level 1 (1 s): a retry copy would be in %RETRY%g_any by now
        for group in ("g_vis", "g_any"):
            resp = pull(raw, f"%RETRY%{group}")
            got = decode_messages(resp.body) if resp.code == ResponseCode.SUCCESS else []
            assert [m.body for m in got] == ([b"visible"] if group == "g_vis" else []), group
        resp = pull(raw, TOPIC)
        assert [m.body for m in decode_messages(resp.body)] == [b"visible"]


def test_discarded_halves_are_served_to_nobody(cluster, broker):
    """A discarded half is copied to TRANS_CHECK_MAX_TIME_TOPIC with its body: no pull, query or gRPC read
    serves it, and a forged receipt handle serves only what it was handed out for."""
    with TransactionProducer("p_vis_discard", NeverDecides(), cluster.namesrv_addr) as producer:
        r = producer.send_message_in_transaction(Message(TOPIC, SECRET, keys="discard-me"))
        assert r.status == SendStatus.SEND_OK
        with Admin(cluster.namesrv_addr) as admin:
            assert wait_until(lambda: admin.tx_list()["broker-a"]["totals"][0]["discarded"] == 1, timeout=20)
    with RawClient(broker.addrs["broker"]) as raw:
        resp = pull(raw, CHECK_MAX_TOPIC)
        assert resp.code == ResponseCode.NO_PERMISSION and SECRET not in resp.body, resp.code
        for key in ("discard-me", r.transaction_id):
            resp = raw.call(RequestCode.QUERY_MESSAGE, {"topic": CHECK_MAX_TOPIC, "key": key, "maxNum": "32",
                                                        "beginTimestamp": "0", "endTimestamp": str(2**62)})
            assert resp.code == ResponseCode.NO_PERMISSION and SECRET not in resp.body
        visible_offset = send(raw, b"visible", {})

    with grpc.insecure_channel(broker.addrs["grpc"]) as channel:
        stub, md = MessagingServiceStub(channel), [("x-mq-client-id", "vis-grpc")]
        for topic in (CHECK_MAX_TOPIC, HALF_TOPIC):
            got = list(stub.ReceiveMessage(spb.ReceiveMessageRequest(
                group=pb.Resource(name="gg"), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=32,
                invisible_duration={"seconds": 30}, long_polling_timeout={"seconds": 0}), metadata=md, timeout=10))
            assert got[0].status.code == pb.Code.FORBIDDEN and not [x for x in got if x.HasField("message")], topic
            got = list(stub.PullMessage(spb.PullMessageRequest(
                group=pb.Resource(name="gg"), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
                offset=0, batch_size=32, filter_expression=pb.FilterExpression(type=pb.TAG, expression="*")),
                metadata=md, timeout=10))
            assert got[0].status.code == pb.Code.FORBIDDEN and not [x for x in got if x.HasField("message")], topic
        # A receipt handle whose commit-log offset is changed to a half's names the message it was handed out for.
        got = list(stub.ReceiveMessage(spb.ReceiveMessageRequest(
            group=pb.Resource(name="gg"), message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=32,
            invisible_duration={"seconds": 30}, long_polling_timeout={"seconds": 1}), metadata=md, timeout=10))
        msg = next(x.message for x in got if x.HasField("message") and x.message.body == b"visible")
        handle = ReceiptHandle.decode(msg.system_properties.receipt_handle)
        assert handle.commit_log_offset == visible_offset
        forged = ReceiptHandle(handle.topic, handle.queue_id, handle.queue_offset, 0, handle.token).encode()
        changed = stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="gg"), topic=pb.Resource(name=TOPIC), receipt_handle=forged,
            invisible_duration={"seconds": 30}), metadata=md, timeout=10)
        assert changed.status.code == pb.Code.OK
        assert ReceiptHandle.decode(changed.receipt_handle).commit_log_offset == visible_offset
