"""ACL 2.0 users and ACLs without processes: plain_acl.yml mapped as RocketMQ's AuthMigrator maps it, the indexed
decision against the model's rule, the store (changes, persistence, a broken file refusing the start), the
admin request handlers (masked passwords, Super-only changes) and where the admin commands go."""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txmq.acl.config import AclFile, parse_plain_acl
from txmq.acl.info import MASKED_PASSWORD
from txmq.acl.migration import migrate
from txmq.acl.model import (
    Acl,
    Action,
    Decision,
    Needs,
    PolicyEntry,
    PolicyIndex,
    PolicyType,
    Resource,
    SourceIps,
    User,
    UserStatus,
    UserType,
    decide,
)
from txmq.acl.processor import AuthProcessor
from txmq.acl.signer import hmac_key
from txmq.acl.store import WHITE_USER, AuthError, AuthForbidden, AuthStore, AuthStoreError
from txmq.admin.client import MQAdminExt
from txmq.errors import ClientError
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import RequestDispatcher, RequestTable

from .conftest import PLAIN_ACL

PUB, SUB = Action.PUB, Action.SUB
ORDERS = Resource.topic("orders")


def allow(key: str, *actions: Action, decision: Decision = Decision.ALLOW) -> PolicyEntry:
    return PolicyEntry(Resource.parse(key), frozenset(actions), decision)


def store_at(tmp_path: Path, plain_acl: str = PLAIN_ACL) -> AuthStore:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "plain_acl.yml").write_text(plain_acl)
    return AuthStore(AclFile(tmp_path / "plain_acl.yml", check_interval_s=0), tmp_path / "store" / "auth.json")


def signed(_user: Any) -> bool:
    return True


# --- plain_acl.yml as users and ACLs (RocketMQ's AuthMigrator) -------------------------------------------------


def test_plain_acl_accounts_map_to_users_and_acls_as_rocketmqs_migrator():
    users, acls = migrate(parse_plain_acl(PLAIN_ACL + """\
  - accessKey: denyKey001
    secretKey: denySecret01
    defaultTopicPerm: SUB
    topicPerms: [secret=DENY, both=SUB|PUB]
"""))
    assert users["adminKey01"].user_type is UserType.SUPER and users["orderKey01"].user_type is UserType.NORMAL
    assert all(u.from_file for u in users.values())
    assert users["orderKey01"].key.digest() == hmac_key("orderSecret01").digest()  # keyed once
    deny = acls["denyKey001"].policies
    assert deny[PolicyType.CUSTOM] == (PolicyEntry(Resource.topic("secret"), frozenset({Action.ALL}), Decision.DENY),
                                       PolicyEntry(Resource.topic("both"), frozenset({PUB, SUB})))
    assert deny[PolicyType.DEFAULT] == (PolicyEntry(Resource.parse("Topic:*"), frozenset({SUB})),)
    assert PolicyType.DEFAULT not in acls["orderKey01"].policies  # no default given: no Default entry
    # Custom entries first, Default only when none applies; a literal name is literal, never a prefix
    acl = acls["denyKey001"]
    assert not acl.allows(Resource.topic("secret"), frozenset({SUB}), "h")
    assert acl.allows(Resource.topic("other"), frozenset({SUB}), "h")
    assert not acl.allows(Resource.topic("other"), frozenset({PUB}), "h")
    assert acl.allows(Resource.topic("both"), frozenset({PUB}), "h")
    star = migrate(parse_plain_acl("accounts:\n  - accessKey: starKey01\n    secretKey: starSecret1\n"
                                   "    topicPerms: [ord*=PUB]\n"))[1]["starKey01"]
    assert star.allows(Resource.topic("ord*"), frozenset({PUB}), "h")
    assert not star.allows(Resource.topic("orders"), frozenset({PUB}), "h")


