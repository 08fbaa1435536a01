"""The RocketMQ 5 gRPC endpoint's interceptor: every call passes here before the servicer sees it.

* The method must be declared (``txmq.grpc.call.MethodTable``, filled on the servicer's handlers): a method
  without a declaration is refused (PERMISSION_DENIED), whether ACL is on or not.
* The metadata is parsed once into a ``GrpcCall``; a security header given twice is refused (BAD_REQUEST). The
  handler reads that same object (``current_call``), never the raw metadata.
* With ACL on: the ``authorization`` header (``MQv2-HMAC-SHA1``, signed over ``x-mq-date-time``) against the
  broker's users and ACLs (``AuthStore``), the date within ``grpcSignatureWindowSeconds`` of the broker's clock (a
  signed request cannot be replayed later), and the method's declared ``Needs`` of the parsed request. Refusals are
  answered as RocketMQ's proxy does, in the response's ``status`` (UNAUTHORIZED for a missing, bad or stale
  credential, FORBIDDEN for a missing permission).

A Telemetry stream's publishing topics are kept only where the account may publish for that group, so
check-backs reach only the group's own accounts.
"""

from __future__ import annotations

import hmac
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from txmq.acl.model import Action, Needs, User
from txmq.acl.signer import GRPC_DATE_TIME, grpc_signature
from txmq.acl.validator import AccessValidator, told
from txmq.broker.config import BrokerConfig
from txmq.grpc.call import GrpcCall, MethodTable, NeedsOf, enter_call, parse_metadata
from txmq.grpc.convert import GrpcStatusError, status
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.telemetry import TOPICS_PER_SETTINGS
from txmq.refusals import RefusalLog

log = logging.getLogger("txmq.grpc")

SERVICE = spb.DESCRIPTOR.services_by_name["MessagingService"]
_PREFIX = f"/{SERVICE.full_name}/"
_RESPONSES: dict[str, Any] = {m.name: getattr(spb, m.output_type.name) for m in SERVICE.methods}
DEFAULT_SIGNATURE_WINDOW_S = BrokerConfig.grpc_signature_window_seconds  # 15 minutes
_DATE_TIME = re.compile(r"[0-9]{8}T[0-9]{6}Z")  # the clients' yyyyMMdd'T'HHmmss'Z', UTC


def _host(context: grpc.aio.ServicerContext) -> str:
    peer = context.peer() or ""
    kind, _, rest = peer.partition(":")
    return rest.rpartition(":")[0].strip("[]") if kind in ("ipv4", "ipv6") else peer


