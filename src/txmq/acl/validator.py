"""The one check every remoting request passes before its processor (RocketMQ's ``PlainAccessValidator`` run as
a server RPC hook): global white address, account, account white address, signature, then the request code's
permissions. A refusal is answered ``NO_PERMISSION`` with a remark and logged (``RefusalLog``: identical refusals
from one host folded into one line per 10 s)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from txmq.acl.config import WHITE_ACCOUNT, Account, AclFile
from txmq.acl.permissions import HALF_ACCOUNT, Needs, RequestNotReadable, Table, needs_of
from txmq.acl.signer import ACCESS_KEY, signature_matches
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
    """Checks requests against the accounts of one ``plain_acl.yml`` and one permission table."""

    def __init__(self, acl_file: AclFile, table: Table, what: str) -> None:
        self.acl_file = acl_file
        self.table = table
        self.refusals = RefusalLog(log, f"{what} refused a request")

    def identify(self, host: str, access_key: str, check_signature: Callable[[Account], bool]) -> Account | str:
        """The account of a request (``WHITE_ACCOUNT`` for a global white address), or why it has none.
        ``check_signature(account)`` tells whether the request's signature is the account's."""
        config = self.acl_file.current(time.monotonic())
        if config.globally_white(host):
            return WHITE_ACCOUNT
        if not access_key:
            return "no AccessKey (credentials are required)"
        account = config.accounts.get(access_key)
        if account is None:
            return f"no account for AccessKey {access_key}"
        white = account.white_remote_address
        if not (white is not None and white.match(host)) and not check_signature(account):
            return f"signature check failed for AccessKey {access_key}"
        return account

    def authorize(self, host: str, access_key: str, check_signature: Callable[[Account], bool],
                  needs: Needs) -> Account | str:
        """``identify``, then ``needs`` against the account."""
        account = self.identify(host, access_key, check_signature)
        if isinstance(account, str):
            return account
        why = needs.refusal(account)
        return f"AccessKey {account.access_key}: {why}" if why else account

    def check(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """None when ``cmd`` may go on, else the NO_PERMISSION answer."""
        host = host_of(conn.remote_address)
        try:
            needs = needs_of(self.table, cmd)
        except RequestNotReadable as exc:
            return self._refuse(host, cmd, f"request code {cmd.code}: {exc}")
        result = self.authorize(host, cmd.ext_fields.get(ACCESS_KEY, ""),
                                lambda acc: signature_matches(acc.key, cmd),
                                needs)
        if isinstance(result, Account):
            if needs.half_properties is not None:
                _record_half_account(cmd, needs.half_properties, result.access_key)
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
