"""One gRPC call as the endpoint's interceptor (``txmq.acl.grpc_auth``) parsed it: its security headers, read once
from the metadata, and the account the ACL admitted. The servicer reads the client id and the account from this
object (``current_call``) and never from the raw metadata, so what was authorized is what executes.

``MethodTable``: what each ``MessagingService`` method needs, declared once on its handler (``@METHODS.declare``,
in ``service.py``); the interceptor refuses a method without a declaration.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from txmq.acl.model import Needs, User
from txmq.acl.signer import GRPC_DATE_TIME, parse_grpc_authorization
from txmq.grpc.convert import Code, GrpcStatusError

CLIENT_ID = "x-mq-client-id"
AUTHORIZATION = "authorization"
# Headers a duplicate of which is refused: the signature's, the client id, and every other ``x-mq-*`` header
# (session token, namespace, ...): two values of one header are two readings of one request.
_SECURITY_PREFIX = "x-mq-"


@dataclass(slots=True)
class GrpcCall:
    """A call's security headers, parsed once, and the account the ACL admitted it as (None with ACL off)."""

    client_id: str = ""
    access_key: str = ""  # the Credential of ``authorization`` (MQv2-HMAC-SHA1), "" when absent or not MQv2
    signature: str = ""
    date_time: str = ""  # x-mq-date-time, the signed content
    signed: bool = False  # an ``authorization`` header was sent
    host: str = ""  # the peer's address
    account: User | None = None

    @property
    def owner(self) -> str:
        """The access key the call's sessions belong to ("" with ACL off)."""
        return self.account.username if self.account is not None else ""


def parse_metadata(metadata: Iterable[tuple[str, Any]], host: str) -> GrpcCall:
    """The security headers of a call from ``host``; ``GrpcStatusError`` BAD_REQUEST when one is given more than
    once."""
    seen: dict[str, Any] = {}
    for key, value in metadata:  # grpcio gives keys lowercased, as str
        if key == AUTHORIZATION or key.startswith(_SECURITY_PREFIX):
            if key in seen:
                raise GrpcStatusError(Code.BAD_REQUEST, f"header {key} is given more than once")
            seen[key] = value
    call = GrpcCall(client_id=str(seen.get(CLIENT_ID, "")), date_time=str(seen.get(GRPC_DATE_TIME, "")), host=host)
    if AUTHORIZATION in seen:
        call.signed = True
        call.access_key, call.signature = parse_grpc_authorization(str(seen[AUTHORIZATION])) or ("", "")
    return call


_current: contextvars.ContextVar[GrpcCall] = contextvars.ContextVar("txmq_grpc_call")


def current_call() -> GrpcCall:
    """The call being served (each call runs in its own task, so its own context). LookupError outside one: a
    handler reached without the interceptor fails rather than serving an anonymous call."""
    return _current.get()


def enter_call(call: GrpcCall) -> None:
    """Make ``call`` the current call of this task (the interceptor, before the handler runs)."""
    _current.set(call)


NeedsOf = Callable[[Any], Needs]
_Handler = TypeVar("_Handler", bound=Callable[..., Any])


class MethodTable:
    """Each method's permission, as ``Needs`` of its request (for Telemetry: of the stream's opening, no request)."""

    def __init__(self) -> None:
        self.needs: dict[str, NeedsOf] = {}

    def declare(self, needs: NeedsOf) -> Callable[[_Handler], _Handler]:
        def register(handler: _Handler) -> _Handler:
            name = handler.__name__
            if name in self.needs:
                raise ValueError(f"gRPC method {name} is declared twice")
            self.needs[name] = needs
            return handler
        return register