def test_custom_entries_are_consulted_before_default_ones():
    """RocketMQ: a Default ``Topic:*`` Allow does not outrank a Custom Deny, nor a Default Deny a Custom Allow of
    a less specific resource."""
    acl = Acl("u", {PolicyType.CUSTOM: (allow("Topic:ord*", PUB),),
                    PolicyType.DEFAULT: (allow("Topic:orders", PUB, decision=Decision.DENY),)})
    assert acl.allows(ORDERS, frozenset({PUB}), "h")  # decide() over both would let the literal Deny win
    assert not decide(acl.policies[PolicyType.CUSTOM] + acl.policies[PolicyType.DEFAULT], ORDERS, frozenset({PUB}), "h")


_resources = st.sampled_from(["Topic:orders", "Topic:ord*", "Topic:o*", "Topic:*", "Topic:other", "Group:orders",
                              "Group:*", "Cluster", "*"])
_entries = st.builds(lambda key, actions, deny, ips: PolicyEntry(Resource.parse(key), frozenset(actions),
                                                                 Decision.DENY if deny else Decision.ALLOW,
                                                                 SourceIps(ips)),
                     _resources, st.sets(st.sampled_from(list(Action)), max_size=3), st.booleans(),
                     st.sampled_from([(), ("10.0.0.0/8",), ("192.168.1.7",)]))


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(entries=st.lists(_entries, max_size=8),
       wanted=st.sampled_from([ORDERS, Resource.topic("ordinal"), Resource.topic("x"), Resource.group("orders"),
                               Resource.cluster()]),
       any_of=st.sets(st.sampled_from([PUB, SUB, Action.GET, Action.UPDATE]), min_size=1, max_size=2),
       host=st.sampled_from(["10.1.2.3", "192.168.1.7", "172.16.0.1"]))
def test_the_index_decides_as_the_models_rule(entries, wanted, any_of, host):
    assert PolicyIndex(entries).allows(wanted, frozenset(any_of), host) == decide(entries, wanted, frozenset(any_of),
                                                                                  host)


def test_a_listed_plain_acl_permission_is_the_whole_permission_on_that_name():
    """1.0: a default applies to names an account does not list. ``orders=SUB`` beside ``defaultTopicPerm: PUB|SUB``
    let the account publish to ``orders`` (ACL 2.0 consults Default entries for each action no Custom entry
    names, and RocketMQ's migration adds nothing): the read-only topic took the account's sends."""
    acl = migrate(parse_plain_acl("accounts:\n  - accessKey: readOnly01\n    secretKey: readOnlySecret1\n"
                                  "    defaultTopicPerm: PUB|SUB\n    defaultGroupPerm: SUB\n"
                                  "    topicPerms: [orders=SUB, audit=PUB, open=PUB|SUB, closed=DENY]\n"
                                  "    groupPerms: [producers=PUB]\n"))[1]["readOnly01"]
    assert not acl.allows(ORDERS, frozenset({PUB}), "h")
    assert acl.allows(ORDERS, frozenset({SUB}), "h")
    assert acl.allows(ORDERS, frozenset({PUB, SUB, Action.GET}), "h")  # its route: Sub is enough
    assert not acl.allows(Resource.topic("audit"), frozenset({SUB}), "h")
    assert acl.allows(Resource.topic("audit"), frozenset({PUB}), "h")
    assert acl.allows(Resource.topic("open"), frozenset({PUB}), "h")
    assert not acl.allows(Resource.topic("closed"), frozenset({SUB}), "h")
    assert acl.allows(Resource.topic("unlisted"), frozenset({PUB}), "h")  # the default, as in 1.0
    assert not acl.allows(Resource.group("producers"), frozenset({SUB}), "h")
    assert acl.allows(Resource.group("other"), frozenset({SUB}), "h")
    # no default that would grant it: nothing added
    plain = migrate(parse_plain_acl("accounts:\n  - accessKey: plainKey01\n    secretKey: plainSecret1\n"
                                    "    topicPerms: [orders=SUB]\n"))[1]["plainKey01"]
    assert plain.policies[PolicyType.CUSTOM] == (PolicyEntry(ORDERS, frozenset({SUB})),)


