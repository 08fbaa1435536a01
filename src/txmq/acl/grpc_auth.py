"""ACL on the RocketMQ 5 gRPC endpoint: a server interceptor that checks each call's ``authorization`` header
(``MQv2-HMAC-SHA1``, signed over ``x-mq-date-time``) against the broker's users and ACLs (``AuthStore``) and the
call's resources, before the servicer sees it. Refusals are answered as RocketMQ's proxy does, in the response's
``status`` (UNAUTHORIZED for a missing or bad credential, FORBIDDEN for a missing permission).

Beyond RocketMQ, as on remoting: a transactional send and EndTransaction need PUB on the producer group (for a
5.x producer, its topic); a Telemetry stream's publishing topics are kept only where the account may publish for
that group, so check-backs reach only the group's own accounts; a client id stays with the account that used it
first, so another account cannot read a victim's Telemetry stream by claiming its id.
"""

from __future__ import annotations

import collections
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from txmq.acl.model import Action, Needs, User
from txmq.acl.signer import GRPC_DATE_TIME, grpc_signature, parse_grpc_authorization
from txmq.acl.validator import AccessValidator
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb

CLIENT_ID = "x-mq-client-id"
_MAX_CLIENT_IDS = 65536


def _needs(method: str, req: Any) -> Needs:
    needs = Needs()
    if method == "SendMessage":
        for m in req.messages:
            needs.topic(m.topic.name, Action.PUB)
            if m.system_properties.message_type == pb.TRANSACTION:
                needs.group(m.topic.name, Action.PUB)  # a 5.x transaction's producer group is its topic
    elif method == "EndTransaction":
        # request.topic names the producer group the transaction service checks against the half's (for a
        # remoting half, its group rather than a topic): Pub on that group is what owning the half means
        needs.group(req.topic.name, Action.PUB)
    elif method == "RecallMessage":
        needs.topic(req.topic.name, Action.PUB)
    elif method not in ("QueryRoute", "Telemetry"):
        group = getattr(req, "group", None)
        needs.group(group.name if group is not None else "", Action.SUB)
        topic = getattr(req, "topic", None) or getattr(getattr(req, "message_queue", None), "topic", None)
        needs.topic(topic.name if topic is not None else "", Action.SUB)
    return needs


def _host(context: grpc.aio.ServicerContext) -> str:
    peer = context.peer() or ""
    kind, _, rest = peer.partition(":")
    return rest.rpartition(":")[0].strip("[]") if kind in ("ipv4", "ipv6") else peer


class AclInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, validator: AccessValidator) -> None:
        self.validator = validator
        self._owners: collections.OrderedDict[str, str] = collections.OrderedDict()  # client id -> access key

    def _authorize(self, method: str, metadata: dict[str, str], host: str, request: Any) -> User | pb.Status:
        auth = parse_grpc_authorization(metadata.get("authorization", ""))
        access_key, signature = auth or ("", "")
        date_time = metadata.get(GRPC_DATE_TIME, "")

        def signed(user: User) -> bool:
            expected = grpc_signature(user.key, date_time)
            return bool(date_time) and hmac.compare_digest(signature.upper().encode(), expected.encode())

        needs = _needs(method, request) if request is not None else Needs()
        result = self.validator.identify(host, access_key, signed)
        if isinstance(result, User):
            result = self.validator.refusal(result, needs, host) or result
        if isinstance(result, User):
            result = self._claim(metadata.get(CLIENT_ID, ""), result)
        if isinstance(result, User):
            return result
        reason = f"gRPC {method}: {result}"
        self.validator.refusals.refused(host, reason)
        code = pb.FORBIDDEN if result.startswith("AccessKey ") else pb.UNAUTHORIZED  # known account, not allowed
        return pb.Status(code=code, message=reason)

    def _claim(self, client_id: str, user: User) -> User | str:
        if not client_id:
            return user
        owner = self._owners.get(client_id)
        if owner is not None and owner != user.username:
            return f"AccessKey {user.username}: client id {client_id} belongs to another account"
        self._owners[client_id] = user.username
        self._owners.move_to_end(client_id)
        if len(self._owners) > _MAX_CLIENT_IDS:
            self._owners.popitem(last=False)
        return user

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        method = details.method.rpartition("/")[2]
        metadata = {str(k): str(v) for k, v in details.invocation_metadata or ()}
        response = spb.TelemetryCommand if method == "Telemetry" else getattr(spb, f"{method}Response")
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self._unary(method, metadata, response, handler.unary_unary),
                                                       handler.request_deserializer, handler.response_serializer)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._unary_stream(method, metadata, response, handler.unary_stream),
                handler.request_deserializer, handler.response_serializer)
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(self._telemetry(method, metadata, handler.stream_stream),
                                                         handler.request_deserializer, handler.response_serializer)
        return handler

    def _unary(self, method: str, metadata: dict[str, str], response: Any, inner: Any) -> Any:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            allowed = self._authorize(method, metadata, _host(context), request)
            if isinstance(allowed, pb.Status):
                return response(status=allowed)
            return await inner(request, context)
        return call

    def _unary_stream(self, method: str, metadata: dict[str, str], response: Any, inner: Any) -> Any:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            allowed = self._authorize(method, metadata, _host(context), request)
            if isinstance(allowed, pb.Status):
                yield response(status=allowed)
                return
            async for item in inner(request, context):
                yield item
        return call

    def _telemetry(self, method: str, metadata: dict[str, str], inner: Any) -> Any:
        async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            host = _host(context)
            allowed = self._authorize(method, metadata, host, None)
            if isinstance(allowed, pb.Status):
                yield spb.TelemetryCommand(status=allowed)
                return

            def may_publish_for(group: str, user: User = allowed) -> bool:
                return self.validator.store.refusal(user, Needs().group(group, Action.PUB), host) is None

            async for item in inner(_own_groups_only(requests, may_publish_for), context):
                yield item
        return call


async def _own_groups_only(requests: AsyncIterator[Any], may_publish_for: Callable[[str], bool]) -> AsyncIterator[Any]:
    """The stream's commands, with publishing topics the user may not publish for as a group left out of its
    settings: the endpoint sends a topic's check-backs to sessions that list it."""
    async for cmd in requests:
        if cmd.WhichOneof("command") == "settings" and cmd.settings.WhichOneof("pub_sub") == "publishing":
            topics = cmd.settings.publishing.topics
            kept = [(t.resource_namespace, t.name) for t in topics if may_publish_for(t.name)]
            if len(kept) != len(topics):
                del topics[:]
                for namespace, name in kept:
                    topics.add(resource_namespace=namespace, name=name)
        yield cmd
