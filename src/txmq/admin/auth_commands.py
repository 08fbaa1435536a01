"""``txmq admin`` users and ACLs: mqadmin's createUser, updateUser, deleteUser, getUser, listUser, createAcl,
updateAcl, deleteAcl, getAcl, listAcl (RocketMQ 5.3, request codes 3001-3010), with mqadmin's flags.

Each server keeps its own users and ACLs, so a command goes to every one of them: ``-b`` one broker (an address,
or a name: its master and slaves); ``-c`` every broker of a cluster, masters and slaves, and the name servers of
``-n``; neither, every broker of every cluster and the name servers. Changes report per server, and fail (exit
1) when any server refused; reads print each server's answer under its address."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from txmq.acl.info import policy_info, read_policies
from txmq.acl.model import UserStatus, UserType
from txmq.admin.client import MQAdminExt
from txmq.admin.commands import command
from txmq.cli.registry import opt
from txmq.errors import BrokerError, ClientError, TxmqError
from txmq.remoting.admin_headers import (
    AclRequestHeader,
    DeleteAclRequestHeader,
    ListAclsRequestHeader,
    ListUsersRequestHeader,
    UserRequestHeader,
)
from txmq.remoting.codes import RequestCode
from txmq.remoting.request_headers import Header

BROKER = opt("-b", "--brokerAddr", dest="broker",
             help="only this broker: an address, or a name (its master and slaves)")
CLUSTER = opt("-c", "--clusterName", dest="cluster",
              help="every broker of this cluster, and the name servers (default: every broker, and the name servers)")
USERNAME = opt("-u", "--username", required=True, help="the user's name (its AccessKey)")
SUBJECT = opt("-s", "--subject", required=True, help="whose ACL: User:NAME")
USER_FORMAT = "{:<16}  {:<22}  {:<22}  {:<22}"
ACL_FORMAT = "{:<16}  {:<10}  {:<22}  {:<20}  {:<24}  {:<10}"


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _why(exc: TxmqError) -> str:
    return f"code {exc.code}: {exc.remark}" if isinstance(exc, BrokerError) else str(exc)


def _change(admin: MQAdminExt, args: argparse.Namespace, what: str, code: int, header: Header,
            body: Any = None) -> int:
    failed = 0
    for label, addr in admin.auth_targets(args.broker, args.cluster):
        try:
            admin.auth_request(addr, code, header, body)
        except TxmqError as exc:
            failed += 1
            print(f"{what} to {addr} ({label}) failed: {_why(exc)}")
        else:
            print(f"{what} to {addr} ({label}) success.")
    return 1 if failed else 0


def _read(admin: MQAdminExt, args: argparse.Namespace, code: int, header: Header,
          show: Callable[[Any], None]) -> int:
    failed = 0
    for label, addr in admin.auth_targets(args.broker, args.cluster):
        print(f"============{label} {addr}============")
        try:
            data = admin.auth_request(addr, code, header)
        except TxmqError as exc:
            failed += 1
            print(f"failed: {_why(exc)}")
            continue
        show(data)
    return 1 if failed else 0


def _checked(parse: Callable[[str], Any], text: str | None) -> None:
    """A value the servers would refuse, refused here once rather than once per server."""
    if text:
        try:
            parse(text)
        except ValueError as exc:
            raise ClientError(str(exc)) from None


def _print_users(users: list[dict[str, Any]]) -> None:
    print(USER_FORMAT.format("#UserName", "#Password", "#UserType", "#UserStatus"))
    for u in users:
        print(USER_FORMAT.format(u.get("username", ""), u.get("password", ""), u.get("userType", ""),
                                 u.get("userStatus", "")))


def _print_acls(acls: list[dict[str, Any]]) -> None:
    print(ACL_FORMAT.format("#Subject", "#PolicyType", "#Resource", "#Actions", "#SourceIp", "#Decision"))
    for acl in acls:
        for policy in acl.get("policies") or []:
            for e in policy.get("entries") or []:
                print(ACL_FORMAT.format(acl.get("subject", ""), policy.get("policyType", ""), e.get("resource", ""),
                                        ",".join(e.get("actions") or []), ",".join(e.get("sourceIps") or []) or "*",
                                        e.get("decision", "")))


# --- users ------------------------------------------------------------------------------------------------


@command("createUser", "create a user (Normal unless -t Super; only a Super user creates a Super user)",
         BROKER, CLUSTER, USERNAME, opt("-p", "--password", required=True, help="its password (SecretKey)"),
         opt("-t", "--userType", help="Super or Normal (default Normal)"))
def create_user(admin: MQAdminExt, args: argparse.Namespace) -> int:
    _checked(UserType.parse, args.userType)
    body = {k: v for k, v in (("username", args.username), ("password", args.password), ("userType", args.userType))
            if v}
    return _change(admin, args, "create user", RequestCode.AUTH_CREATE_USER, UserRequestHeader(args.username), body)


@command("updateUser", "change a user's password, type or status", BROKER, CLUSTER, USERNAME,
         opt("-p", "--password", help="the new password"), opt("-t", "--userType", help="Super or Normal"),
         opt("-s", "--userStatus", help="enable or disable (a disabled user is refused every request)"))
def update_user(admin: MQAdminExt, args: argparse.Namespace) -> int:
    if not (args.password or args.userType or args.userStatus):
        raise ClientError("give at least one of -p, -t, -s")
    _checked(UserType.parse, args.userType)
    _checked(UserStatus.parse, args.userStatus)
    body = {k: v for k, v in (("username", args.username), ("password", args.password), ("userType", args.userType),
                              ("userStatus", args.userStatus)) if v}
    return _change(admin, args, "update user", RequestCode.AUTH_UPDATE_USER, UserRequestHeader(args.username), body)


@command("deleteUser", "delete a user and its ACL", BROKER, CLUSTER, USERNAME)
def delete_user(admin: MQAdminExt, args: argparse.Namespace) -> int:
    return _change(admin, args, "delete user", RequestCode.AUTH_DELETE_USER, UserRequestHeader(args.username))


@command("getUser", "a user's type and status (passwords are never shown)", BROKER, CLUSTER, USERNAME)
def get_user(admin: MQAdminExt, args: argparse.Namespace) -> int:
    return _read(admin, args, RequestCode.AUTH_GET_USER, UserRequestHeader(args.username),
                 lambda data: _print_users([data]) if data else print(f"no user {args.username}"))


@command("listUser", "every user (passwords are never shown)", BROKER, CLUSTER,
         opt("-f", "--filter", default="", help="only users whose name contains this"))
def list_user(admin: MQAdminExt, args: argparse.Namespace) -> int:
    return _read(admin, args, RequestCode.AUTH_LIST_USER, ListUsersRequestHeader(args.filter),
                 lambda data: _print_users(data or []))


# --- ACLs -------------------------------------------------------------------------------------------------

ACL_ENTRY = (opt("-r", "--resources", required=True, help="Topic:NAME, Topic:PREFIX*, Topic:*, Group:..., Cluster "
                                                            "or *; several separated by commas"),
             opt("-a", "--actions", required=True, help="Pub, Sub, Create, Update, Delete, Get, List, All; "
                                                         "several separated by commas"),
             opt("-d", "--decision", required=True, help="Allow or Deny"),
             opt("-i", "--sourceIp", help="only from these addresses (IPs or CIDR, separated by commas)"))


def _acl_body(args: argparse.Namespace) -> dict[str, Any]:
    body = {"subject": args.subject, "policies": [policy_info(_split(args.resources), _split(args.actions),
                                                              _split(args.sourceIp), args.decision)]}
    try:
        read_policies(body)
    except ValueError as exc:
        raise ClientError(f"bad ACL: {exc}") from None
    return body


@command("createAcl", "add entries to a user's ACL (an entry for a resource it has replaces that one)",
         BROKER, CLUSTER, SUBJECT, *ACL_ENTRY)
def create_acl(admin: MQAdminExt, args: argparse.Namespace) -> int:
    return _change(admin, args, "create acl", RequestCode.AUTH_CREATE_ACL, AclRequestHeader(args.subject),
                   _acl_body(args))


@command("updateAcl", "change a user's ACL entries (as createAcl: entries replace those of their resources)",
         BROKER, CLUSTER, SUBJECT, *ACL_ENTRY)
def update_acl(admin: MQAdminExt, args: argparse.Namespace) -> int:
    return _change(admin, args, "update acl", RequestCode.AUTH_UPDATE_ACL, AclRequestHeader(args.subject),
                   _acl_body(args))


@command("deleteAcl", "delete a user's ACL, or only its entry for one resource", BROKER, CLUSTER, SUBJECT,
         opt("-r", "--resources", default="", help="only the entry for this resource"))
def delete_acl(admin: MQAdminExt, args: argparse.Namespace) -> int:
    return _change(admin, args, "delete acl", RequestCode.AUTH_DELETE_ACL,
                   DeleteAclRequestHeader(args.subject, resource=args.resources.strip()))


@command("getAcl", "a user's ACL", BROKER, CLUSTER, SUBJECT)
def get_acl(admin: MQAdminExt, args: argparse.Namespace) -> int:
    return _read(admin, args, RequestCode.AUTH_GET_ACL, AclRequestHeader(args.subject),
                 lambda data: _print_acls([data]) if data else print(f"no ACL for {args.subject}"))


@command("listAcl", "every ACL", BROKER, CLUSTER,
         opt("-s", "--subject", default="", help="only subjects containing this"),
         opt("-r", "--resource", default="", help="only entries whose resource contains this"))
def list_acl(admin: MQAdminExt, args: argparse.Namespace) -> int:
    return _read(admin, args, RequestCode.AUTH_LIST_ACL, ListAclsRequestHeader(args.subject, args.resource),
                 lambda data: _print_acls(data or []))
