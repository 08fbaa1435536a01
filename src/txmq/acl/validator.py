"""The one check every request passes before its handler (RocketMQ's ``AuthenticationPipeline`` and
``AuthorizationPipeline``): who signed it (global white address, account, account white address, signature), then
what its declaration says it needs (``txmq.acl.model.Needs``) against that account's policies. A refusal is
answered ``NO_PERMISSION`` with a remark and logged (``RefusalLog``: identical refusals from one host folded into
one line per 10 s).

For remoting it is the ``RequestDispatcher``'s gate (``admit``, ``permit``); the gRPC interceptor calls
``identify`` and ``refusal`` with what it read of a call."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from txmq.acl.config import WHITE_ACCOUNT, Account, AclFile
from txmq.acl.model import Needs
from txmq.acl.signer import ACCESS_KEY, signature_matches
from txmq.remoting.codes import ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.refusals import RefusalLog
from txmq.remoting.transport import Connection

log = logging.getLogger("txmq.acl")


def host_of(remote_address: str) -> str:
    return remote_address.rpartition(":")[0].strip("[]")


class AccessValidator:
    """Checks requests against the accounts of one ``plain_acl.yml``."""

    def __init__(self, acl_file: AclFile, what: str) -> None:
        self.acl_file = acl_file
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

    @staticmethod
    def refusal(account: Account, needs: Needs, host: str) -> str | None:
        """Why ``account`` may not do what ``needs`` says from ``host``, or None."""
        why = account.refusal(needs, host)
        return f"AccessKey {account.access_key}: {why}" if why else None

    # --- the remoting dispatcher's gate (txmq.remoting.registry.Gate) ---------------------------------------

    def admit(self, conn: Connection, cmd: RemotingCommand) -> Account | RemotingCommand:
        host = host_of(conn.remote_address)
        account = self.identify(host, cmd.ext_fields.get(ACCESS_KEY, ""), lambda acc: signature_matches(acc.key, cmd))
        return self._refuse(host, cmd, account) if isinstance(account, str) else account

    def permit(self, conn: Connection, cmd: RemotingCommand, identity: Account, needs: Needs) -> RemotingCommand | None:
        host = host_of(conn.remote_address)
        why = self.refusal(identity, needs, host)
        return None if why is None else self._refuse(host, cmd, why)

    @staticmethod
    def account(identity: Account) -> str:
        return identity.access_key

    def _refuse(self, host: str, cmd: RemotingCommand, why: str) -> RemotingCommand:
        reason = f"request code {cmd.code}: {why}"
        self.refusals.refused(host, reason)
        return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION, remark=reason)
