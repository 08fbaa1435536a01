"""RocketMQ 5.3's user and ACL administration (AUTH_CREATE_USER 3001 ... AUTH_LIST_ACL 3010, mqadmin
``createUser`` ... ``listAcl``), served by the broker and the name server alike over their own ``AuthStore``.

Each request is read once (its header and its JSON body: ``AuthRequest``) and needs, as RocketMQ declares them,
Update on the cluster for changes, Get for reads (a Super user passes); the gate stamps who made it into that
reading: the user it admitted, whose type decides the next rule, never a name looked up again (a stored user
named like another identity would be taken for it). Beyond that, as RocketMQ: only a Super user creates, changes
or deletes a Super user. Passwords are never
answered (GET and LIST mask them) and never logged; each change is logged once, with who made it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson

from txmq.acl.info import MASKED_PASSWORD, acl_info, read_policies, read_user_info, user_info
from txmq.acl.model import PolicyType, Resource, User, cluster_get, cluster_update, parse_subject
from txmq.acl.store import AuthError, AuthForbidden, AuthStore
from txmq.errors import RemoteProtocolError
from txmq.remoting.admin_headers import (
    AclRequestHeader,
    DeleteAclRequestHeader,
    ListAclsRequestHeader,
    ListUsersRequestHeader,
    UserRequestHeader,
)
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import RequestSpec
from txmq.remoting.request_headers import Header
from txmq.remoting.transport import Connection

log = logging.getLogger("txmq.acl")

class AuthRequest:
    """An AUTH_* request as read once: its header, its JSON body, and who made it (the gate's stamp: the user it
    admitted, ``WHITE_USER`` from a global white address)."""

    __slots__ = ("body", "caller", "header")

    def __init__(self, header: Any, body: Any) -> None:
        self.header = header
        self.body = body
        self.caller: User | None = None


def _stamp(req: AuthRequest, user: User) -> None:
    req.caller = user


AuthHandler = Callable[[Any, AuthRequest], RemotingCommand]


def _ok(cmd: RemotingCommand, body: Any = None) -> RemotingCommand:
    return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=b"" if body is None else orjson.dumps(body))


def _reader(header_type: type[Header]) -> Callable[[RemotingCommand], AuthRequest]:
    def parse(cmd: RemotingCommand) -> AuthRequest:
        try:
            body = orjson.loads(cmd.body or b"null")
        except orjson.JSONDecodeError as exc:
            raise RemoteProtocolError(f"the body is not JSON: {exc}") from None
        return AuthRequest(header_type.from_ext(cmd.ext_fields), body)

    return parse


def _masked(user: User) -> dict[str, str]:
    return user_info(user.username, MASKED_PASSWORD, user.user_type, user.user_status)


class AuthProcessor:
    """The AUTH_* codes over ``store`` (None: ACL is off on this server, and every such request says so)."""

    def __init__(self, store: AuthStore | None, server: str) -> None:
        self.store = store
        self.server = server

    def requests(self) -> list[RequestSpec[Any]]:
        user, users = _reader(UserRequestHeader), _reader(ListUsersRequestHeader)
        acl, acls = _reader(AclRequestHeader), _reader(ListAclsRequestHeader)
        delete_acl = _reader(DeleteAclRequestHeader)
        declared: list[tuple[int, Callable[[RemotingCommand], AuthRequest], Any, AuthHandler]] = [
            (RequestCode.AUTH_CREATE_USER, user, cluster_update, self.create_user),
            (RequestCode.AUTH_UPDATE_USER, user, cluster_update, self.update_user),
            (RequestCode.AUTH_DELETE_USER, user, cluster_update, self.delete_user),
            (RequestCode.AUTH_GET_USER, user, cluster_get, self.get_user),
            (RequestCode.AUTH_LIST_USER, users, cluster_get, self.list_users),
            (RequestCode.AUTH_CREATE_ACL, acl, cluster_update, self.create_acl),
            (RequestCode.AUTH_UPDATE_ACL, acl, cluster_update, self.update_acl),
            (RequestCode.AUTH_DELETE_ACL, delete_acl, cluster_update, self.delete_acl),
            (RequestCode.AUTH_GET_ACL, acl, cluster_get, self.get_acl),
            (RequestCode.AUTH_LIST_ACL, acls, cluster_get, self.list_acls),
        ]
        return [RequestSpec(code, parse, needs, self._answer(handler), stamp=_stamp)
                for code, parse, needs, handler in declared]

    def _answer(self, handler: AuthHandler) -> Callable[[Connection, RemotingCommand, AuthRequest], RemotingCommand]:
        def answer(conn: Connection, cmd: RemotingCommand, req: AuthRequest) -> RemotingCommand:
            if self.store is None:
                return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR,
                                                   remark=f"ACL is off on this {self.server}: users and ACLs need it")
            try:
                return handler(cmd, req)
            except AuthForbidden as exc:
                return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION, remark=str(exc))
            except AuthError as exc:
                return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=str(exc))
            except ValueError as exc:  # a resource, action, decision, address, type or status that does not parse
                return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=f"bad request: {exc}")
            except OSError as exc:
                log.error("%s could not write its auth store: %s", self.server, exc)
                remark = f"the change was not made, the store cannot be written: {exc}"
                return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=remark)

        return answer

    def _store(self) -> AuthStore:
        assert self.store is not None  # process() answers for a server without one
        return self.store

    @staticmethod
    def _by_super(req: AuthRequest) -> bool:
        """Whether the request's maker, as the gate admitted it, is a Super user (``WHITE_USER`` is one: a global
        white address may do everything). Without ACL there is no stamp, and nobody is."""
        return req.caller is not None and req.caller.is_super

    def _changed(self, req: AuthRequest, what: str) -> None:
        log.info("%s: %s by %s", self.server, what, req.caller.username if req.caller is not None else "?")

    # --- users --------------------------------------------------------------------------------------------

    def create_user(self, cmd: RemotingCommand, req: AuthRequest) -> RemotingCommand:
        _, password, user_type, _ = read_user_info(req.body)
        user = self._store().create_user(req.header.username, password, user_type, self._by_super(req))
        self._changed(req, f"user {user.username} ({user.user_type.value}) created")
        return _ok(cmd)

    def update_user(self, cmd: RemotingCommand, req: AuthRequest) -> RemotingCommand:
        _, password, user_type, status = read_user_info(req.body)
        user = self._store().update_user(req.header.username, password, user_type, status, self._by_super(req))
        changed = ", ".join(what for what, given in (("password", password), ("type", user_type),
                                                     ("status", status)) if given)
        self._changed(req, f"user {user.username} updated ({changed or 'nothing'}; now {user.user_type.value}, "
                           f"{user.user_status.value})")
        return _ok(cmd)

    def delete_user(self, cmd: RemotingCommand, req: AuthRequest) -> RemotingCommand:
        if self._store().delete_user(req.header.username, self._by_super(req)):
            self._changed(req, f"user {req.header.username.strip()} and its ACL deleted")
        return _ok(cmd)

    def get_user(self, cmd: RemotingCommand, req: AuthRequest) -> RemotingCommand:
        """RocketMQ: no such user is a success without a body."""
        if not req.header.username.strip():
            raise AuthError("the username can not be blank")
        user = self._store().get_user(req.header.username.strip())
        return _ok(cmd, _masked(user) if user is not None else None)

    def list_users(self, cmd: RemotingCommand, req: AuthRequest) -> RemotingCommand:
        return _ok(cmd, [_masked(u) for u in self._store().list_users(req.header.filter.strip())])

    # --- ACLs -------------------------------------------------------------------------------------------

    def create_acl(self, cmd: RemotingCommand, req: AuthRequest) -> RemotingCommand:
        username = parse_subject(req.header.subject)
        policies = read_policies(req.body)
        acl = self._store().create_acl(username, policies)
        given = sum(len(entries) for entries in policies.values())
        self._changed(req, f"ACL of {acl.subject} set ({given} entries given, "
                           f"{sum(len(e) for e in acl.policies.values())} now)")
        return _ok(cmd)

    update_acl = create_acl  # RocketMQ's updateAcl merges exactly as its createAcl does

    def delete_acl(self, cmd: RemotingCommand, req: AuthRequest) -> RemotingCommand:
        h = req.header
        username = parse_subject(h.subject)
        resource = Resource.parse(h.resource) if h.resource.strip() else None
        policy_type = PolicyType.parse(h.policy_type.strip())
        self._store().delete_acl(username, policy_type, resource)
        what = f"{policy_type.value} entry {resource.key}" if resource is not None else "ACL"
        self._changed(req, f"{what} of User:{username} deleted")
        return _ok(cmd)

    def get_acl(self, cmd: RemotingCommand, req: AuthRequest) -> RemotingCommand:
        acl = self._store().get_acl(parse_subject(req.header.subject))
        return _ok(cmd, acl_info(acl) if acl is not None else None)

    def list_acls(self, cmd: RemotingCommand, req: AuthRequest) -> RemotingCommand:
        acls = self._store().list_acls(req.header.subject_filter.strip(), req.header.resource_filter.strip())
        return _ok(cmd, [acl_info(a) for a in acls])

