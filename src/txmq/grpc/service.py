"""``apache.rocketmq.v2.MessagingService`` as an adapter of the broker core (``txmq.broker.core``): each call turns
protobuf into the core's calls the remoting processors make too (sends, pulls, pop, retries and dead letters),
and answers with a ``Status``: a core ``Refusal`` in gRPC's code (``REFUSAL_CODES``), never a crash (an
unexpected error answers INTERNAL_SERVER_ERROR and is logged).

Routes name the member of this broker's group that serves it (``group_route``). Topics follow the broker's
``autoCreateTopicEnable``: when it is off, an unknown topic answers TOPIC_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
import zlib
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import grpc
from google.protobuf import duration_pb2

from txmq.acl.model import Action, Needs
from txmq.broker.core.pop import ReceiptHandle
from txmq.broker.core.refusal import Refusal
from txmq.broker.core.send import message_kind
from txmq.broker.timer import RecallError
from txmq.broker.transaction.state import Outcome
from txmq.cancel import cancel_and_wait
from txmq.errors import InvalidMessageError, StoreError
from txmq.filter import ExpressionType, FilterRefused, MessageFilter, build_filter
from txmq.grpc.call import CLIENT_ID, MethodTable, current_call
from txmq.grpc.convert import (
    PUT_STATUS_CODES,
    STATUS_OK,
    TIMER_DELIVER_MS,
    BornHosts,
    Code,
    GrpcStatusError,
    bounded_ms,
    decode_body,
    delivery_ms,
    duration,
    from_pb_message,
    ms_of_timestamp,
    now_ms,
    parse_transaction_id,
    refusal_status,
    status,
    timestamp_ms,
    to_pb_message,
    transaction_id,
)
from txmq.grpc.group_route import GroupRoute
from txmq.grpc.protocol import definition_pb2 as pb
from txmq.grpc.protocol import service_pb2 as spb
from txmq.grpc.protocol import service_pb2_grpc
from txmq.grpc.telemetry import ClientSession, ClientSessions
from txmq.message import MessageConst, MessageExt, create_uniq_id, decode_message
from txmq.refusals import RefusalLog
from txmq.remoting.codes import ResponseCode
from txmq.store import GetMessageStatus
from txmq.topic import AUTO_CREATE_TOPIC_KEY_TOPIC, PermName, TopicConfig, check_consumer_group, check_topic

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

log = logging.getLogger("txmq.grpc")
_REFUSED = RefusalLog(log, "gRPC endpoint refused a request")

DEFAULT_INVISIBLE_MS = 60_000
DEFAULT_POLL_MS = 20_000
# Messages one receive delivers at most, as RocketMQ's proxy pops (ProxyUtils.MAX_MSG_NUMS_FOR_POP_REQUEST): a
# larger batch is cut to it; also the receive batch consumers are told in their settings.
MAX_RECEIVE_BATCH = 32
MAX_PULL_BATCH = 256
CONSUMER_BACKOFF_MS = (1000, 5000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
                       480_000, 540_000, 600_000, 1_200_000, 1_800_000)
ACCEPTED_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)

_END_CODES: dict[int, int] = {
    ResponseCode.SUCCESS: Code.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.TRANSACTION_SHOULD_COMMIT: Code.PRECONDITION_FAILED,
    ResponseCode.TRANSACTION_SHOULD_ROLLBACK: Code.PRECONDITION_FAILED,
    ResponseCode.SYSTEM_ERROR: Code.INVALID_TRANSACTION_ID,
}


@dataclass(frozen=True, slots=True)
class _CreateFrom:
    """A 5.x send names no topic to create its own from: TBW102, with the broker's queue count."""

    default_topic: str = AUTO_CREATE_TOPIC_KEY_TOPIC
    default_topic_queue_nums: int | None = None


_AUTO_CREATE = _CreateFrom()


class _Entry(Protocol):
    """A result entry of a request with several (a send's, an ack's): its status is all ``_overall_status`` reads."""

    @property
    def status(self) -> pb.Status: ...


# What each method needs, declared on its handler: the interceptor (``txmq.acl.grpc_auth``) authorizes the parsed
# request against it before the handler runs, and refuses a method that has no declaration.
METHODS = MethodTable()


def _route_needs(r: spb.QueryRouteRequest) -> Needs:
    """Pub, Sub or Get on the topic (a producer, a consumer or a tool of it), as the remoting route."""
    return Needs().topic(r.topic.name, Action.PUB, Action.SUB, Action.GET)


def _consumer_needs(r: Any) -> Needs:
    """Sub on the consumer group and on the topic."""
    return Needs().group(r.group.name, Action.SUB).topic(r.topic.name, Action.SUB)