# --- identify and refusal -------------------------------------------------------------------------------------


def test_identify_and_refusal_over_file_users(tmp_path):
    store = store_at(tmp_path, PLAIN_ACL.replace("globalWhiteRemoteAddresses: []",
                                                 "globalWhiteRemoteAddresses: [10.9.*.*]"))
    admin = store.identify("127.0.0.1", "adminKey01", signed)
    assert not isinstance(admin, str) and admin.is_super
    # issue 28 item 9: an admin account listing no permissions may consume (RocketMQ: a Super user passes)
    bare = store_at(tmp_path / "bare", "accounts:\n  - accessKey: bareAdmin1\n    secretKey: bareSecret1\n"
                                       "    admin: true\n")
    user = bare.identify("127.0.0.1", "bareAdmin1", signed)
    assert not isinstance(user, str)
    assert bare.refusal(user, Needs().topic("orders", SUB).group("billing", SUB), "127.0.0.1") is None
    consumer = store.identify("127.0.0.1", "billingKey01", signed)
    assert not isinstance(consumer, str)
    assert store.refusal(consumer, Needs().topic("orders", SUB).group("billing", SUB), "h") is None
    assert store.refusal(consumer, Needs().topic("orders", PUB), "h") == "no Pub permission on Topic:orders"
    assert store.refusal(consumer, Needs().cluster(Action.GET), "h") == "no Get permission on Cluster"
    assert store.identify("10.9.0.1", "", signed) is WHITE_USER
    assert store.identify("127.0.0.1", "", signed) == "no AccessKey (credentials are required)"
    assert store.identify("127.0.0.1", "nobody", signed) == "no account for AccessKey nobody"
    assert store.identify("127.0.0.1", "billingKey01", lambda u: False) == \
        "signature check failed for AccessKey billingKey01"


def test_a_user_without_an_acl_may_do_nothing_and_a_disabled_one_nothing_at_all(tmp_path):
    store = store_at(tmp_path)
    store.create_user("newUser01", "newSecret01", None, by_super=True)
    user = store.identify("h", "newUser01", signed)
    assert not isinstance(user, str) and user.user_type is UserType.NORMAL
    assert store.refusal(user, Needs().topic("orders", PUB), "h") == "no Pub permission on Topic:orders"
    assert store.refusal(user, Needs(), "h") is None  # a signature is all some requests need
    store.create_acl("newUser01", {PolicyType.CUSTOM: (allow("Topic:ord*", PUB),)})
    assert store.refusal(user, Needs().topic("orders", PUB), "h") is None  # at once, same User object
    store.update_user("newUser01", "", None, UserStatus.DISABLE, by_super=True)
    assert store.identify("h", "newUser01", signed) == "user newUser01 is disabled"
    store.update_user("newUser01", "otherSecret1", None, UserStatus.ENABLE, by_super=True)
    again = store.identify("h", "newUser01", signed)
    assert not isinstance(again, str) and again.key.digest() == hmac_key("otherSecret1").digest()


