"""plain_acl.yml parsing, permissions, address patterns, signatures and reload: no processes."""

from __future__ import annotations

import logging
import os
import time
from types import SimpleNamespace
from typing import Any

import pytest

from txmq.acl.config import DENY, PUB, SUB, AclConfigError, AclFile, RemoteAddressMatcher, parse_plain_acl
from txmq.acl.model import Action, Needs
from txmq.acl.signer import (
    AclClientRPCHook,
    SessionCredentials,
    grpc_authorization,
    hmac_key,
    parse_grpc_authorization,
    request_content,
    signature_matches,
)
from txmq.acl.store import AuthStore
from txmq.acl.validator import AccessValidator
from txmq.refusals import LINES_PER_HOST, RefusalLog
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand

from .conftest import PLAIN_ACL


def test_accounts_are_parsed_as_rocketmq_reads_them():
    config = parse_plain_acl(PLAIN_ACL)
    victim = config.accounts["orderKey01"]
    assert victim.topic_perms == {"orders": PUB | SUB, "cpp-orders": PUB | SUB}
    assert victim.group_perms["order-service"] == PUB and victim.default_topic_perm is None  # absent: no default
    assert config.accounts["adminKey01"].admin and not victim.admin
    assert parse_plain_acl("accounts:\n  - accessKey: longenough\n    secretKey: longenough\n    topicPerms: [t=]\n"
                           ).accounts["longenough"].topic_perms == {"t": DENY}  # blank is DENY, as RocketMQ
    with pytest.raises(AclConfigError):
        parse_plain_acl("accounts:\n  - accessKey: short\n    secretKey: s\n")
    with pytest.raises(AclConfigError):
        parse_plain_acl("accounts:\n  - accessKey: longenough\n    secretKey: longenough\n    topicPerms: [t=ALL]\n")


@pytest.mark.parametrize(("pattern", "yes", "no"), [
    ("*", "10.1.2.3", None),
    ("192.168.0.{1,2}", "192.168.0.2", "192.168.0.3"),
    ("192.168.*.*", "192.168.7.9", "192.169.0.1"),
    ("10.0.1-20.*", "10.0.20.4", "10.0.21.4"),
    ("127.0.0.1", "127.0.0.1", "127.0.0.2"),
    ("10.0.0.0/8", "10.9.9.9", "11.0.0.1"),
])
def test_remote_address_patterns(pattern, yes, no):
    m = RemoteAddressMatcher(pattern)
    assert m.match(yes)
    assert no is None or not m.match(no)


def test_signature_is_rocketmqs_and_covers_every_field_and_the_body():
    creds = SessionCredentials("orderKey01", "orderSecret01")
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "orders", "queueId": "1"}, b"body")
    AclClientRPCHook(creds)(cmd)
    # RocketMQ: values sorted by key (AccessKey, queueId, topic), concatenated, then the body
    assert request_content(cmd.ext_fields, cmd.body) == b"orderKey011ordersbody"
    assert signature_matches(hmac_key("orderSecret01"), cmd)
    for tamper in ({"topic": "other"}, {"queueId": "2"}, {"AccessKey": "attackKey01"}):
        bad = RemotingCommand.request(cmd.code, {**cmd.ext_fields, **tamper}, cmd.body)
        assert not signature_matches(hmac_key("orderSecret01"), bad)
    assert not signature_matches(hmac_key("orderSecret01"), RemotingCommand.request(cmd.code, cmd.ext_fields, b"other"))
    assert not signature_matches(hmac_key("wrongSecret1"), cmd)


def test_field_orders_remembered_for_signatures_are_bounded():
    """The signed names' order is remembered per list of names a client sends: made-up names, many or long, are
    checked like any others and never grow the memory past MAX_ORDERS short lists."""
    import txmq.acl.signer as signer

    hook, key = AclClientRPCHook(SessionCredentials("orderKey01", "orderSecret01")), hmac_key("orderSecret01")
    for i in range(signer.MAX_ORDERS + 10):
        cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, {f"field{i}": "v", "topic": "orders"}, b"body")
        hook(cmd)
        assert signature_matches(key, cmd)
        assert tuple(cmd.ext_fields) in signer._ORDERS  # remembered (the table emptied when it was full)
        assert len(signer._ORDERS) <= signer.MAX_ORDERS
    long_names = {f"{i:04d}" + "n" * 60: "v" for i in range(40)}  # 2,560 characters of names
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, long_names, b"body")
    hook(cmd)
    assert signature_matches(key, cmd) and tuple(cmd.ext_fields) not in signer._ORDERS
    bad = RemotingCommand.request(cmd.code, {**cmd.ext_fields, "0001" + "n" * 60: "w"}, cmd.body)
    assert not signature_matches(key, bad)


