"""The one check every remoting request passes before its processor (RocketMQ's ``PlainAccessValidator`` run as
a server RPC hook): global white address, account, account white address, signature, then the request code's
permissions. A refusal is answered ``NO_PERMISSION`` with a remark and logged (``RefusalLog``: identical refusals
from one host folded into one line per 10 s)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from txmq.acl.model import User
from txmq.acl.permissions import HALF_ACCOUNT, Needs, RequestNotReadable, Table, needs_of
from txmq.acl.signer import ACCESS_KEY, signature_matches
from txmq.acl.store import AuthStore
from txmq.remoting.codes import ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.refusals import RefusalLog
from txmq.remoting.transport import Connection, Handler, HandlerResult

log = logging.getLogger("txmq.acl")

def host_of(remote_address: str) -> str:
    return remote_address.rpartition(":")[0].strip("[]")


def _record_half_account(cmd: RemotingCommand, field: str, access_key: str) -> None:
    """Stamp the account that stores a half message into its properties (shown by ``tx show``)."""
    props = cmd.ext_fields.get(field, "")
    if props and not props.endswith("\x02"):
        props += "\x02"
    cmd.ext_fields[field] = f"{props}{HALF_ACCOUNT}\x01{access_key}\x02"


class AccessValidator:
    """Checks requests against the users and ACLs of one ``AuthStore`` and one permission table."""

    def __init__(self, store: AuthStore, table: Table, what: str) -> None:
        self.store = store
        self.table = table
        self.refusals = RefusalLog(log, f"{what} refused a request")

    def identify(self, host: str, access_key: str, check_signature: Callable[[User], bool]) -> User | str:
        """``AuthStore.identify``."""
        return self.store.identify(host, access_key, check_signature)

    def authorize(self, host: str, access_key: str, check_signature: Callable[[User], bool],
                  needs: Needs) -> User | str:
        """``identify``, then ``needs`` against the user's ACL."""
        user = self.store.identify(host, access_key, check_signature)
        if isinstance(user, str):
            return user
        why = self.store.refusal(user, needs.as_model(), host)
        return f"AccessKey {user.username}: {why}" if why else user

    def check(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """None when ``cmd`` may go on, else the NO_PERMISSION answer."""
        host = host_of(conn.remote_address)
        try:
            needs = needs_of(self.table, cmd)
        except RequestNotReadable as exc:
            return self._refuse(host, cmd, f"request code {cmd.code}: {exc}")
        result = self.authorize(host, cmd.ext_fields.get(ACCESS_KEY, ""),
                                lambda user: signature_matches(user.key, cmd),
                                needs)
        if isinstance(result, User):
            if needs.half_properties is not None:
                _record_half_account(cmd, needs.half_properties, result.username)
            return None
        return self._refuse(host, cmd, f"request code {cmd.code}: {result}")

    def _refuse(self, host: str, cmd: RemotingCommand, reason: str) -> RemotingCommand:
        self.refusals.refused(host, reason)
        return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION, remark=reason)

    def guard(self, handler: Handler) -> Handler:
        """``handler`` behind this validator."""

        def guarded(conn: Connection, cmd: RemotingCommand) -> HandlerResult:
            return self.check(conn, cmd) or handler(conn, cmd)

        return guarded