def test_no_remembered_decision_outlives_a_change(tmp_path):
    """``Acl.allows`` remembers its decisions: an allow decided (and remembered) before a change of the stored ACL
    or of plain_acl.yml must be refused on the very next request after it, the same User object asking."""
    store = store_at(tmp_path)
    store.create_user("dave0001", "daveSecret01", None, by_super=True)
    store.create_acl("dave0001", {PolicyType.CUSTOM: (allow("Topic:ord*", PUB),)})
    dave = store.identify("h", "dave0001", signed)
    assert not isinstance(dave, str)

    def refusal(user: Any) -> str | None:
        return store.refusal(user, Needs().topic("orders", PUB), "h")

    assert refusal(dave) is None and refusal(dave) is None  # decided, then remembered
    store.create_acl("dave0001", {PolicyType.CUSTOM: (allow("Topic:orders", PUB, decision=Decision.DENY),)})
    assert refusal(dave) == "no Pub permission on Topic:orders"
    store.delete_acl("dave0001", PolicyType.CUSTOM, Resource.parse("Topic:orders"))
    assert refusal(dave) is None and refusal(dave) is None
    store.delete_acl("dave0001", PolicyType.CUSTOM, None)
    assert refusal(dave) == "no Pub permission on Topic:orders"

    victim = store.identify("h", "orderKey01", signed)  # plain_acl.yml: orders=PUB|SUB
    assert not isinstance(victim, str)
    assert refusal(victim) is None and refusal(victim) is None
    (tmp_path / "plain_acl.yml").write_text(PLAIN_ACL.replace("orders=PUB|SUB, cpp", "orders=SUB, cpp"))
    later = time.time_ns() + 10**9
    os.utime(tmp_path / "plain_acl.yml", ns=(later, later))
    assert store.identify("h", "billingKey01", signed) is not None  # any request re-reads the changed file
    assert refusal(victim) == "no Pub permission on Topic:orders"  # the User object read before the change


def test_a_stream_asking_later_is_decided_on_the_file_as_it_is_then(tmp_path: Path):
    """A gRPC Telemetry stream is admitted once and asks ``refusal_now`` again for every settings command it sends
    (which groups' check-backs it may get), with the User read at its start and no ``identify`` of its own: the
    answer is the changed plain_acl.yml's even when no other request re-read the file meanwhile, and an account
    removed from the file, or an admin made plain, no longer keeps what it had."""
    store = store_at(tmp_path)
    acl_path = tmp_path / "plain_acl.yml"

    def changed_file(text: str) -> None:
        acl_path.write_text(text)
        later = time.time_ns() + 10**9
        os.utime(acl_path, ns=(later, later))

    def refusal(user: Any) -> str | None:
        return store.refusal_now(user, Needs().group("order-service", PUB), "h")

    victim, admin = store.identify("h", "orderKey01", signed), store.identify("h", "adminKey01", signed)
    assert not isinstance(victim, str) and not isinstance(admin, str)
    assert refusal(victim) is None and refusal(victim) is None  # decided, then remembered
    changed_file(PLAIN_ACL.replace("order-service=PUB, ", ""))
    assert refusal(victim) == "no Pub permission on Group:order-service"
    changed_file(PLAIN_ACL.replace("accessKey: orderKey01", "accessKey: orderKey02"))
    assert refusal(victim) is not None  # its account gone from the file
    assert refusal(admin) is None
    changed_file(PLAIN_ACL.replace("admin: true", "admin: false").replace("defaultGroupPerm: PUB|SUB",
                                                                          "defaultGroupPerm: DENY", 1))
    assert refusal(admin) is not None  # no longer a Super user
    changed_file(PLAIN_ACL.replace("globalWhiteRemoteAddresses: []", "globalWhiteRemoteAddresses: [10.0.0.*]"))
    white = store.identify("10.0.0.1", "", signed)
    assert white is WHITE_USER and store.refusal_now(white, Needs().group("order-service", PUB), "10.0.0.1") is None
    changed_file(PLAIN_ACL)
    assert store.refusal_now(white, Needs().group("order-service", PUB), "10.0.0.1") is not None  # white no longer


def test_remembered_decisions_are_bounded():
    """A user naming ever new resources cannot grow the server's memory: an ACL remembers at most MAX_DECISIONS,
    and none for a name longer than RocketMQ's longest; such names are still decided."""
    acl = Acl("u", {PolicyType.CUSTOM: (allow("Topic:*", PUB), allow("Topic:secret*", PUB, decision=Decision.DENY))})
    pub = frozenset({PUB})
    for i in range(Acl.MAX_DECISIONS + 10):
        assert acl.allows(Resource.topic(f"t{i}"), pub, "h")
        assert acl.remembered() <= Acl.MAX_DECISIONS
    assert acl.remembered() > 0
    fresh = Acl("u", acl.policies)
    assert fresh.allows(Resource.topic("t" * 256), pub, "h") and fresh.remembered() == 0
    assert not fresh.allows(Resource.topic("secret" + "t" * 300), pub, "h") and fresh.remembered() == 0
    assert fresh.allows(Resource.topic("t" * 255), pub, "h") and fresh.remembered() == 1