def date_time_skew(date_time: str, now: float) -> float | None:
    """Seconds from ``x-mq-date-time`` to ``now`` (wall clock), or None when it is not a valid date."""
    if not _DATE_TIME.fullmatch(date_time):
        return None
    try:
        signed_at = datetime.strptime(date_time, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return now - signed_at.timestamp()


class CallInterceptor(grpc.aio.ServerInterceptor):
    """``methods``: the servicer's declarations; ``validator``: the broker's ACL (None when ``aclEnable`` is off);
    ``signature_window_s``: how far a signed request's date may be from the broker's clock, either way.

    Each method's wrapped handler is built once, at its first call: a call costs its admission, no closure."""

    def __init__(self, methods: MethodTable, validator: AccessValidator | None,
                 signature_window_s: float = DEFAULT_SIGNATURE_WINDOW_S) -> None:
        self.methods = methods
        self.validator = validator
        self.signature_window_s = signature_window_s
        self.refusals = validator.refusals if validator is not None else RefusalLog(log, "gRPC endpoint refused a call")
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}  # by path: only paths the server serves

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        wrapped = self._handlers.get(details.method)
        if wrapped is None:
            wrapped = self._handlers[details.method] = self._wrap(details.method, handler)
        return wrapped

    def _wrap(self, path: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        method = path[len(_PREFIX):] if path.startswith(_PREFIX) else ""
        needs_of = self.methods.needs.get(method) if method in _RESPONSES else None
        if needs_of is None:
            return _refusing(handler, f"{path} has no declared permission")
        response = _RESPONSES[method]
        read = _tolerant(handler.request_deserializer)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self._unary(method, needs_of, response, handler.unary_unary),
                                                       read, handler.response_serializer)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._unary_stream(method, needs_of, response, handler.unary_stream), read, handler.response_serializer)
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(self._telemetry(method, needs_of, handler.stream_stream),
                                                         read, handler.response_serializer)
        return _refusing(handler, f"{path}: a client-streaming call is not served")

    # --- admission ---------------------------------------------------------------------------------------

    def _admit(self, method: str, needs_of: NeedsOf, request: Any,
               context: grpc.aio.ServicerContext) -> GrpcCall | pb.Status:
        """The call, parsed once, with its host and account; or the status that refuses it."""
        host = _host(context)
        if isinstance(request, Malformed):
            return self._refuse(host, method, pb.BAD_REQUEST, request.why)
        try:
            call = parse_metadata(context.invocation_metadata() or (), host)
        except GrpcStatusError as exc:
            return self._refuse(host, method, exc.code, exc.message)
        if self.validator is None:
            return call
        if call.signed:
            stale = self._stale(call.date_time)
            if stale is not None:
                return self._refuse(host, method, pb.UNAUTHORIZED, stale)

        def signed(user: User) -> bool:
            expected = grpc_signature(user.key, call.date_time)
            return bool(call.date_time) and hmac.compare_digest(call.signature.upper().encode(), expected.encode())

        user = self.validator.identify(host, call.access_key, signed)
        if isinstance(user, str):
            return self._refuse(host, method, pb.UNAUTHORIZED, user, told(call.access_key, user))
        why = self.validator.refusal(user, needs_of(request), host)
        if why is not None:
            return self._refuse(host, method, pb.FORBIDDEN, why)  # a known user, not allowed
        return replace(call, account=user)

    def _stale(self, date_time: str) -> str | None:
        """Why a signed request's date is refused, or None. The wall clock: a date is a timestamp."""
        skew = date_time_skew(date_time, time.time())
        if skew is None:
            return f"header {GRPC_DATE_TIME} {date_time[:40]!r} is not a date (yyyyMMdd'T'HHmmss'Z')"
        if abs(skew) > self.signature_window_s:
            when = "old" if skew > 0 else "ahead of the broker's clock"
            return (f"header {GRPC_DATE_TIME} {date_time} is {abs(skew):.0f} s {when}, beyond "
                    f"grpcSignatureWindowSeconds ({self.signature_window_s:g})")
        return None

    def _refuse(self, host: str, method: str, code: int, why: str, answer: str | None = None) -> pb.Status:
        """Logs ``why``; answers ``code`` with ``answer`` (default: ``why``)."""
        self.refusals.refused(host, f"gRPC {method}: {why}")
        return status(code, f"gRPC {method}: {why if answer is None else answer}")

    # --- the handlers, behind admission ------------------------------------------------------------------

    def _unary(self, method: str, needs_of: NeedsOf, response: Any, inner: Any) -> Any:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            admitted = self._admit(method, needs_of, request, context)
            if isinstance(admitted, pb.Status):
                return response(status=admitted)
            enter_call(admitted)
            return await inner(request, context)
        return call

    def _unary_stream(self, method: str, needs_of: NeedsOf, response: Any, inner: Any) -> Any:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            admitted = self._admit(method, needs_of, request, context)
            if isinstance(admitted, pb.Status):
                yield response(status=admitted)
                return
            enter_call(admitted)
            async for item in inner(request, context):
                yield item
        return call

    def _telemetry(self, method: str, needs_of: NeedsOf, inner: Any) -> Any:
        async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            admitted = self._admit(method, needs_of, None, context)
            if isinstance(admitted, pb.Status):
                yield spb.TelemetryCommand(status=admitted)
                return
            enter_call(admitted)
            refused: list[pb.Status] = []  # a command that did not parse ends the stream with this status
            requests = self._well_formed(method, requests, admitted.host, refused)
            if admitted.account is not None and self.validator is not None:
                user, store, host = admitted.account, self.validator.store, admitted.host

                def may_publish_for(group: str) -> bool:
                    return store.refusal_now(user, Needs().group(group, Action.PUB), host) is None

                requests = _own_groups_only(requests, may_publish_for)
            async for item in inner(requests, context):
                yield item
            if refused:
                yield spb.TelemetryCommand(status=refused[0])
        return call


    async def _well_formed(self, method: str, requests: AsyncIterator[Any], host: str,
                           refused: list[pb.Status]) -> AsyncIterator[Any]:
        """A stream's commands up to one that did not parse: the reading ends there, the refusal in ``refused``."""
        async for cmd in requests:
            if isinstance(cmd, Malformed):
                refused.append(self._refuse(host, method, pb.BAD_REQUEST, cmd.why))
                return
            yield cmd


class Malformed:
    """A request whose bytes are not the method's protobuf: the call answers BAD_REQUEST, as for any bad request,
    in one folded log line per host (grpcio logs a traceback for each exception its deserializer raises)."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def _tolerant(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any]:
    """``deserialize``, answering a ``Malformed`` for bytes that do not parse."""
    def read(data: bytes) -> Any:
        try:
            return deserialize(data) if deserialize is not None else data
        except DecodeError as exc:
            return Malformed(f"the request is not a valid protobuf message: {exc}")
    return read


def _refusing(handler: grpc.RpcMethodHandler, why: str) -> grpc.RpcMethodHandler:
    """``handler``'s kind of handler, answering PERMISSION_DENIED to every call (fail closed)."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)

    make = (grpc.unary_unary_rpc_method_handler if handler.unary_unary is not None
            else grpc.unary_stream_rpc_method_handler if handler.unary_stream is not None
            else grpc.stream_unary_rpc_method_handler if handler.stream_unary is not None
            else grpc.stream_stream_rpc_method_handler)
    return make(refuse, handler.request_deserializer, handler.response_serializer)


async def _own_groups_only(requests: AsyncIterator[Any], may_publish_for: Callable[[str], bool]) -> AsyncIterator[Any]:
    """The stream's commands, with publishing topics the user may not publish for as a group left out of its
    settings: the endpoint sends a topic's check-backs to sessions that list it. A Settings naming more topics than
    the endpoint takes goes on as it is, unread: the endpoint refuses it whole."""
    async for cmd in requests:
        if cmd.WhichOneof("command") == "settings" and cmd.settings.WhichOneof("pub_sub") == "publishing" \
                and len(cmd.settings.publishing.topics) <= TOPICS_PER_SETTINGS:
            topics = cmd.settings.publishing.topics
            kept = [(t.resource_namespace, t.name) for t in topics if may_publish_for(t.name)]
            if len(kept) != len(topics):
                del topics[:]
                for namespace, name in kept:
                    topics.add(resource_namespace=namespace, name=name)
        yield cmd
