"""RocketMQ 5.3's user and ACL administration (AUTH_CREATE_USER 3001 ... AUTH_LIST_ACL 3010, mqadmin
``createUser`` ... ``listAcl``), served by the broker and the name server alike over their own ``AuthStore``.

Each handler takes its parsed header and the request and returns the answer. The caller has passed the
validator: Update on the cluster for changes, Get for reads (a Super user passes). Beyond that, as RocketMQ: only
a Super user creates, changes or deletes a Super user. Passwords are never answered (GET and LIST mask them)
and never logged; each change is logged once, with who made it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson

from txmq.acl.info import MASKED_PASSWORD, acl_info, read_policies, read_user_info, user_info
from txmq.acl.model import PolicyType, Resource, User, parse_subject
from txmq.acl.signer import ACCESS_KEY
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
from txmq.remoting.request_headers import Header
from txmq.remoting.transport import Connection

log = logging.getLogger("txmq.acl")

AuthHandler = Callable[[Any, RemotingCommand], RemotingCommand]


def _ok(cmd: RemotingCommand, body: Any = None) -> RemotingCommand:
    return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=b"" if body is None else orjson.dumps(body))


def _body(cmd: RemotingCommand) -> Any:
    try:
        return orjson.loads(cmd.body or b"null")
    except orjson.JSONDecodeError as exc:
        raise AuthError(f"the body is not JSON: {exc}") from None


def _masked(user: User) -> dict[str, str]:
    return user_info(user.username, MASKED_PASSWORD, user.user_type, user.user_status)


class AuthProcessor:
    """The AUTH_* codes over ``store`` (None: ACL is off on this server, and every such request says so)."""

    def __init__(self, store: AuthStore | None, server: str) -> None:
        self.store = store
        self.server = server
        self.handlers: dict[int, tuple[type[Header], AuthHandler]] = {
            RequestCode.AUTH_CREATE_USER: (UserRequestHeader, self.create_user),
            RequestCode.AUTH_UPDATE_USER: (UserRequestHeader, self.update_user),
            RequestCode.AUTH_DELETE_USER: (UserRequestHeader, self.delete_user),
            RequestCode.AUTH_GET_USER: (UserRequestHeader, self.get_user),
            RequestCode.AUTH_LIST_USER: (ListUsersRequestHeader, self.list_users),
            RequestCode.AUTH_CREATE_ACL: (AclRequestHeader, self.create_acl),
            RequestCode.AUTH_UPDATE_ACL: (AclRequestHeader, self.update_acl),
            RequestCode.AUTH_DELETE_ACL: (DeleteAclRequestHeader, self.delete_acl),
            RequestCode.AUTH_GET_ACL: (AclRequestHeader, self.get_acl),
            RequestCode.AUTH_LIST_ACL: (ListAclsRequestHeader, self.list_acls),
        }

    def process(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header_type, handler = self.handlers[cmd.code]
        if self.store is None:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR,
                                               remark=f"ACL is off on this {self.server}: users and ACLs need it on")
        try:
            return handler(header_type.from_ext(cmd.ext_fields), cmd)
        except AuthForbidden as exc:
            return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION, remark=str(exc))
        except (AuthError, RemoteProtocolError) as exc:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=str(exc))
        except ValueError as exc:  # a resource, action, decision, address, type or status that does not parse
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=f"bad request: {exc}")
        except OSError as exc:
            log.error("%s could not write its auth store: %s", self.server, exc)
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR,
                                               remark=f"the change was not made: the store cannot be written ({exc})")

    def _store(self) -> AuthStore:
        assert self.store is not None  # process() answers for a server without one
        return self.store

    def _caller(self, cmd: RemotingCommand) -> tuple[str, bool]:
        """Who asks (the validator checked the signature of this AccessKey), and whether a Super user. No
        AccessKey passed the validator only from a global white address, which may do everything."""
        access_key = cmd.ext_fields.get(ACCESS_KEY, "")
        if not access_key:
            return "(white address)", True
        user = self._store().get_user(access_key)
        return access_key, user is not None and user.is_super

    def _changed(self, cmd: RemotingCommand, what: str) -> None:
        log.info("%s: %s by %s", self.server, what, self._caller(cmd)[0])

    # --- users --------------------------------------------------------------------------------------------

    def create_user(self, header: UserRequestHeader, cmd: RemotingCommand) -> RemotingCommand:
        _, password, user_type, _ = read_user_info(_body(cmd))
        user = self._store().create_user(header.username, password, user_type, self._caller(cmd)[1])
        self._changed(cmd, f"user {user.username} ({user.user_type.value}) created")
        return _ok(cmd)

    def update_user(self, header: UserRequestHeader, cmd: RemotingCommand) -> RemotingCommand:
        _, password, user_type, status = read_user_info(_body(cmd))
        user = self._store().update_user(header.username, password, user_type, status, self._caller(cmd)[1])
        changed = ", ".join(what for what, given in (("password", password), ("type", user_type),
                                                     ("status", status)) if given)
        self._changed(cmd, f"user {user.username} updated ({changed or 'nothing'}; now {user.user_type.value}, "
                           f"{user.user_status.value})")
        return _ok(cmd)

    def delete_user(self, header: UserRequestHeader, cmd: RemotingCommand) -> RemotingCommand:
        if self._store().delete_user(header.username, self._caller(cmd)[1]):
            self._changed(cmd, f"user {header.username.strip()} and its ACL deleted")
        return _ok(cmd)

    def get_user(self, header: UserRequestHeader, cmd: RemotingCommand) -> RemotingCommand:
        """RocketMQ: no such user is a success without a body."""
        if not header.username.strip():
            raise AuthError("the username can not be blank")
        user = self._store().get_user(header.username.strip())
        return _ok(cmd, _masked(user) if user is not None else None)

    def list_users(self, header: ListUsersRequestHeader, cmd: RemotingCommand) -> RemotingCommand:
        return _ok(cmd, [_masked(u) for u in self._store().list_users(header.filter.strip())])

    # --- ACLs -------------------------------------------------------------------------------------------

    def create_acl(self, header: AclRequestHeader, cmd: RemotingCommand) -> RemotingCommand:
        username = parse_subject(header.subject)
        policies = read_policies(_body(cmd))
        acl = self._store().create_acl(username, policies)
        given = sum(len(entries) for entries in policies.values())
        self._changed(cmd, f"ACL of {acl.subject} set ({given} entries given, "
                           f"{sum(len(e) for e in acl.policies.values())} now)")
        return _ok(cmd)

    update_acl = create_acl  # RocketMQ's updateAcl merges exactly as its createAcl does

    def delete_acl(self, header: DeleteAclRequestHeader, cmd: RemotingCommand) -> RemotingCommand:
        username = parse_subject(header.subject)
        resource = Resource.parse(header.resource) if header.resource.strip() else None
        policy_type = PolicyType.parse(header.policy_type.strip())
        self._store().delete_acl(username, policy_type, resource)
        what = f"{policy_type.value} entry {resource.key}" if resource is not None else "ACL"
        self._changed(cmd, f"{what} of User:{username} deleted")
        return _ok(cmd)

    def get_acl(self, header: AclRequestHeader, cmd: RemotingCommand) -> RemotingCommand:
        acl = self._store().get_acl(parse_subject(header.subject))
        return _ok(cmd, acl_info(acl) if acl is not None else None)

    def list_acls(self, header: ListAclsRequestHeader, cmd: RemotingCommand) -> RemotingCommand:
        acls = self._store().list_acls(header.subject_filter.strip(), header.resource_filter.strip())
        return _ok(cmd, [acl_info(a) for a in acls])