def test_decisions_for_every_topic_of_a_spread_are_kept_and_a_flood_leaves_them_be():
    """A user sending over 10,000 topics in turn has each decided once (emptied when full at 4,096, every one was
    decided again); a flood of new names after them stops at the bound, decided right, and keeps the 10,000."""
    acl = Acl("u", {PolicyType.CUSTOM: (allow("Topic:*", PUB), allow("Topic:secret*", PUB, decision=Decision.DENY))})
    pub = frozenset({PUB})
    for _round in range(2):
        assert all(acl.allows(Resource.topic(f"spread_t{i}"), pub, "h") for i in range(10_000))
        assert acl.remembered() == 10_000
    for i in range(Acl.MAX_DECISIONS):
        assert acl.allows(Resource.topic(f"flood{i}"), pub, "h")
        assert not acl.allows(Resource.topic(f"secret{i}"), pub, "h")
    assert acl.remembered() == Acl.MAX_DECISIONS
    assert all(acl.allows(Resource.topic(f"spread_t{i}"), pub, "h") for i in range(10_000))
    assert acl.remembered() == Acl.MAX_DECISIONS


# --- changes, persistence, and the two sources ---------------------------------------------------------------


def test_changes_persist_and_are_loaded_at_start(tmp_path):
    store = store_at(tmp_path)
    store.create_user("alice0001", "aliceSecret1", UserType.NORMAL, by_super=False)
    store.create_acl("alice0001", {PolicyType.CUSTOM: (allow("Topic:orders", PUB, SUB), allow("Group:g", SUB))})
    store.create_acl("alice0001", {PolicyType.CUSTOM: (allow("Topic:orders", SUB),)})  # replaces that entry
    store.create_user("bob000001", "bobSecret01", None, by_super=False)
    path = tmp_path / "store" / "auth.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds passwords
    store.close()
    again = AuthStore(AclFile(tmp_path / "plain_acl.yml"), path)
    acl = again.get_acl("alice0001")
    assert acl is not None and acl.policies[PolicyType.CUSTOM] == (allow("Topic:orders", SUB), allow("Group:g", SUB))
    again.delete_acl("alice0001", PolicyType.CUSTOM, Resource.parse("Group:g"))
    again.delete_user("bob000001", by_super=False)
    assert [u.username for u in again.list_users("0001")] == ["alice0001"]
    again.close()
    third = AuthStore(AclFile(tmp_path / "plain_acl.yml"), path)
    assert third.get_user("bob000001") is None
    assert third.get_acl("alice0001").policies[PolicyType.CUSTOM] == (allow("Topic:orders", SUB),)  # type: ignore[union-attr]
    third.delete_acl("alice0001", PolicyType.CUSTOM, None)
    assert third.get_acl("alice0001") is None
    with pytest.raises(AuthError, match="no ACL for User:alice0001"):
        third.delete_acl("alice0001", PolicyType.CUSTOM, None)
    third.close()


