"""RECALL_MESSAGE under ACL: Pub on the topic, as RocketMQ 5.3 declares it; a consumer of the topic, or an account
of another team holding someone's recall handle, cannot cancel the message, and the message is still delivered."""

from __future__ import annotations

import time

from txmq.client.producer import Producer
from txmq.message import Message
from txmq.remoting.codes import RequestCode, ResponseCode

from .conftest import CONSUMER, NOBODY, VICTIM, AclServer, call


def test_recall_needs_pub_on_the_topic(acl_server: AclServer):
    with Producer("order-service", acl_server.namesrv).set_session_credentials(
            VICTIM.access_key, VICTIM.secret_key) as producer:
        msg = Message("orders", b"scheduled")
        msg.deliver_after(60)
        handle = producer.send(msg).recall_handle
        assert handle
        ext = {"topic": "orders", "recallHandle": handle, "producerGroup": "order-service"}
        for creds in (CONSUMER, NOBODY, None):
            refused = call(acl_server.broker, RequestCode.RECALL_MESSAGE, ext, as_=creds)
            assert refused.code != ResponseCode.SUCCESS, creds
            assert refused.code in (ResponseCode.NO_PERMISSION, ResponseCode.SYSTEM_ERROR), refused.remark
        # the handle names "orders": asking under a topic one may publish to is refused as not matching
        other = call(acl_server.broker, RequestCode.RECALL_MESSAGE, {**ext, "topic": "other"}, as_=VICTIM)
        assert other.code != ResponseCode.SUCCESS
        time.sleep(0.2)
        assert producer.recall("orders", handle)  # still scheduled: its owner recalls it
