"""Clients against an ACL-enabled broker and name server: txmq's own client and CLI, the RocketMQ C++ client
(``rocketmq==0.4.4``, ``set_session_credentials``) as judge, and raw requests for each refusal."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.e2e.cpp.harness import cpp_client_available, produce, run_consume, run_produce
from txmq.acl.validator import AUTHENTICATION_FAILED
from txmq.client.consumer import ConsumeFromWhere, ConsumeStatus, PushConsumer
from txmq.client.producer import Producer
from txmq.errors import TxmqError
from txmq.launch import txmq_command
from txmq.message import Message
from txmq.remoting.codes import RequestCode, ResponseCode

from .conftest import ATTACKER, CONSUMER, VICTIM, AclServer, call

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # real servers and other languages' clients

SEND_EXT = {"producerGroup": "order-service", "topic": "orders", "queueId": "0", "sysFlag": "0",
            "bornTimestamp": "0", "flag": "0", "properties": "", "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4"}


def _consume(namesrv: str, group: str, topic: str, n: int, creds, timeout: float = 15.0) -> list[bytes]:
    got: list[bytes] = []
    consumer = PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.set_session_credentials(creds.access_key, creds.secret_key)
    consumer.subscribe(topic, "*")
    consumer.register_listener(lambda msgs: got.extend(m.body for m in msgs) or ConsumeStatus.SUCCESS)
    consumer.start()
    try:
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        consumer.shutdown()
    return got


def test_txmq_client_with_its_account_sends_and_consumes(acl_server: AclServer):
    with Producer("order-service", acl_server.namesrv).set_session_credentials(
            VICTIM.access_key, VICTIM.secret_key) as producer:
        for i in range(3):
            producer.send(Message("orders", f"py-{i}".encode()))
    got = _consume(acl_server.namesrv, "billing", "orders", 3, CONSUMER)
    assert {b"py-0", b"py-1", b"py-2"} <= set(got)


@pytest.mark.parametrize(("creds", "why", "told"), [
    (None, "no AccessKey", "no AccessKey"),
    # the peer is told the same for an unknown user and a wrong secret; the log says which
    (VICTIM.__class__(VICTIM.access_key, "wrongSecret1"), "signature check failed", AUTHENTICATION_FAILED),
    (VICTIM.__class__("unknownKey1", "whatever1"), "no account for AccessKey unknownKey1", AUTHENTICATION_FAILED),
    (CONSUMER, "no Pub permission on Topic:orders", "no Pub permission on Topic:orders"),
])
def test_send_refused_with_no_permission_and_one_log_line(acl_server: AclServer, creds, why, told):
    resp = call(acl_server.broker, RequestCode.SEND_MESSAGE, SEND_EXT, b"x", as_=creds)
    assert resp.code == ResponseCode.NO_PERMISSION and told in (resp.remark or "")
    assert why in acl_server.log


def test_txmq_producer_refused_raises_and_admin_needs_admin(acl_server: AclServer):
    with Producer("order-service", acl_server.namesrv, retry_times=0).set_session_credentials(
            ATTACKER.access_key, "wrongSecret1") as producer, pytest.raises(TxmqError, match="code 16"):
        producer.send(Message("orders", b"nope"))
    # offsets, topic permissions and deletion: admin or the group's own only
    reset = {"consumerGroup": "billing", "topic": "orders", "queueId": "0", "commitOffset": "0"}
    assert call(acl_server.broker, RequestCode.UPDATE_CONSUMER_OFFSET, reset, as_=ATTACKER).code == \
        ResponseCode.NO_PERMISSION
    wipe = {"topic": "orders", "readQueueNums": "2", "writeQueueNums": "2", "perm": "0"}
    assert call(acl_server.broker, RequestCode.UPDATE_AND_CREATE_TOPIC, wipe, as_=ATTACKER).code == \
        ResponseCode.NO_PERMISSION
    assert call(acl_server.broker, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "orders"}, as_=VICTIM).code == \
        ResponseCode.NO_PERMISSION
    assert call(acl_server.broker, RequestCode.UPDATE_CONSUMER_OFFSET, reset, as_=CONSUMER).code == \
        ResponseCode.SUCCESS


def test_cli_carries_credentials_from_flags_and_environment(acl_server: AclServer):
    base = txmq_command("send", "--topic", "orders", "--group", "order-service", "--body", "cli", "-n",
                        acl_server.namesrv)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXMQ_")}
    ok = subprocess.run([*base, "--access-key", VICTIM.access_key, "--secret-key", VICTIM.secret_key],
                        capture_output=True, text=True, timeout=60, env=env)
    assert ok.returncode == 0 and ok.stdout.startswith("SEND_OK"), ok.stderr
    env_ok = subprocess.run(base, capture_output=True, text=True, timeout=60,
                            env={**env, "TXMQ_ACCESS_KEY": VICTIM.access_key, "TXMQ_SECRET_KEY": VICTIM.secret_key})
    assert env_ok.returncode == 0, env_ok.stderr
    refused = subprocess.run(base, capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode != 0 and "no AccessKey" in refused.stderr


needs_cpp = pytest.mark.skipif(not cpp_client_available(), reason="the rocketmq C++ client is not importable")


def _cpp_creds(creds) -> list[str]:
    return ["--access-key", creds.access_key, "--secret-key", creds.secret_key] if creds else []


@needs_cpp
def test_cpp_client_sends_and_consumes_with_its_account(acl_server: AclServer, tmp_path):
    sent = run_produce(acl_server.namesrv, "cpp-orders", 3, "sync", body_prefix="cpp-", home=tmp_path, timeout=60,
                       extra=_cpp_creds(VICTIM))
    assert len(sent) == 3 and all(s["status"] == "OK" for s in sent)
    result = run_consume(acl_server.namesrv, "cpp-orders", "billing", 3, expression="*", timeout=30, home=tmp_path,
                         extra=_cpp_creds(CONSUMER))
    assert not result.timed_out, result.stderr[-2000:]
    assert {"cpp-0", "cpp-1", "cpp-2"} <= set(result.bodies())


@needs_cpp
@pytest.mark.parametrize(("creds", "why"), [
    # the name server already refuses the route lookup (105) of a client without a valid account
    (None, "namesrv refused a request from 127.0.0.1: request code 105: no AccessKey"),
    (VICTIM.__class__(VICTIM.access_key, "wrongSecret1"), "request code 105: signature check failed"),
    (VICTIM.__class__("unknownKey1", "whatever1"), "request code 105: no account for AccessKey unknownKey1"),
    (CONSUMER, "request code 10: AccessKey billingKey01: no Pub permission on Topic:orders"),
])
def test_cpp_client_refused(acl_server: AclServer, tmp_path, creds, why):
    r = produce(acl_server.namesrv, "orders", 1, "sync", home=tmp_path, timeout=60, extra=_cpp_creds(creds),
                send_timeout_ms=1000)
    assert r.summary is not None and r.summary["sent"] == 0 and r.summary["errors"] == 1
    assert why in acl_server.log


@needs_cpp
def test_cpp_consumer_without_permission_gets_nothing(acl_server: AclServer, tmp_path):
    run_produce(acl_server.namesrv, "orders", 1, "sync", body_prefix="secret-", home=tmp_path, timeout=60,
                extra=_cpp_creds(VICTIM))
    result = run_consume(acl_server.namesrv, "orders", "billing", 1, timeout=6, home=tmp_path,
                         extra=_cpp_creds(ATTACKER))
    assert result.timed_out and not result.messages
    assert "AccessKey attackKey01: no Sub permission on Group:billing" in acl_server.log
