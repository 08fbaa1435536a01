"""ACL 2.0 on a running ``txmq server`` (name server and broker, real processes): users and ACLs made with
``txmq admin`` take effect at once on the broker and the name server and survive a restart; plain_acl.yml's
accounts still work, an ``admin: true`` account listing no permissions may consume (issue 28 item 9); passwords
are never shown; and a server whose broker has no credentials its name server accepts refuses to start."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from txmq.acl.signer import SessionCredentials
from txmq.launch import free_port, txmq_command
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand

from .conftest import ADMIN, CONSUMER, PLAIN_ACL, VICTIM, AclServer, call, start_acl_server

BARE_ADMIN = SessionCredentials("bareAdmin01", "bareSecret01")  # admin: true, no permissions listed
NEW = SessionCredentials("newProducer1", "newSecret001")  # made by txmq admin createUser
PLAIN_ACL_WITH_BARE_ADMIN = PLAIN_ACL + f"""\
  - accessKey: {BARE_ADMIN.access_key}
    secretKey: {BARE_ADMIN.secret_key}
    admin: true
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclServer]:
    s = start_acl_server(tmp_path_factory.mktemp("acl-users"), plain_acl=PLAIN_ACL_WITH_BARE_ADMIN)
    try:
        yield s
    finally:
        s.proc.stop()


def txmq_admin(server: AclServer, *args: str, as_: SessionCredentials = ADMIN) -> tuple[int, str]:
    """``txmq -n <namesrv> admin <args>`` as its own process, signing as ``as_``: exit code and output."""
    env = dict(os.environ, HOME=str(server.root / "home"), TXMQ_ACCESS_KEY=as_.access_key,
               TXMQ_SECRET_KEY=as_.secret_key)
    done = subprocess.run(txmq_command("-n", server.namesrv, "admin", *args), env=env, capture_output=True,
                          text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def ok(server: AclServer, *args: str) -> str:
    code, out = txmq_admin(server, *args)
    assert code == 0, out
    return out


def send(server: AclServer, topic: str, as_: SessionCredentials) -> RemotingCommand:
    ext = {"producerGroup": "p", "topic": topic, "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0",
           "properties": ""}
    return call(server.broker, RequestCode.SEND_MESSAGE, ext, b"x", as_=as_)


def query_offset(server: AclServer, topic: str, group: str, as_: SessionCredentials) -> RemotingCommand:
    ext = {"consumerGroup": group, "topic": topic, "queueId": "0"}
    return call(server.broker, RequestCode.QUERY_CONSUMER_OFFSET, ext, as_=as_)


def pull(server: AclServer, topic: str, group: str, as_: SessionCredentials) -> RemotingCommand:
    ext = {"consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "1",
           "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}
    return call(server.broker, RequestCode.PULL_MESSAGE, ext, as_=as_)


def test_an_admin_account_listing_no_permissions_may_consume(server):
    """Issue 28 item 9: RocketMQ's admin is a Super user (its migration to ACL 2.0 says so); it was refused SUB."""
    for ask in (query_offset, pull):
        resp = ask(server, "orders", "any-group", BARE_ADMIN)
        assert resp.code not in (ResponseCode.NO_PERMISSION, ResponseCode.SYSTEM_ERROR), resp.remark
    assert send(server, "orders", BARE_ADMIN).code == ResponseCode.SUCCESS


def test_plain_acl_accounts_still_work(server):
    assert send(server, "orders", VICTIM).code == ResponseCode.SUCCESS
    assert query_offset(server, "orders", "billing", CONSUMER).code != ResponseCode.NO_PERMISSION
    resp = send(server, "orders", CONSUMER)
    assert resp.code == ResponseCode.NO_PERMISSION and "no Pub permission on Topic:orders" in (resp.remark or "")
    # shown as ACL 2.0 users and ACLs, read-only to the commands
    out = ok(server, "listAcl", "-b", server.broker, "-s", CONSUMER.access_key)
    assert re.search(rf"User:{CONSUMER.access_key}\s+Custom\s+Topic:orders\s+Sub\s+\*\s+Allow", out), out
    assert re.search(rf"{BARE_ADMIN.access_key}\s+\*+\s+Super\s+enable", ok(server, "listUser", "-f", "bare")), out
    code, out = txmq_admin(server, "deleteUser", "-u", CONSUMER.access_key)
    assert code == 1 and "is defined in plain_acl.yml" in out
    assert query_offset(server, "orders", "billing", CONSUMER).code != ResponseCode.NO_PERMISSION


@pytest.mark.slow
def test_users_and_acls_made_by_txmq_admin_take_effect_at_once_everywhere(server):
    subject = f"User:{NEW.access_key}"
    resp = call(server.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}, as_=NEW)
    assert resp.code == ResponseCode.NO_PERMISSION and "authentication failed" in (resp.remark or "")
    assert f"no account for AccessKey {NEW.access_key}" in server.log  # the log says which

    out = ok(server, "createUser", "-u", NEW.access_key, "-p", NEW.secret_key)
    assert f"create user to {server.broker} (broker broker-a) success." in out
    assert f"create user to {server.namesrv} (namesrv) success." in out
    resp = send(server, "orders", NEW)  # a user with no ACL may do nothing
    assert resp.code == ResponseCode.NO_PERMISSION and "no Pub permission on Topic:orders" in (resp.remark or "")

    ok(server, "createAcl", "-s", subject, "-r", "Topic:orders", "-a", "Pub", "-d", "Allow")
    assert send(server, "orders", NEW).code == ResponseCode.SUCCESS  # at once, no restart
    assert send(server, "other", NEW).code == ResponseCode.NO_PERMISSION
    for topic in ("orders", "other"):  # Pub alone: consuming is refused here and elsewhere
        assert query_offset(server, topic, "billing", NEW).code == ResponseCode.NO_PERMISSION
        assert pull(server, topic, "billing", NEW).code == ResponseCode.NO_PERMISSION

    ok(server, "createAcl", "-s", subject, "-r", "Cluster", "-a", "Get", "-d", "Allow")
    for addr in (server.broker, server.namesrv):  # the name server has the user and its ACL too
        assert call(addr, RequestCode.AUTH_LIST_USER, as_=NEW).code == ResponseCode.SUCCESS
    resp = call(server.broker, RequestCode.AUTH_CREATE_USER, {"username": "sneaky001"},
                orjson.dumps({"password": "sneakySecret1"}), as_=NEW)
    assert resp.code == ResponseCode.NO_PERMISSION and "no Update permission on Cluster" in (resp.remark or "")

    out = ok(server, "getUser", "-u", NEW.access_key)
    assert NEW.secret_key not in out and re.search(rf"{NEW.access_key}\s+\*{{6}}\s+Normal\s+enable", out), out
    out = ok(server, "getAcl", "-s", subject)
    assert re.search(rf"{subject}\s+Custom\s+Topic:orders\s+Pub\s+\*\s+Allow", out), out
    assert NEW.secret_key not in ok(server, "listUser")

    server.proc.stop()  # each server loads its users and ACLs at start
    server.proc.start()
    assert send(server, "orders", NEW).code == ResponseCode.SUCCESS
    assert call(server.namesrv, RequestCode.AUTH_LIST_USER, as_=NEW).code == ResponseCode.SUCCESS

    ok(server, "deleteAcl", "-s", subject, "-r", "Cluster")
    for addr in (server.broker, server.namesrv):
        resp = call(addr, RequestCode.AUTH_LIST_USER, as_=NEW)
        assert resp.code == ResponseCode.NO_PERMISSION and "no Get permission on Cluster" in (resp.remark or "")
    assert send(server, "orders", NEW).code == ResponseCode.SUCCESS  # its other entry stays
    ok(server, "deleteAcl", "-s", subject)
    assert send(server, "orders", NEW).code == ResponseCode.NO_PERMISSION
    ok(server, "deleteUser", "-u", NEW.access_key)
    for addr in (server.broker, server.namesrv):
        resp = call(addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}, as_=NEW)
        assert resp.code == ResponseCode.NO_PERMISSION and "authentication failed" in (resp.remark or "")
    assert NEW.secret_key not in server.log


