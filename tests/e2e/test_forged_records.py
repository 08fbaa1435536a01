"""A whole commit-log record that a producer carries in the body of a plain message (``carry_forged_record``: magic,
PHYSICALOFFSET, CRC trailer, topic and properties of its choosing) is in the log but in no consume queue: no request
that names a commit-log offset takes it for a message. END_TRANSACTION's case is in test_transactions.py. Real
broker process, real sockets."""

from __future__ import annotations

import pytest

from tests.e2e.helpers import RawClient, carry_forged_record
from tests.e2e.test_transactions import create_topic, scan_topic
from txmq import BrokerError, Message, Producer
from txmq.admin.client import MQAdminExt
from txmq.message import MessageConst, MessageExt, decode_offset_msg_id
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.topic import dlq_topic, retry_topic

CARRIER = "forge_carrier"
FORGER = "g_forger"


@pytest.fixture
def broker(cluster):
    b = cluster.start_broker()
    create_topic(cluster, CARRIER, 1)
    return b


def test_a_record_forged_in_a_body_is_sent_back_by_nobody(cluster, broker):
    """CONSUMER_SEND_MSG_BACK copies the record at its offset into the group's retry or dead-letter topic: a forged
    one carried a property only the broker sets (the account ``TXMQ_HALF_ACCOUNT`` names as the producer) into the
    group's dead letters, which no send may carry there."""
    create_topic(cluster, dlq_topic(FORGER), 1)
    fake = MessageExt(retry_topic(FORGER), b"forged", {MessageConst.HALF_ACCOUNT: "admin", "UNIQ_KEY": "F" * 32})
    with Producer("p_forger", cluster.namesrv_addr) as forger:
        with pytest.raises(BrokerError, match="set by the broker only"):
            forger.send(Message(retry_topic(FORGER), b"direct", properties={MessageConst.HALF_ACCOUNT: "admin"}))
        at = decode_offset_msg_id(carry_forged_record(forger, CARRIER, fake))[1]
    with RawClient(broker.addrs["broker"]) as raw:
        resp = raw.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": str(at), "group": FORGER, "delayLevel": "-1",
                                                             "originMsgId": "", "originTopic": CARRIER})
    dead = scan_topic(cluster.namesrv_addr, dlq_topic(FORGER))
    assert [(m.body, m.properties.get(MessageConst.HALF_ACCOUNT)) for m in dead] == []
    assert resp.code == ResponseCode.SYSTEM_ERROR and "not its consume queue's entry" in resp.remark, resp.remark


def test_a_dead_letter_forged_in_a_body_is_shown_by_no_message_id(cluster, broker):
    """VIEW_MESSAGE_BY_ID (``queryMsgById``, the console's message page and its "Resend to" of a dead letter): a
    forged record was shown as a dead letter of another group whose origin (``RETRY_TOPIC``) the forger chose, and
    the console offered to send its body there."""
    fake = MessageExt(dlq_topic("g_victim"), b"forged", {MessageConst.RETRY_TOPIC: "forge_victim",
                                                         "UNIQ_KEY": "F" * 32})
    with Producer("p_forger", cluster.namesrv_addr) as forger:
        forged_id = carry_forged_record(forger, CARRIER, fake)
        real_id = forger.send(Message(CARRIER, b"real")).offset_msg_id
    with MQAdminExt(cluster.namesrv_addr) as admin:
        assert admin.view_message(real_id).body == b"real"
        with pytest.raises(BrokerError, match="not its consume queue's entry"):
            admin.view_message(forged_id)
