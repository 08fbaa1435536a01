"""The one check every remoting request passes before its processor (RocketMQ's ``PlainAccessValidator`` run as
a server RPC hook): global white address, account, account white address, signature, then the request code's
permissions. A refusal is answered ``NO_PERMISSION`` with a remark and logged once (identical refusals from one
host are counted and logged at most once per ``LOG_EVERY_S``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from txmq.acl.config import WHITE_ACCOUNT, Account, AclFile
from txmq.acl.permissions import HALF_ACCOUNT, Needs, RequestNotReadable, Table, needs_of
from txmq.acl.signer import ACCESS_KEY, signature_matches
from txmq.remoting.codes import ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import Connection, Handler

log = logging.getLogger("txmq.acl")

LOG_EVERY_S = 10.0
LINES_PER_HOST = 20  # distinct refusals logged per host and LOG_EVERY_S (random access keys must not flood)


class RefusalLog:
    """One log line per kind of refusal per host and ``LOG_EVERY_S``, with the count of those not logged; at
    most ``LINES_PER_HOST`` lines per host in that time, the rest counted into the host's next line."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._last: dict[tuple[str, str], tuple[float, int]] = {}
        self._hosts: dict[str, tuple[float, int, int]] = {}  # host -> (window start, lines, not logged)

    def refused(self, host: str, reason: str) -> None:
        now = time.monotonic()
        key = (host, reason)
        last = self._last.get(key)
        if last is not None and now - last[0] < LOG_EVERY_S:
            self._last[key] = (last[0], last[1] + 1)
            return
        if len(self._last) > 10_000 or len(self._hosts) > 10_000:  # bounded, whatever a flood sends
            self._last.clear()
            self._hosts.clear()
        start, lines, hidden = self._hosts.get(host, (now, 0, 0))
        if now - start >= LOG_EVERY_S:
            start, lines = now, 0
        if lines >= LINES_PER_HOST:
            self._hosts[host] = (start, lines, hidden + 1)
            return
        more = f" (+{last[1]} like it since the last line)" if last and last[1] else ""
        more += f" (+{hidden} other refusals from this host not logged)" if hidden else ""
        log.warning("%s refused a request from %s: %s%s", self.what, host, reason, more)
        self._last[key] = (now, 0)
        self._hosts[host] = (start, lines + 1, 0)


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
        self.refusals = RefusalLog(what)

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

        def guarded(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | Awaitable[Any] | None:
            return self.check(conn, cmd) or handler(conn, cmd)

        return guarded