def test_file_users_are_read_only_and_win_over_stored_ones(tmp_path, caplog):
    store = store_at(tmp_path)
    for change in (lambda: store.create_user("orderKey01", "x" * 8, None, by_super=True),
                   lambda: store.update_user("orderKey01", "x" * 8, None, None, by_super=True),
                   lambda: store.delete_user("orderKey01", by_super=True),
                   lambda: store.create_acl("orderKey01", {PolicyType.CUSTOM: (allow("*", Action.ALL),)}),
                   lambda: store.delete_acl("orderKey01", PolicyType.CUSTOM, None)):
        with pytest.raises(AuthError, match=r"defined in plain_acl\.yml"):
            change()
    store.create_user("carol0001", "carolSecret1", None, by_super=True)
    store.create_acl("carol0001", {PolicyType.CUSTOM: (allow("Topic:orders", PUB),)})
    # the file takes the name: its user and ACL are served, the stored one is kept but hidden
    (tmp_path / "plain_acl.yml").write_text(PLAIN_ACL + "  - accessKey: carol0001\n    secretKey: fileSecret01\n")
    os.utime(tmp_path / "plain_acl.yml", ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    with caplog.at_level("WARNING", logger="txmq.acl"):
        user = store.identify("h", "carol0001", signed)
    assert not isinstance(user, str) and user.from_file and user.password == "fileSecret01"
    assert store.refusal(user, Needs().topic("orders", PUB), "h") == "no Pub permission on Topic:orders"
    assert "carol0001 are in plain_acl.yml" in caplog.text


def test_only_a_super_user_makes_or_changes_super_users(tmp_path):
    store = store_at(tmp_path)
    with pytest.raises(AuthForbidden):
        store.create_user("root00001", "rootSecret01", UserType.SUPER, by_super=False)
    store.create_user("root00001", "rootSecret01", UserType.SUPER, by_super=True)
    store.create_user("plain0001", "plainSecret1", None, by_super=False)
    for change in (lambda: store.update_user("root00001", "newSecret01", None, None, by_super=False),
                   lambda: store.update_user("plain0001", "", UserType.SUPER, None, by_super=False),
                   lambda: store.delete_user("root00001", by_super=False)):
        with pytest.raises(AuthForbidden):
            change()
    assert store.delete_user("root00001", by_super=True)
    assert not store.delete_user("root00001", by_super=True)  # gone: RocketMQ answers success
    with pytest.raises(AuthError, match="already exists"):
        store.create_user("plain0001", "again0001", None, by_super=True)
    with pytest.raises(AuthError, match="does not exist"):
        store.create_acl("ghost0001", {PolicyType.CUSTOM: (allow("*", Action.ALL),)})


@pytest.mark.parametrize("content", [b"{not json", b"[]", b'{"version": 9}',
                                     b'{"version": 1, "users": [{"username": "u"}]}',
                                     b'{"version": 1, "users": [], "acls": [{"subject": "User:u", "policies": []}]}',
                                     b'{"version": 1, "users": [{"username": "u", "password": "p"}], "acls": '
                                     b'[{"subject": "User:u", "policies": [{"entries": [{"resource": "Topic:t", '
                                     b'"actions": ["Publish"], "decision": "Allow"}]}]}]}'])
def test_a_broken_store_refuses_the_start(tmp_path, content):
    """Starting without the stored users and their Deny entries could open what they close: refuse, naming the
    file, and leave it as it is."""
    path = tmp_path / "store" / "auth.json"
    path.parent.mkdir()
    path.write_bytes(content)
    (tmp_path / "plain_acl.yml").write_text(PLAIN_ACL)
    with pytest.raises(AuthStoreError, match=re.escape(f"auth store {path} is not valid")):
        AuthStore(AclFile(tmp_path / "plain_acl.yml"), path)
    assert path.read_bytes() == content


def test_a_missing_store_is_empty_and_one_store_serves_one_process(tmp_path):
    store = store_at(tmp_path)
    assert [u.username for u in store.list_users()] == ["adminKey01", "attackKey01", "billingKey01", "nobodyKey01",
                                                       "orderKey01"]
    assert not (tmp_path / "store" / "auth.json").exists()  # nothing written until a change
    with pytest.raises(AuthStoreError, match="in use by another process"):
        AuthStore(AclFile(tmp_path / "plain_acl.yml"), tmp_path / "store" / "auth.json")
    store.close()


# --- the request handlers --------------------------------------------------------------------------------------


class _Passes:
    """A gate that lets every request through as the user its AccessKey names: what the processor does past the
    ACL."""

    def __init__(self, store: AuthStore) -> None:
        self.store = store

    def admit(self, conn: Any, cmd: RemotingCommand) -> User | None:
        return self.store.get_user(cmd.ext_fields["AccessKey"])

    def permit(self, conn: Any, cmd: RemotingCommand, identity: User, needs: Any) -> None:
        return None


def _ask(processor: AuthProcessor, code: int, ext: dict[str, str], body: Any = None,
         as_: str = "adminKey01") -> RemotingCommand:
    table = RequestTable("broker")
    table.register(processor)
    cmd = RemotingCommand.request(code, {**ext, "AccessKey": as_}, orjson.dumps(body) if body is not None else b"")
    conn: Any = SimpleNamespace(remote_address="127.0.0.1:1", attrs={})
    gate = _Passes(processor.store) if processor.store is not None else None  # ACL off: no gate
    answer = RequestDispatcher(table, gate)(conn, cmd)
    assert isinstance(answer, RemotingCommand)
    return answer


def test_handlers_never_answer_or_log_a_password(tmp_path, caplog):
    processor = AuthProcessor(store_at(tmp_path), "broker")
    with caplog.at_level("INFO", logger="txmq.acl"):
        resp = _ask(processor, RequestCode.AUTH_CREATE_USER, {"username": "dave0001"},
                    {"password": "davePassw0rd", "userType": "Normal"})
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        resp = _ask(processor, RequestCode.AUTH_UPDATE_USER, {"username": "dave0001"}, {"password": "davePassw0rd2"})
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    got = _ask(processor, RequestCode.AUTH_GET_USER, {"username": "dave0001"})
    assert json.loads(got.body) == {"username": "dave0001", "password": MASKED_PASSWORD, "userType": "Normal",
                                    "userStatus": "enable"}
    listed = json.loads(_ask(processor, RequestCode.AUTH_LIST_USER, {}).body)
    assert {u["password"] for u in listed} == {MASKED_PASSWORD} and len(listed) == 6
    assert "davePassw0rd" not in caplog.text and "user dave0001 (Normal) created by adminKey01" in caplog.text
    assert _ask(processor, RequestCode.AUTH_GET_USER, {"username": "nobody"}).body == b""


def test_handlers_create_list_and_delete_acls_and_refuse_bad_input(tmp_path):
    processor = AuthProcessor(store_at(tmp_path), "namesrv")
    assert _ask(processor, RequestCode.AUTH_CREATE_USER, {"username": "erin0001"},
                {"password": "erinSecret1"}).code == ResponseCode.SUCCESS
    body = {"subject": "User:erin0001", "policies": [{"entries": [
        {"resource": "Topic:orders", "actions": ["Pub", "Sub"], "sourceIps": ["10.0.0.0/8"], "decision": "Allow"},
        {"resource": "Group:billing", "actions": ["Sub"], "decision": "Allow"}]}]}
    resp = _ask(processor, RequestCode.AUTH_CREATE_ACL, {"subject": "User:erin0001"}, body)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    acl = json.loads(_ask(processor, RequestCode.AUTH_GET_ACL, {"subject": "User:erin0001"}).body)
    assert acl["policies"] == [{"policyType": "Custom", "entries": [
        {"resource": "Topic:orders", "actions": ["Pub", "Sub"], "sourceIps": ["10.0.0.0/8"], "decision": "Allow"},
        {"resource": "Group:billing", "actions": ["Sub"], "sourceIps": [], "decision": "Allow"}]}]
    listed = json.loads(_ask(processor, RequestCode.AUTH_LIST_ACL, {"subjectFilter": "erin",
                                                                  "resourceFilter": "Group"}).body)
    assert [e["resource"] for e in listed[0]["policies"][0]["entries"]] == ["Group:billing"]
    resp = _ask(processor, RequestCode.AUTH_DELETE_ACL, {"subject": "User:erin0001", "resource": "Group:billing"})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    for code, ext, bad, remark in [
        (RequestCode.AUTH_CREATE_ACL, {"subject": "User:erin0001"},
         {"policies": [{"entries": [{"resource": "Queue:x", "actions": ["Pub"], "decision": "Allow"}]}]},
         "unknown resource"),
        (RequestCode.AUTH_CREATE_ACL, {"subject": "User:erin0001"},
         {"policies": [{"entries": [{"resource": "Topic:x", "actions": ["Pub"], "decision": "Maybe"}]}]},
         "unknown decision"),
        (RequestCode.AUTH_CREATE_ACL, {"subject": "erin0001"}, body, "expected User:NAME"),
        (RequestCode.AUTH_CREATE_ACL, {}, body, "missing field subject"),
        (RequestCode.AUTH_CREATE_USER, {"username": "frank001"}, {"password": "x", "userType": "Root"},
         "unknown user type"),
        (RequestCode.AUTH_CREATE_USER, {"username": " "}, {"password": "x"}, "username can not be blank"),
        (RequestCode.AUTH_CREATE_USER, {"username": "a\nb"}, {"password": "x"}, "must be printable"),
    ]:
        resp = _ask(processor, code, ext, bad)
        assert resp.code == ResponseCode.SYSTEM_ERROR and remark in (resp.remark or ""), resp.remark
    # a Normal caller (the validator let it through with Update on the cluster) cannot make a Super user
    resp = _ask(processor, RequestCode.AUTH_CREATE_USER, {"username": "frank001"},
                {"password": "frankSecret1", "userType": "Super"}, as_="erin0001")
    assert resp.code == ResponseCode.NO_PERMISSION
    off = AuthProcessor(None, "broker")
    assert "ACL is off" in (_ask(off, RequestCode.AUTH_LIST_USER, {}).remark or "")


def test_a_change_the_disk_refuses_is_not_made(tmp_path):
    store = store_at(tmp_path)
    path = tmp_path / "store" / "auth.json"
    path.mkdir()  # the rename over it fails: as a full or broken disk would
    processor = AuthProcessor(store, "broker")
    resp = _ask(processor, RequestCode.AUTH_CREATE_USER, {"username": "gina0001"}, {"password": "ginaSecret1"})
    assert resp.code == ResponseCode.SYSTEM_ERROR and "the change was not made" in (resp.remark or "")
    assert store.get_user("gina0001") is None and store.identify("h", "gina0001", signed) == \
        "no account for AccessKey gina0001"


def test_commands_go_to_every_replica_and_name_server(monkeypatch):
    """mqadmin's -b and -c, plus the name servers: each server keeps its own users."""
    info = {"brokerAddrTable": {"b": {"brokerAddrs": {"0": "h:3", "1": "h:4"}}, "a": {"brokerAddrs": {"1": "h:2",
                                                                                                    "0": "h:1"}}},
            "clusterAddrTable": {"c1": ["a"], "c2": ["b"]}}
    admin = MQAdminExt("n:1;n:2")
    monkeypatch.setattr(admin, "cluster_info", lambda: info)
    namesrvs = [("namesrv", "n:1"), ("namesrv", "n:2")]
    assert admin.auth_targets() == [("broker a", "h:1"), ("broker a", "h:2"), ("broker b", "h:3"),
                                    ("broker b", "h:4"), *namesrvs]
    assert admin.auth_targets(cluster="c2") == [("broker b", "h:3"), ("broker b", "h:4"), *namesrvs]
    assert admin.auth_targets(broker="a") == [("broker a", "h:1"), ("broker a", "h:2")]
    assert admin.auth_targets(broker="h:9") == [("broker", "h:9")]
    with pytest.raises(ClientError, match="no cluster c3"):
        admin.auth_targets(cluster="c3")