def test_only_the_cluster_admin_runs_the_commands(server):
    code, out = txmq_admin(server, "createUser", "-u", "sneaky002", "-p", "sneakySecret2", as_=CONSUMER)
    refused = "failed: code 16: request code 3001: AccessKey billingKey01: no Update permission on Cluster"
    assert code == 1 and out.count(refused) == 2, out  # by the broker and the name server
    code, out = txmq_admin(server, "createAcl", "-s", "User:x", "-r", "Queue:q", "-a", "Pub", "-d", "Allow")
    assert code == 1 and "unknown resource 'Queue:q'" in out


# --- refusing to start --------------------------------------------------------------------------------------


def _start_server(root: Path, conf: str) -> subprocess.CompletedProcess[str]:
    root.mkdir(parents=True, exist_ok=True)
    (root / "plain_acl.yml").write_text(PLAIN_ACL)
    (root / "broker.conf").write_text(f"aclEnable=true\naclFile={root / 'plain_acl.yml'}\n{conf}")
    env = dict(os.environ, HOME=str(root), PYTHONUNBUFFERED="1")
    args = txmq_command("server", "--store", str(root / "store"), "--port", "0", "--namesrv-port", str(free_port()),
                        "--grpc-port", "-1", "--console-port", "-1", "-c", str(root / "broker.conf"))
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)


def test_a_server_whose_broker_has_no_credentials_refuses_to_start(tmp_path):
    done = _start_server(tmp_path, "")
    assert done.returncode != 0 and "txmq ready" not in done.stdout
    assert "aclEnable=true needs accessKey and secretKey in broker.conf" in done.stderr, done.stderr


def test_a_server_whose_name_server_refuses_the_brokers_credentials_refuses_to_start(tmp_path):
    """A Normal user (no Update on the cluster) cannot register a broker: the broker served unrouted before."""
    done = _start_server(tmp_path, f"accessKey={CONSUMER.access_key}\nsecretKey={CONSUMER.secret_key}\n")
    assert done.returncode != 0 and "txmq ready" not in done.stdout
    assert re.search(r"namesrv \S+ refused the registration \(request code 103: AccessKey billingKey01: no Update "
                     r"permission on Cluster\): set accessKey/secretKey in broker.conf", done.stderr), done.stderr