def _queue_consumer_needs(r: Any) -> Needs:
    """Sub on the consumer group and on the queue's topic."""
    return Needs().group(r.group.name, Action.SUB).topic(r.message_queue.topic.name, Action.SUB)


def _group_needs(r: Any) -> Needs:
    """Sub on the group it names (a consumer's; a producer names none)."""
    return Needs().group(r.group.name, Action.SUB)


def _queue_topic_needs(r: spb.QueryOffsetRequest) -> Needs:
    """Sub on the queue's topic."""
    return Needs().topic(r.message_queue.topic.name, Action.SUB)


def _end_needs(r: spb.EndTransactionRequest) -> Needs:
    """Pub on the producer group its ``topic`` names: the transaction service checks it against the half's own
    (a 5.x producer's group is its topic; a remoting half's, its group)."""
    return Needs().group(r.topic.name, Action.PUB)


def _telemetry_needs(_: object) -> Needs:
    """Any authenticated user; the publishing topics of its settings it may not publish for as a group are left out,
    so its session gets no check-backs for them."""
    return Needs()


def _recall_needs(r: spb.RecallMessageRequest) -> Needs:
    """Pub on the topic."""
    return Needs().topic(r.topic.name, Action.PUB)


def _send_needs(request: spb.SendMessageRequest) -> Needs:
    """Pub on each message's topic; a transactional one also Pub on its producer group, for a 5.x producer its
    topic (the group ``_send_one`` gives the half)."""
    needs = Needs()
    for m in request.messages:
        needs.topic(m.topic.name, Action.PUB)
        if m.system_properties.message_type == pb.TRANSACTION:
            needs.group(m.topic.name, Action.PUB)
    return needs


def _receipt_handle(text: str, topic: str) -> ReceiptHandle:
    """The handle of a request about ``topic``; INVALID_RECEIPT_HANDLE when malformed (``ReceiptHandle.decode``
    refuses it) or of another topic."""
    handle = ReceiptHandle.decode(text)
    if handle.topic != topic:
        raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, "receipt handle is for another topic")
    return handle


def _group(resource: pb.Resource) -> str:
    """A consumer group's name, checked as RocketMQ checks it: ILLEGAL_CONSUMER_GROUP when missing or illegal."""
    try:
        check_consumer_group(resource.name)
    except InvalidMessageError as exc:
        raise GrpcStatusError(Code.ILLEGAL_CONSUMER_GROUP, str(exc)) from None
    return resource.name


def _overall_status(overall: pb.Status, entries: Sequence[_Entry], what: str) -> None:
    """Set ``overall``, the status of a request with one result per entry: theirs when they agree, else
    MULTIPLE_RESULTS."""
    first = entries[0].status
    for entry in entries:
        if entry.status.code != first.code:
            overall.CopyFrom(status(Code.MULTIPLE_RESULTS, f"the {what} had different results"))
            return
    overall.CopyFrom(first)


def _refusal(exc: Exception, what: str) -> pb.Status:
    """The status that answers a handler's exception (called in its ``except``): a ``GrpcStatusError``'s own; a
    core refusal's code; BAD_REQUEST for a rule the client broke (its fault: a log line folded per host, as a client
    may repeat it at will); INTERNAL_SERVER_ERROR for anything else (a bug must not kill the endpoint: answered and
    logged with its traceback)."""
    if isinstance(exc, GrpcStatusError):
        return status(exc.code, exc.message)
    if isinstance(exc, Refusal):
        return refusal_status(exc)
    if isinstance(exc, InvalidMessageError):
        _REFUSED.refused(current_call().host, f"{what}: {exc}")
        return status(Code.BAD_REQUEST, str(exc))
    log.exception("gRPC %s failed", what)
    return status(Code.INTERNAL_SERVER_ERROR, f"{what} failed: {exc}")