def test_grpc_authorization_round_trip():
    value = grpc_authorization(SessionCredentials("orderKey01", "orderSecret01"), "20260101T000000Z")
    assert value.startswith("MQv2-HMAC-SHA1 Credential=orderKey01, SignedHeaders=x-mq-date-time, Signature=")
    assert parse_grpc_authorization(value)[0] == "orderKey01"
    assert parse_grpc_authorization("Basic abc") is None


def test_file_is_reloaded_when_it_changes_and_a_broken_one_is_ignored(tmp_path, caplog):
    path = tmp_path / "plain_acl.yml"
    path.write_text(PLAIN_ACL)
    acl = AclFile(path, check_interval_s=0)
    assert "attackKey01" in acl.current(time.monotonic()).accounts
    path.write_text(PLAIN_ACL.replace("attackKey01", "attackKey02"))
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert "attackKey02" in acl.current(time.monotonic()).accounts
    path.write_text("accounts: [")
    os.utime(path, ns=(time.time_ns() + 2 * 10**9, time.time_ns() + 2 * 10**9))
    assert "attackKey02" in acl.current(time.monotonic()).accounts
    path.unlink()  # gone: the accounts stay, and the error is logged once, not at every check
    caplog.clear()
    with caplog.at_level("ERROR", logger="txmq.acl"):
        for _ in range(3):
            assert "attackKey02" in acl.current(time.monotonic()).accounts
    assert len(caplog.records) == 1


def test_refusal_log_folds_repeats_and_floods(caplog):
    refusals = RefusalLog(logging.getLogger("txmq.acl"), "broker refused a request")
    with caplog.at_level("WARNING", logger="txmq.acl"):
        for _ in range(100):
            refusals.refused("10.0.0.1", "no AccessKey")
        for i in range(100):  # random access keys: distinct reasons
            refusals.refused("10.0.0.2", f"no account for AccessKey k{i}")
    lines = [r.getMessage() for r in caplog.records]
    assert sum("10.0.0.1" in line for line in lines) == 1
    assert sum("10.0.0.2" in line for line in lines) == LINES_PER_HOST


def test_white_addresses(tmp_path):
    """A global white address needs no account; an account's white address skips only its signature check."""
    path = tmp_path / "plain_acl.yml"
    path.write_text("globalWhiteRemoteAddresses: [10.9.*.*]\naccounts:\n  - accessKey: lanKey01\n"
                    "    secretKey: lanSecret01\n    whiteRemoteAddress: 192.168.1.{5,6}\n    topicPerms: [t1=PUB]\n")
    validator = AccessValidator(AuthStore(AclFile(path)), "broker")

    def send(host: str, topic: str, access_key: str | None) -> int | None:
        conn: Any = SimpleNamespace(remote_address=f"{host}:4000", attrs={})
        ext = {"topic": topic, "producerGroup": "g", **({"AccessKey": access_key} if access_key else {})}
        cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, b"x")
        identity = validator.admit(conn, cmd)
        if isinstance(identity, RemotingCommand):
            return identity.code
        refusal = validator.permit(conn, cmd, identity, Needs().topic(topic, Action.PUB))
        return None if refusal is None else refusal.code

    assert send("10.9.1.2", "t2", None) is None  # globally white: anything
    assert send("192.168.1.5", "t1", "lanKey01") is None  # unsigned, from the account's white address
    assert send("192.168.1.5", "t2", "lanKey01") == ResponseCode.NO_PERMISSION  # permissions still apply
    assert send("192.168.1.7", "t1", "lanKey01") == ResponseCode.NO_PERMISSION  # elsewhere: must sign
    assert send("192.168.1.5", "t1", None) == ResponseCode.NO_PERMISSION
