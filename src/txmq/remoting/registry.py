"""The requests a remoting server serves, each declared once: its code, how it is read, what it needs, and its
handler (RocketMQ's processor table with 5.3's ``@RocketMQAction`` beside each request). No IO here.

A request is read once. ``RequestDispatcher`` takes each frame through the same steps: who sent it (the gate's
``admit``: signatures are over the raw fields, so this comes first, and an unauthenticated peer learns nothing,
not even which codes exist), which declaration its code has (none: refused), ``parse`` (the one reading of its
header and of whatever in its body decides what it does), the gate's ``permit`` of what ``needs`` says that
parsed request needs, and the handler, given that same parsed object. A handler never reads the raw ext fields,
so the request that was authorized is the request that runs.

``needs`` is opaque here (the ACL's ``Needs``): the remoting layer knows nothing of accounts or permissions.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from txmq.errors import InvalidMessageError, RemoteProtocolError
from txmq.refusals import RefusalLog
from txmq.remoting.codes import ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import Header
from txmq.remoting.transport import Connection, HandlerResult

log = logging.getLogger("txmq.remoting")

P = TypeVar("P")
H = TypeVar("H", bound=Header)

Parse = Callable[[RemotingCommand], P]
RequestHandler = Callable[[Connection, RemotingCommand, P], HandlerResult]



@dataclasses.dataclass(frozen=True, slots=True)
class RequestSpec(Generic[P]):
    """One served request code. ``malformed``: the response code for a request ``parse`` cannot read (sends
    answer MESSAGE_ILLEGAL, as RocketMQ's do; the rest SYSTEM_ERROR). ``stamp``, when given, records the identity
    the gate admitted (opaque here: the ACL's ``User``) in the parsed request, as the gate admitted it: the account
    that stores a half message, the user that changes users and ACLs. Never a name to look up again."""

    code: int
    parse: Parse[P]
    needs: Callable[[P], Any]
    handler: RequestHandler[P]
    malformed: int = ResponseCode.SYSTEM_ERROR
    stamp: Callable[[P, Any], None] | None = None


def header(cls: type[H]) -> Parse[H]:
    """The parse of a request that is its ext fields only."""

    def parse(cmd: RemotingCommand) -> H:
        return cls.from_ext(cmd.ext_fields)

    parse.__qualname__ = f"header({cls.__name__})"
    return parse


def no_header(cmd: RemotingCommand) -> None:
    """The parse of a request that carries nothing to read."""


class Processor(Protocol):
    """A processor declares its requests in one list beside its handlers (RocketMQ's ``registerProcessor``)."""

    def requests(self) -> list[RequestSpec[Any]]: ...


class RequestTable:
    """Every request code one server serves. Declaring a code twice is an error when the server is built."""

    def __init__(self, server: str) -> None:
        self.server = server  # named in REQUEST_CODE_NOT_SUPPORTED answers
        self._specs: dict[int, RequestSpec[Any]] = {}

    def add(self, spec: RequestSpec[Any]) -> None:
        if spec.code in self._specs:
            raise ValueError(f"{self.server}: request code {spec.code} is declared twice")
        self._specs[spec.code] = spec

    def register(self, processor: Processor) -> None:
        """Adds the requests ``processor`` declares."""
        for spec in processor.requests():
            self.add(spec)

    def get(self, code: int) -> RequestSpec[Any] | None:
        return self._specs.get(code)

    def __iter__(self) -> Iterator[RequestSpec[Any]]:
        return iter(sorted(self._specs.values(), key=lambda s: s.code))

    def __contains__(self, code: object) -> bool:
        return code in self._specs


class Gate(Protocol):
    """Access control as the dispatcher uses it (``txmq.acl.validator.AccessValidator``)."""

    def admit(self, conn: Connection, cmd: RemotingCommand) -> Any:
        """The request's identity, or its refusal as a ``RemotingCommand``."""

    def permit(self, conn: Connection, cmd: RemotingCommand, identity: Any, needs: Any) -> RemotingCommand | None:
        """None when ``identity`` has what ``needs`` asks for, else the refusal to answer."""


class RequestDispatcher:
    """The handler a ``RemotingServer`` calls: every request through the steps of this module. ``execute`` is
    the last step (the declared handler), which metrics may time (``txmq.metrics.rpc``): only requests that passed
    the gate and have a declaration reach it, so a peer's made-up codes create no series."""

    def __init__(self, table: RequestTable, gate: Gate | None = None) -> None:
        self.table = table
        self.gate = gate
        self.execute: Callable[[Connection, RemotingCommand, RequestSpec[Any], Any], HandlerResult] = _execute
        self._malformed = RefusalLog(log, f"{table.server} could not read a request")

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        gate = self.gate
        identity = None
        if gate is not None:
            identity = gate.admit(conn, cmd)
            if isinstance(identity, RemotingCommand):
                return identity
        spec = self.table.get(cmd.code)
        if spec is None:
            return RemotingCommand.response_to(
                cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f"request code {cmd.code} is not supported by {self.table.server}")
        try:
            parsed = spec.parse(cmd)
        except (RemoteProtocolError, InvalidMessageError) as exc:
            self._malformed.refused(conn.remote_address.rpartition(":")[0], f"request code {cmd.code}: {exc}")
            return RemotingCommand.response_to(cmd, spec.malformed, remark=f"bad request: {exc}")
        if gate is not None:
            refusal = gate.permit(conn, cmd, identity, spec.needs(parsed))
            if refusal is not None:
                return refusal
            if spec.stamp is not None:
                spec.stamp(parsed, identity)
        return self.execute(conn, cmd, spec, parsed)


def _execute(conn: Connection, cmd: RemotingCommand, spec: RequestSpec[Any], parsed: Any) -> HandlerResult:
    return spec.handler(conn, cmd, parsed)
