"""The one check every request passes before its handler (RocketMQ's ``AuthenticationPipeline`` and
``AuthorizationPipeline``): who signed it (global white address, user, the user's white address, signature), then
what its declaration says it needs (``txmq.acl.model.Needs``) against that user's ACL, both through one
``AuthStore``. A refusal is answered ``NO_PERMISSION`` with a remark and logged (``RefusalLog``: identical
refusals from one host folded into one line per 10 s).

For remoting it is the ``RequestDispatcher``'s gate (``admit``, ``permit``); the gRPC interceptor calls
``identify`` and ``refusal`` with what it read of a call."""

from __future__ import annotations

import logging
from collections.abc import Callable

from txmq.acl.model import Needs, User
from txmq.acl.signer import ACCESS_KEY, signature_matches
from txmq.acl.store import AuthStore
from txmq.refusals import RefusalLog
from txmq.remoting.codes import ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.transport import Connection

log = logging.getLogger("txmq.acl")


AUTHENTICATION_FAILED = "authentication failed (an unknown user, a wrong signature or a disabled user)"


def host_of(remote_address: str) -> str:
    return remote_address.rpartition(":")[0].strip("[]")


_HOST = "aclHost"


def peer_host(conn: Connection) -> str:
    """``host_of`` the peer, worked out once per connection (``attrs``): every request asks twice."""
    host = conn.attrs.get(_HOST)
    if host is None:
        host = conn.attrs[_HOST] = host_of(conn.remote_address)
    return host


def told(access_key: str, why: str) -> str:
    """What a peer that is not authenticated is told: ``why`` when it gave no AccessKey; otherwise the same words for
    an unknown user, a wrong signature and a disabled user, so that nobody learns which access keys exist or are
    disabled by trying them (the server's log line says which it was)."""
    return f"AccessKey {access_key}: {AUTHENTICATION_FAILED}" if access_key else why


class AccessValidator:
    """Checks requests against the users and ACLs of one ``AuthStore``."""

    def __init__(self, store: AuthStore, what: str) -> None:
        self.store = store
        self.refusals = RefusalLog(log, f"{what} refused a request")

    def identify(self, host: str, access_key: str, check_signature: Callable[[User], bool]) -> User | str:
        """``AuthStore.identify``: the user, or why the request has none."""
        return self.store.identify(host, access_key, check_signature)

    def refusal(self, user: User, needs: Needs, host: str) -> str | None:
        """Why ``user`` may not do what ``needs`` says from ``host``, or None."""
        why = self.store.refusal(user, needs, host)
        return f"AccessKey {user.username}: {why}" if why else None

    # --- the remoting dispatcher's gate (txmq.remoting.registry.Gate) ---------------------------------------

    def admit(self, conn: Connection, cmd: RemotingCommand) -> User | RemotingCommand:
        host = peer_host(conn)
        access_key = cmd.ext_fields.get(ACCESS_KEY, "")
        user = self.identify(host, access_key, lambda u: signature_matches(u.key, cmd))
        return self._refuse(host, cmd, user, told(access_key, user)) if isinstance(user, str) else user

    def permit(self, conn: Connection, cmd: RemotingCommand, identity: User, needs: Needs) -> RemotingCommand | None:
        host = peer_host(conn)
        why = self.refusal(identity, needs, host)
        return None if why is None else self._refuse(host, cmd, why)

    def _refuse(self, host: str, cmd: RemotingCommand, why: str, answer: str | None = None) -> RemotingCommand:
        """Logs ``why``; answers NO_PERMISSION with ``answer`` (default: ``why``)."""
        self.refusals.refused(host, f"request code {cmd.code}: {why}")
        remark = f"request code {cmd.code}: {why if answer is None else answer}"
        return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION, remark=remark)