def _scheme(host: str) -> pb.AddressScheme:
    """The address scheme of an endpoint's host: the clients open ``ipv4:``/``ipv6:`` channels to a literal and
    ``dns:`` ones to a name (brokerIP1 may be a host name); gRPC refuses a name under the IPv4 scheme."""
    try:
        return pb.IPv4 if ipaddress.ip_address(host).version == 4 else pb.IPv6
    except ValueError:
        return pb.DOMAIN_NAME


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, broker: BrokerController, sessions: ClientSessions, endpoint: tuple[str, int]) -> None:
        self.broker = broker
        self.sessions = sessions
        self.endpoint = endpoint
        self.core = broker.core
        self.group_route = GroupRoute(broker)
        self.born_hosts = BornHosts()

    # --- routes ------------------------------------------------------------------------------------------

    def _topic(self, name: str, *, planned: bool = False) -> TopicConfig:
        """The topic a request names; ``planned``: an unknown one's config as its first send will create it, not
        stored (``TopicService.find``: a route lookup creates nothing)."""
        cfg = self.core.topics.find(name, planned=planned)
        if isinstance(cfg, Refusal):
            raise cfg
        return cfg

    async def _server_of(self, cfg: TopicConfig) -> tuple[tuple[str, int], int]:
        """The gRPC endpoint that serves ``cfg``'s topic for this group, and the perm its queues are routed with, as
        the name servers have it: this broker and its own perm, less what the name server routes it without (a
        ``wipeWritePerm``), unless it is a slave whose master the name server lists (then the master's endpoint and
        the perm the name server routes it with; the slave itself, without write, once it is gone)."""
        own = PermName.within(cfg.perm, self.broker.core.permission)
        if self.broker.config.is_slave:
            master = await self.group_route.master_endpoint(cfg.topic_name)
            if master is not None:
                return master
            return self.endpoint, own & ~PermName.PERM_WRITE  # a slave refuses sends (HA_NOT_AVAILABLE)
        routed = await self.group_route.routed_perm(cfg.topic_name)
        return self.endpoint, own if routed is None else own & routed

    async def _queues_pb(self, cfg: TopicConfig, queue_ids: Iterable[int]) -> list[pb.MessageQueue]:
        (host, port), perm = await self._server_of(cfg)
        readable, writable = PermName.is_readable(perm), PermName.is_writeable(perm)
        permission = pb.READ_WRITE if readable and writable else pb.READ if readable else \
            pb.WRITE if writable else pb.NONE
        # Broker id 0 from every member, as RocketMQ's proxy answers: the official clients read only from id 0.
        broker = pb.Broker(name=self.broker.config.broker_name, id=0,
                           endpoints=pb.Endpoints(scheme=_scheme(host), addresses=[pb.Address(host=host, port=port)]))
        return [pb.MessageQueue(topic=pb.Resource(name=cfg.topic_name), id=q, permission=permission, broker=broker,
                                accept_message_types=ACCEPTED_TYPES) for q in queue_ids]

    # a route creates nothing: an unknown topic's route is the one its first send (Pub) will create it with
    @METHODS.declare(_route_needs)
    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Any) -> spb.QueryRouteResponse:
        try:
            cfg = self._topic(request.topic.name, planned=True)
            queues = await self._queues_pb(cfg, range(max(cfg.read_queue_nums, cfg.write_queue_nums)))
            return spb.QueryRouteResponse(status=status(), message_queues=queues)
        except Exception as exc:
            return spb.QueryRouteResponse(status=_refusal(exc, "QueryRoute"))

    @METHODS.declare(_consumer_needs)
    async def QueryAssignment(self, request: spb.QueryAssignmentRequest,
                              context: Any) -> spb.QueryAssignmentResponse:
        try:
            cfg = self._topic(request.topic.name)
            _group(request.group)
            # One assignment for the whole broker: a receive pops from every queue of the topic (as the proxy).
            mq, = await self._queues_pb(cfg, (-1,))
            if mq.permission not in (pb.READ, pb.READ_WRITE):  # the topic or the broker does not read: as the proxy
                return spb.QueryAssignmentResponse(status=status(Code.FORBIDDEN, "no readable queue"))
            return spb.QueryAssignmentResponse(status=status(), assignments=[pb.Assignment(message_queue=mq)])
        except Exception as exc:
            return spb.QueryAssignmentResponse(status=_refusal(exc, "QueryAssignment"))

    # --- clients -----------------------------------------------------------------------------------------

    @METHODS.declare(_group_needs)
    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any) -> spb.HeartbeatResponse:
        call = current_call()
        if not call.client_id:
            return spb.HeartbeatResponse(status=status(Code.CLIENT_ID_REQUIRED, f"header {CLIENT_ID} missing"))
        try:
            s = self.sessions.get(call.owner, call.client_id, call.host)
            if request.client_type:
                s.client_type = request.client_type
            if request.HasField("group") and request.group.name:
                s.group = _group(request.group)
        except GrpcStatusError as exc:
            return spb.HeartbeatResponse(status=status(exc.code, exc.message))
        return spb.HeartbeatResponse(status=status())

    @METHODS.declare(_group_needs)
    async def NotifyClientTermination(self, request: spb.NotifyClientTerminationRequest,
                                      context: Any) -> spb.NotifyClientTerminationResponse:
        call = current_call()
        if call.client_id:
            self.sessions.remove(call.owner, call.client_id)
        return spb.NotifyClientTerminationResponse(status=status())

    def _settings_reply(self, settings: pb.Settings) -> pb.Settings:
        out = pb.Settings()
        out.CopyFrom(settings)
        kind = settings.client_type
        if kind in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER, pb.LITE_PUSH_CONSUMER, pb.LITE_SIMPLE_CONSUMER):
            sub = out.subscription
            sub.fifo = False  # order is kept per message group on the broker side in any case
            # the broker's, not what the client proposed: as RocketMQ's proxy answers
            sub.receive_batch_size = MAX_RECEIVE_BATCH
            sub.long_polling_timeout.CopyFrom(duration(self._max_poll_ms))
            out.backoff_policy.CopyFrom(pb.RetryPolicy(
                max_attempts=self.core.pop.max_delivery_attempts,
                customized_backoff=pb.CustomizedBackoff(next=[duration(ms) for ms in CONSUMER_BACKOFF_MS])))
        else:
            pub = out.publishing
            pub.max_body_size = self.broker.config.store.max_message_size
            pub.validate_message_type = False
            out.backoff_policy.CopyFrom(pb.RetryPolicy(
                max_attempts=self.broker.config.grpc_client_producer_max_attempts,
                exponential_backoff=pb.ExponentialBackoff(initial=duration(10), max=duration(1000), multiplier=2.0)))
        return out

    def _settings_answer(self, session: ClientSession, settings: pb.Settings, host: str) -> spb.TelemetryCommand:
        """The answer to a Settings a client's stream sent, kept in its session: its publishing topics and consumer
        group checked as RocketMQ's proxy checks them (ILLEGAL_TOPIC, ILLEGAL_CONSUMER_GROUP: nothing kept), and its
        topics counted against the sessions' bounds (``ClientSessions.publish``)."""
        kind = settings.WhichOneof("pub_sub")
        try:
            if kind == "publishing":
                topics = settings.publishing.topics
                self.sessions.check_named(len(topics), host)
                for t in topics:
                    check_topic(t.name)
                self.sessions.publish(session, frozenset(t.name for t in topics), host)
            elif kind == "subscription" and settings.subscription.group.name:
                _group(settings.subscription.group)
        except InvalidMessageError as exc:
            return spb.TelemetryCommand(status=status(Code.ILLEGAL_TOPIC, str(exc)))
        except GrpcStatusError as exc:
            return spb.TelemetryCommand(status=status(exc.code, exc.message))
        if settings.HasField("client_type"):
            session.client_type = settings.client_type
        if settings.HasField("user_agent"):
            session.language = settings.user_agent.language
        if kind == "subscription" and settings.subscription.group.name:
            session.group = settings.subscription.group.name
        return spb.TelemetryCommand(status=status(), settings=self._settings_reply(settings))

    # opening the stream needs a valid signature; the publishing topics of its settings are kept only where the
    # account may publish for them as a group (``txmq.acl.grpc_auth``), so check-backs reach the group's own accounts
    @METHODS.declare(_telemetry_needs)
    async def Telemetry(self, request_iterator: AsyncIterator[spb.TelemetryCommand],
                        context: Any) -> AsyncIterator[spb.TelemetryCommand]:
        call = current_call()
        cid = call.client_id
        if not cid:
            yield spb.TelemetryCommand(status=status(Code.CLIENT_ID_REQUIRED, f"header {CLIENT_ID} missing"))
            return
        try:
            session = self.sessions.get(call.owner, cid, call.host)
            outbox = self.sessions.open_stream(session, call.host)
        except GrpcStatusError as exc:
            yield spb.TelemetryCommand(status=status(exc.code, exc.message))
            return

        # Set while the stream's last Settings is answered: the next command is read only then, so that a client
        # that sends and never reads waits on HTTP/2 flow control instead of queuing answers in the broker.
        answered = asyncio.Event()
        answered.set()

        async def read() -> None:
            try:
                async for cmd in request_iterator:
                    session.last_seen = time.monotonic()
                    if cmd.WhichOneof("command") == "settings":
                        if outbox.room_for(cmd.settings.ByteSize()):
                            answer = self._settings_answer(session, cmd.settings, call.host)
                        else:  # kept nothing: the answer would echo what the endpoint has no room for
                            answer = spb.TelemetryCommand(status=status(
                                Code.TOO_MANY_REQUESTS, "the endpoint holds too many unwritten answers and checks"))
                        if outbox.answer(answer):
                            answered.clear()
                        await answered.wait()
            except (asyncio.CancelledError, grpc.RpcError):
                pass
            except Exception:
                log.exception("telemetry stream of %s failed", cid)
            finally:
                outbox.end()

        reader = asyncio.create_task(read(), name=f"telemetry {cid}")
        try:
            while True:
                sending = await outbox.queue.get()
                if sending is None:
                    break
                cmd, size = sending
                yield cmd
                outbox.sent(size)
                if cmd.WhichOneof("command") != "recover_orphaned_transaction_command":  # a Settings' answer
                    answered.set()
        finally:
            self.sessions.close_stream(session, outbox)
            await cancel_and_wait(reader)

    # --- send --------------------------------------------------------------------------------------------

    @METHODS.declare(_send_needs)
    async def SendMessage(self, request: spb.SendMessageRequest, context: Any) -> spb.SendMessageResponse:
        if not request.messages:
            return spb.SendMessageResponse(status=status(Code.BAD_REQUEST, "no messages"))
        born = self.born_hosts.of(context.peer() or "")
        sender = current_call().owner
        response = spb.SendMessageResponse()
        entries = response.entries
        for m in request.messages:
            entry = entries.add()  # filled in place: no entry built apart and copied into the response
            try:
                await self._send_one(m, born, entry, sender)
            except Exception as exc:
                entry.Clear()
                entry.status.CopyFrom(_refusal(exc, "SendMessage"))
        _overall_status(response.status, entries, "messages")
        return response

    async def _send_one(self, m: pb.Message, born: tuple[str, int], entry: spb.SendResultEntry, sender: str) -> None:
        """Store one message of a SendMessage and fill its ``entry``; a refusal raises (``_refusal``). ``sender``:
        the account that sends it, recorded on a half as on remoting (``tx show``); "" with ACL off."""
        sends = self.core.sends
        body = decode_body(m, self.broker.config.store.max_message_size)
        pending = sends.manager.pending
        name = m.topic.name
        # nothing stored in a topic whose creation a crash could lose, nor judged by a change that may fail (undone)
        while True:
            while name in pending:
                try:
                    await sends.manager.durable(name)
                except OSError as exc:
                    raise GrpcStatusError(Code.INTERNAL_SERVER_ERROR, f"topic {name} not stored: {exc}") from None
            cfg = sends.topic_of(name, len(body), False, _AUTO_CREATE)  # as an operator may have changed it
            if isinstance(cfg, Refusal) or name not in pending:  # pending now: created by this send, waited for
                break
        if isinstance(cfg, Refusal):
            raise cfg
        topic = cfg.topic_name
        _, props = from_pb_message(m, body)
        sp = m.system_properties
        if MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in props:  # the clients give one: make none for nothing
            props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = create_uniq_id()
        kind = sp.message_type
        if sp.HasField("message_group") and sp.message_group:
            if kind not in (pb.FIFO, pb.MESSAGE_TYPE_UNSPECIFIED):
                raise GrpcStatusError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                      "a message group is only for FIFO messages")
            props[MessageConst.SHARDING_KEY] = sp.message_group
            queue_id = zlib.crc32(sp.message_group.encode()) % cfg.write_queue_nums
        elif kind == pb.FIFO:
            raise GrpcStatusError(Code.ILLEGAL_MESSAGE_GROUP, "a FIFO message needs a message group")
        else:  # a queue of the topic the message names, else any (the clients leave it 0)
            chosen = sends.queue_of(cfg, sp.queue_id if 0 <= sp.queue_id < cfg.write_queue_nums else -1)
            if isinstance(chosen, Refusal):
                raise chosen
            queue_id = chosen
        timer = sp.HasField("delivery_timestamp")  # a timer message (txmq beyond RocketMQ: a transactional one too)
        if timer:  # checked, and diverted to the timer topic, by the core's ``accept``
            props[TIMER_DELIVER_MS] = str(delivery_ms(sp.delivery_timestamp))
        half = kind == pb.TRANSACTION
        if half:
            props[MessageConst.TRANSACTION_PREPARED] = "true"
            props[MessageConst.PRODUCER_GROUP] = topic  # a 5.x producer's group is the topic (see telemetry.py)
            if sender:
                props[MessageConst.HALF_ACCOUNT] = sender
            if sp.HasField("orphaned_transaction_recovery_duration"):
                most = self.broker.config.max_transaction_recovery_second
                ms = bounded_ms(sp.orphaned_transaction_recovery_duration,
                                "orphaned transaction recovery duration (maxTransactionRecoverySecond)",
                                Code.BAD_REQUEST, 0, most * 1000)
                props[MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(max(1, -(-ms // 1000)))
        born_given = sp.HasField("born_timestamp")
        born_ms = ms_of_timestamp(sp.born_timestamp, "born timestamp") if born_given else now_ms()
        msg = MessageExt(topic, body, props, queue_id=queue_id, born_timestamp=born_ms, born_host=born,
                         store_host=self.broker.store_host)
        refused = sends.accept(msg, half, born_given)
        if refused is not None:
            raise refused
        delay_level = msg.delay_time_level
        try:
            result = await sends.put_counted(msg, half, delay_level,
                                             message_kind(half, delay_level, kind == pb.FIFO, timer))
        except (StoreError, InvalidMessageError) as exc:
            raise GrpcStatusError(Code.INTERNAL_SERVER_ERROR, f"store refused: {exc}") from None
        ar = result.append_result
        code = PUT_STATUS_CODES.get(result.status, pb.INTERNAL_SERVER_ERROR)
        if ar is None:
            raise GrpcStatusError(code, f"store answered {result.status.name} {result.remark}".rstrip())
        entry.status.CopyFrom(STATUS_OK if code == pb.OK else status(code, result.status.name))
        entry.message_id = props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
        entry.offset = ar.logics_offset
        if half:
            entry.transaction_id = transaction_id(ar.wrote_offset, ar.logics_offset)
        broker = self.broker
        handle = broker.timer_service.recall_handle(msg, broker.config.broker_name)
        if handle is not None:
            entry.recall_handle = handle

    # --- transactions ------------------------------------------------------------------------------------

    # request.topic names the producer group the transaction service checks against the half's: PUB on it is
    # what owning the half means (for a remoting half, its group rather than a topic)
    @METHODS.declare(_end_needs)
    async def EndTransaction(self, request: spb.EndTransactionRequest, context: Any) -> spb.EndTransactionResponse:
        try:
            clo, half_offset = parse_transaction_id(request.transaction_id)
            if self.broker.config.is_slave:
                raise GrpcStatusError(Code.HA_NOT_AVAILABLE, "broker is a slave: end transaction is forbidden")
            resolution = request.resolution
            if resolution == pb.COMMIT:
                outcome = Outcome.COMMIT
            elif resolution == pb.ROLLBACK:
                outcome = Outcome.ROLLBACK
            else:
                return spb.EndTransactionResponse(status=status(Code.OK, "state unknown: nothing changed"))
            source = "grpc check" if request.source == pb.SOURCE_SERVER_CHECK else "grpc client"
            result = await self.broker.transaction_service.end_transaction(
                producer_group=request.topic.name, half_offset=half_offset, commit_log_offset=clo, outcome=outcome,
                source=source)
            code = _END_CODES.get(result.code, pb.INTERNAL_SERVER_ERROR)
            return spb.EndTransactionResponse(
                status=STATUS_OK if code == pb.OK and not result.remark else status(code, result.remark or "OK"))
        except Exception as exc:
            return spb.EndTransactionResponse(status=_refusal(exc, "EndTransaction"))

    # --- receive, ack, change invisible duration, dead letters ------------------------------------------

    @property
    def _max_poll_ms(self) -> int:
        return self.broker.config.grpc_client_consumer_max_long_polling_timeout_millis

    def _invisible_ms(self, d: duration_pb2.Duration, low: int) -> int:
        """An invisible duration a request asks, ILLEGAL_INVISIBLE_TIME below ``low`` ms or past
        ``maxInvisibleTimeMills`` (the proxy's ``validateInvisibleTime``)."""
        return bounded_ms(d, "invisible duration (maxInvisibleTimeMills)", Code.ILLEGAL_INVISIBLE_TIME, low,
                          self.broker.config.max_invisible_time_mills)

    def _poll_ms(self, d: duration_pb2.Duration | None, context: Any) -> int:
        """How long a request may be held for messages: what it asks (``d``; None: DEFAULT_POLL_MS),
        ILLEGAL_POLLING_TIME when negative or malformed, held to ``grpcClientConsumerMaxLongPollingTimeoutMillis``
        and to the call's deadline as RocketMQ's proxy holds it (``ReceiveMessageActivity``): an answer after the
        deadline reaches nobody, and the messages it carries stay invisible for nothing."""
        asked = DEFAULT_POLL_MS if d is None else bounded_ms(d, "long polling timeout", Code.ILLEGAL_POLLING_TIME, 0,
                                                             None)
        poll = min(asked, self._max_poll_ms)
        remaining_s = context.time_remaining()
        if remaining_s is None:  # no deadline
            return poll
        config = self.broker.config
        remaining = int(remaining_s * 1000)
        if poll > remaining and remaining < config.grpc_client_consumer_min_long_polling_timeout_millis:
            raise GrpcStatusError(Code.ILLEGAL_POLLING_TIME, f"the call's deadline leaves {max(remaining, 0)} ms, "
                                  f"less than grpcClientConsumerMinLongPollingTimeoutMillis for a long polling of "
                                  f"{poll} ms")
        return min(poll, max(0, remaining - config.long_polling_reserve_time_in_millis))

    def _filter(self, expr: pb.FilterExpression) -> MessageFilter:
        """A FilterExpression's filter: ILLEGAL_FILTER_EXPRESSION for one that does not parse (where, in the
        message), UNSUPPORTED for SQL92 with ``enablePropertyFilter=false``."""
        kind = ExpressionType.SQL92 if expr.type == pb.SQL else ExpressionType.TAG
        try:
            return build_filter(kind, expr.expression or "*", sql_enabled=self.broker.config.enable_property_filter)
        except FilterRefused as exc:
            raise GrpcStatusError(Code.UNSUPPORTED if exc.disabled else Code.ILLEGAL_FILTER_EXPRESSION,
                                  str(exc)) from None

    @METHODS.declare(_queue_consumer_needs)
    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest,
                             context: Any) -> AsyncIterator[spb.ReceiveMessageResponse]:
        try:
            group = _group(request.group)
            topic = request.message_queue.topic.name
            self._topic(topic)
            filt = self._filter(request.filter_expression)
            invisible = self._invisible_ms(request.invisible_duration, 1) \
                if request.HasField("invisible_duration") else DEFAULT_INVISIBLE_MS
            poll = self._poll_ms(request.long_polling_timeout if request.HasField("long_polling_timeout") else None,
                                 context)
            batch = max(1, min(request.batch_size or MAX_RECEIVE_BATCH, MAX_RECEIVE_BATCH))
            deliveries = await self.core.pop.receive(group, topic, batch, invisible, poll, filt)
        except Exception as exc:
            yield spb.ReceiveMessageResponse(status=_refusal(exc, "ReceiveMessage"))
            return
        if not deliveries:
            yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
            return
        call = current_call()
        session = self.sessions.find(call.owner, call.client_id)
        md5 = session is not None and session.language == pb.NODE_JS
        yield spb.ReceiveMessageResponse(status=status())
        for d in deliveries:
            yield spb.ReceiveMessageResponse(message=to_pb_message(
                d.message, receipt_handle=d.handle.encode(), invisible_ms=d.invisible_ms,
                delivery_attempt=d.attempts, md5_digest=md5))
        yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp_ms(now_ms()))

    @METHODS.declare(_consumer_needs)
    async def AckMessage(self, request: spb.AckMessageRequest, context: Any) -> spb.AckMessageResponse:
        group = request.group.name
        results = []
        for entry in request.entries:
            st = status()
            try:
                self.core.pop.ack(group, _receipt_handle(entry.receipt_handle, request.topic.name), entry.message_id)
            except Exception as exc:
                st = _refusal(exc, "AckMessage")
            results.append(spb.AckMessageResultEntry(message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                                                     status=st))
        if not results:
            return spb.AckMessageResponse(status=status(Code.BAD_REQUEST, "no entries"))
        response = spb.AckMessageResponse(entries=results)
        _overall_status(response.status, response.entries, "entries")
        return response

    @METHODS.declare(_consumer_needs)
    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest,
                                      context: Any) -> spb.ChangeInvisibleDurationResponse:
        try:
            handle = _receipt_handle(request.receipt_handle, request.topic.name)
            ms = self._invisible_ms(request.invisible_duration, 0)
            new = self.core.pop.change_invisible(request.group.name, handle, ms, request.message_id)
            return spb.ChangeInvisibleDurationResponse(status=status(), receipt_handle=new.encode())
        except Exception as exc:
            return spb.ChangeInvisibleDurationResponse(status=_refusal(exc, "ChangeInvisibleDuration"))

    @METHODS.declare(_consumer_needs)
    async def ForwardMessageToDeadLetterQueue(self, request: spb.ForwardMessageToDeadLetterQueueRequest,
                                              context: Any) -> spb.ForwardMessageToDeadLetterQueueResponse:
        try:
            handle = _receipt_handle(request.receipt_handle, request.topic.name)
            await self.core.pop.forward_to_dead_letter(request.group.name, handle, request.message_id)
            return spb.ForwardMessageToDeadLetterQueueResponse(status=status())
        except Exception as exc:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=_refusal(exc, "ForwardMessageToDeadLetterQueue"))

    # --- offsets and pulls (the 5.x PullConsumer) --------------------------------------------------------

    def _queue(self, mq: pb.MessageQueue) -> tuple[str, int]:
        cfg = self._topic(mq.topic.name)
        missing = self.core.pulls.queue_refusal(cfg.topic_name, mq.id)
        if missing is not None:
            raise missing
        return cfg.topic_name, mq.id

    @METHODS.declare(_queue_consumer_needs)
    async def GetOffset(self, request: spb.GetOffsetRequest, context: Any) -> spb.GetOffsetResponse:
        try:
            topic, q = self._queue(request.message_queue)
            offset = self.broker.consumer_offset_manager.query(_group(request.group), topic, q)
            if offset < 0:
                raise GrpcStatusError(Code.OFFSET_NOT_FOUND, f"group {request.group.name} has no offset there")
            return spb.GetOffsetResponse(status=status(), offset=offset)
        except Exception as exc:
            return spb.GetOffsetResponse(status=_refusal(exc, "GetOffset"))

    @METHODS.declare(_queue_consumer_needs)
    async def UpdateOffset(self, request: spb.UpdateOffsetRequest, context: Any) -> spb.UpdateOffsetResponse:
        try:
            topic, q = self._queue(request.message_queue)
            _group(request.group)
            if request.offset < 0:
                raise GrpcStatusError(Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            offsets = self.broker.consumer_offset_manager
            if not offsets.commit(request.group.name, topic, q, request.offset):
                raise GrpcStatusError(Code.BAD_REQUEST, offsets.full_remark())
            self.core.pop.reset(request.group.name, topic, q)
            return spb.UpdateOffsetResponse(status=status())
        except Exception as exc:
            return spb.UpdateOffsetResponse(status=_refusal(exc, "UpdateOffset"))

    @METHODS.declare(_queue_topic_needs)
    async def QueryOffset(self, request: spb.QueryOffsetRequest, context: Any) -> spb.QueryOffsetResponse:
        try:
            topic, q = self._queue(request.message_queue)
            store = self.broker.store
            if request.query_offset_policy == pb.BEGINNING:
                offset = store.get_min_offset_in_queue(topic, q)
            elif request.query_offset_policy == pb.END:
                offset = store.get_max_offset_in_queue(topic, q, confirmed=True)
            else:
                offset = store.get_offset_in_queue_by_time(topic, q, ms_of_timestamp(request.timestamp), confirmed=True)
            return spb.QueryOffsetResponse(status=status(), offset=offset)
        except Exception as exc:
            return spb.QueryOffsetResponse(status=_refusal(exc, "QueryOffset"))

    @METHODS.declare(_queue_consumer_needs)
    async def PullMessage(self, request: spb.PullMessageRequest,
                          context: Any) -> AsyncIterator[spb.PullMessageResponse]:
        try:
            topic, q = self._queue(request.message_queue)
            group = _group(request.group)
            pulls = self.core.pulls
            refused = pulls.refusal(group, topic, q)
            if refused is not None:
                raise refused
            filt = self._filter(request.filter_expression)
            batch = max(1, min(request.batch_size or 32, MAX_PULL_BATCH))
            got = pulls.read(group, topic, q, request.offset, batch, filt)
            poll = self._poll_ms(request.long_polling_timeout, context)
            if poll > 0 and pulls.holds(got, request.offset):
                # No owner: grpcio cancels a call whose client left, and the held pull is released.
                woken = await pulls.read_held(poll / 1000, group, topic, q, request.offset, batch, filt)
                if isinstance(woken, Refusal):
                    raise woken
                got = woken
        except Exception as exc:
            yield spb.PullMessageResponse(status=_refusal(exc, "PullMessage"))
            return
        if got.status == GetMessageStatus.FOUND:
            yield spb.PullMessageResponse(status=status())
            for raw in got.messages:
                yield spb.PullMessageResponse(message=to_pb_message(decode_message(raw)[0]))
        elif got.status in (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY):
            yield spb.PullMessageResponse(status=status(Code.ILLEGAL_OFFSET, got.status.name))
        else:
            yield spb.PullMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, got.status.name))
        yield spb.PullMessageResponse(next_offset=got.next_begin_offset)

    @METHODS.declare(_recall_needs)
    async def RecallMessage(self, request: spb.RecallMessageRequest, context: Any) -> spb.RecallMessageResponse:
        """Cancel a scheduled timer message by the handle its send receipt carried (RocketMQ 5.3)."""
        broker = self.broker
        if not broker.config.recall_message_enable:
            return spb.RecallMessageResponse(status=status(Code.FORBIDDEN, "recall failed, operation is forbidden "
                                                           "(recallMessageEnable=false)"))
        if broker.config.is_slave:
            return spb.RecallMessageResponse(status=status(Code.HA_NOT_AVAILABLE, "broker is a slave"))
        try:
            msg_id = await broker.timer_service.recall(request.topic.name, request.recall_handle,
                                                       broker.config.broker_name, broker.store_host)
        except RecallError as exc:
            code = Code.INTERNAL_SERVER_ERROR if exc.code == "store" else Code.BAD_REQUEST
            return spb.RecallMessageResponse(status=status(code, str(exc)))
        return spb.RecallMessageResponse(status=STATUS_OK, message_id=msg_id)

    # --- not served --------------------------------------------------------------------------------------

    @METHODS.declare(_consumer_needs)
    async def SyncLiteSubscription(self, request: spb.SyncLiteSubscriptionRequest,
                                   context: Any) -> spb.SyncLiteSubscriptionResponse:
        return spb.SyncLiteSubscriptionResponse(status=status(Code.NOT_IMPLEMENTED, "txmq has no lite topics"))
