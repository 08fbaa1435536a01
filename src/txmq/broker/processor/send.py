"""Sends (codes 10, 310, 320) and consumer send-back (36) over remoting: RocketMQ's ``SendMessageProcessor`` as an
adapter of the broker core (``txmq.broker.core``). It reads a request once, asks the core's ``SendService`` to
check, resolve and store it (``RetryService`` for a send-back) and answers what the core answers in remoting's
codes (``refused``).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, NamedTuple

import cython

from txmq.acl.model import Action, Needs, User
from txmq.broker.core.refusal import Kind, Refusal
from txmq.broker.core.send import decision_refusal, is_half, is_timed, message_kind, reserved_refusal
from txmq.broker.processor.refused import refused
from txmq.broker.stats import BrokerStats
from txmq.broker.visibility import RecordAt, read_record_at, record_needs
from txmq.errors import InvalidMessageError, LocalProtocolError
from txmq.message import MessageConst, MessageExt, decode_batch, inner_message, string_to_properties
from txmq.refusals import RefusalLog
from txmq.remoting.codec import SEND_RESPONSE_EXTRA, encode_response, encode_send_response
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import RequestSpec
from txmq.remoting.request_headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
)
from txmq.remoting.transport import Answer, Connection, HandlerResult, Reply, parse_address
from txmq.store.results import PutMessageResult, PutMessageStatus, is_stored
from txmq.topic import RMQ_SYS_WHEEL_TIMER_TOPIC, check_consumer_group

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

log = logging.getLogger("txmq.broker")
_SEND_BACK_REFUSALS = RefusalLog(log, "broker refused a send-back")  # a consumer may repeat one at will

_PUT_STATUS_TO_CODE = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutMessageStatus.NOT_ACKNOWLEDGED: ResponseCode.SERVICE_NOT_AVAILABLE,
}


# Codes every send reads, as module constants: an enum member read off its class passes EnumType's __getattr__ hook
# (Python 3.11), two type lookups more per read.
_SEND_MESSAGE = RequestCode.SEND_MESSAGE
_SEND_BATCH_MESSAGE = RequestCode.SEND_BATCH_MESSAGE
_CONSUMER_SEND_MSG_BACK = RequestCode.CONSUMER_SEND_MSG_BACK
_SYSTEM_ERROR = ResponseCode.SYSTEM_ERROR
_SUCCESS = ResponseCode.SUCCESS
_PUT_OK = PutMessageStatus.PUT_OK  # what nearly every answer reads: no table lookup for it
# Read per send too: a module constant is one dict lookup, a class attribute (or a static method's call) more.
_UNIQ_KEY = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_PGROUP = MessageConst.PRODUCER_GROUP
_HALF_ACCOUNT = MessageConst.HALF_ACCOUNT
_PUB = Action.PUB  # what every send needs under ACL

_BORN_HOST = "bornHost"


def peer_host(conn: Connection) -> tuple[str, int]:
    """The peer as (IPv4, port) for BORNHOST; a peer we cannot express in IPv4 shows as 0.0.0.0. Worked out once
    per connection (``attrs``): every send asks. Compiled, a C function to the send path (send.pxd)."""
    born = conn.attrs.get(_BORN_HOST)
    if born is None:
        try:
            host, port = parse_address(conn.remote_address)
        except LocalProtocolError:
            host, port = "0.0.0.0", 0
        born = conn.attrs[_BORN_HOST] = (host if host.count(".") == 3 else "0.0.0.0", port)
    return born


class _SendAnswer(Reply):
    """A send's response from its put's result, made where the store has the result (``put_messages``' answer).
    It is also the put's waiter where nothing else waits (a plain send or batch): the store resolves it and it
    writes the response itself (``Reply``), so a send makes this one object where a future, its done callback and
    the transport's callback object were three more. A stored message is counted under its topic and message type.
    ``batch`` holds a batch's messages (None for one message: ``msg``); ``dead_letters`` the group whose dead letter
    ``msg`` is (``SendService.route_retry``), counted as such once stored. Compiled, an extension type (send.pxd)."""

    __slots__ = ("batch", "dead_letters", "kind", "msg", "processor", "topic")

    def __init__(self, processor: SendMessageProcessor, conn: Connection, cmd: RemotingCommand, msg: MessageExt,
                 batch: list[MessageExt] | None, topic: str, kind: str, dead_letters: str | None = None) -> None:
        Reply.__init__(self, conn, cmd)  # positional, no super() object per send
        self.processor = processor
        self.msg = msg
        self.batch = batch
        self.topic = topic
        self.kind = kind
        self.dead_letters = dead_letters

    @cython.locals(stats=BrokerStats)
    def __call__(self, result: PutMessageResult) -> Answer:
        if self.batch is not None:
            return self.processor._batch_response(self.cmd, self.batch, result, self.topic, self.kind)
        if is_stored(result):
            stats = self.processor.stats  # typed: its put is a C call (stats.pxd)
            stats.put(self.topic, self.kind, len(self.msg.body))
            if self.dead_letters is not None:
                self.processor.sends.retries.count_dead_letter(self.msg, self.dead_letters)
        return self.processor._response(self.cmd, self.msg, result)


class SendRequest:
    """A send as read once (``parse_send``): its header, the message's own properties (a batch's: the batch's), and
    a batch's messages. What is authorized (``send_needs``), stamped (``stamp_half_account``) and stored is this
    one object: no second reading of the ext fields or the body."""

    __slots__ = ("entries", "header", "props")

    def __init__(self, header: SendMessageRequestHeader, props: dict[str, str],
                 entries: list[tuple[int, bytes, dict[str, str]]] | None) -> None:
        self.header = header
        self.props = props
        self.entries = entries


def parse_send(cmd: RemotingCommand) -> SendRequest:
    """SEND_MESSAGE (long field names), SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE (single letters): a batch is a
    batch by its code or its ``batch`` field, decided here once. A property only the broker sets is refused, and so is
    a sysFlag of END_TRANSACTION's record types (``decision_refusal``)."""
    if cmd.code == _SEND_MESSAGE:
        h = SendMessageRequestHeader.from_ext(cmd.ext_fields)
    else:
        h = SendMessageRequestHeader.from_v2_ext(cmd.ext_fields)
    if cmd.code == _SEND_BATCH_MESSAGE:
        h.batch = True
    props = string_to_properties(h.properties) if h.properties else {}
    entries = decode_batch(cmd.body) if h.batch else None
    reserved = decision_refusal(h.sys_flag) or reserved_refusal(props)
    if reserved is None and entries is not None:
        for _flag, _data, entry_props in entries:
            reserved = reserved_refusal(entry_props)
            if reserved is not None:
                break
    if reserved is not None:
        raise InvalidMessageError(reserved.message)
    return SendRequest(h, props, entries)


def send_needs(req: SendRequest) -> Needs:
    """Pub on the topic (a ``%RETRY%G`` topic: Sub on group G); a half message, a half batch or a batch of halves
    also needs Pub on each group that will own a half (its ``PGROUP``, whatever group the request names)."""
    h = req.header
    needs = Needs().topic(h.topic, _PUB)
    if is_half(req.props):
        needs.group(req.props.get(_PGROUP, h.producer_group), _PUB)
    for _flag, _data, props in req.entries or ():
        if is_half(props):
            needs.group(props.get(_PGROUP, h.producer_group), _PUB)
    return needs


def stamp_half_account(req: SendRequest, user: User) -> None:
    """Records the account that stores a half (``TXMQ_HALF_ACCOUNT``, shown by ``tx show`` and carried into the
    committed message): a half message's, a half batch's, each half of a batch."""
    account = user.username
    if is_half(req.props):
        req.props[_HALF_ACCOUNT] = account
    for _flag, _data, props in req.entries or ():
        if is_half(props):
            props[_HALF_ACCOUNT] = account


class SendBackRequest(NamedTuple):
    """A consumer send-back as read once: its header and the record its offset names (``_parse_send_back``)."""

    header: ConsumerSendMsgBackRequestHeader
    record: RecordAt


def send_back_needs(req: SendBackRequest) -> Needs:
    """Sub on the consumer group and on the topic of the message at the offset (the record is read first: a send-back
    copies it where the group reads); Get on the cluster when there is none. The handler then takes only a message
    of a topic that group consumes."""
    return record_needs(req.record, Needs().group(req.header.group, Action.SUB))


@cython.cclass
class SendMessageProcessor:
    """Compiled, an extension type whose per-send steps are C methods (send.pxd), as are the core's it calls."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.sends = broker.core.sends
        self.stats = broker.stats_manager
        self.store_host = broker.store_host

    def requests(self) -> list[RequestSpec[Any]]:
        illegal = ResponseCode.MESSAGE_ILLEGAL
        return [RequestSpec(code, parse_send, send_needs, self.send, illegal, stamp_half_account)
                for code in (_SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, _SEND_BATCH_MESSAGE)] + [
            RequestSpec(_CONSUMER_SEND_MSG_BACK, self._parse_send_back, send_back_needs, self.send_back, illegal)]

    def _parse_send_back(self, cmd: RemotingCommand) -> SendBackRequest:
        h = ConsumerSendMsgBackRequestHeader.from_ext(cmd.ext_fields)
        check_consumer_group(h.group)
        return SendBackRequest(h, read_record_at(self.broker.store, h.offset))

    def send(self, conn: Connection, cmd: RemotingCommand, req: SendRequest) -> HandlerResult:
        return self._send(conn, cmd, req)

    def send_back(self, conn: Connection, cmd: RemotingCommand, req: SendBackRequest) -> Awaitable[RemotingCommand]:
        return self._send_back(cmd, req, conn.remote_address.rpartition(":")[0])

    # --- plain, batch, transactional, delayed ----------------------------------------------------------

    def _send(self, conn: Connection, cmd: RemotingCommand, req: SendRequest):
        sends = self.sends
        h = req.header
        pending = sends.manager.pending
        if pending and h.topic in pending:  # judged by the topic as the change leaves it (undone when it fails)
            return self._once_durable(conn, cmd, req, h.topic)
        cfg = sends.topic_of(h.topic, len(cmd.body), h.batch, h)
        if isinstance(cfg, Refusal):
            return refused(cmd, cfg)
        if pending and h.topic in pending:  # created by this send
            return self._once_durable(conn, cmd, req, h.topic)
        queue_id = sends.queue_of(cfg, h.queue_id)
        if isinstance(queue_id, Refusal):
            return refused(cmd, queue_id)
        # The name as the topic table holds it (equal to the header's): the tables keyed by topic further on (the
        # stats, the encoded topics, the store's queues and counts) hold it too, so their lookups find their key by
        # identity, without reading the key's characters (memory no recent send touched, at 10,000 topics).
        topic = cfg.topic_name
        born_host = peer_host(conn)
        entries = req.entries
        if entries is not None:
            halves = sends.accept_batch(entries, req.props, h.born_timestamp, h.sys_flag)
            if isinstance(halves, Refusal):
                return refused(cmd, halves)
            if is_half(req.props):
                msg = self._inner(h, topic, queue_id, h.flag, cmd.body, req.props, born_host)
                return sends.put_half_batch(msg, len(entries),
                                            _SendAnswer(self, conn, cmd, msg, None, topic, "transaction"))
            msgs = [self._inner(h, topic, queue_id, flag, data, props, born_host) for flag, data, props in entries]
            first = msgs[0]
            answer = _SendAnswer(self, conn, cmd, first, msgs, topic,
                                 message_kind(is_half(first.properties), first.delay_time_level, cfg.order))
            return sends.put_batch(msgs, halves, answer, answer)
        msg = self._inner(h, topic, queue_id, h.flag, cmd.body, req.props, born_host)
        dead_letters = sends.route_retry(msg, h.max_reconsume_times)
        if isinstance(dead_letters, Refusal):
            return refused(cmd, dead_letters)
        if pending and msg.topic in pending:  # a dead-letter topic it just created
            return self._once_durable(conn, cmd, req, msg.topic)
        half = is_half(msg.properties)  # asked once here for the checks, the label and the store
        refusal = sends.accept(msg, half, h.born_timestamp != 0)
        if refusal is not None:
            return refused(cmd, refusal)
        delay_level = msg.delay_time_level
        answer = _SendAnswer(self, conn, cmd, msg, None, topic,
                             message_kind(half, delay_level, cfg.order, is_timed(msg.properties)), dead_letters)
        return sends.put(msg, half, delay_level, answer, answer)

    async def _once_durable(self, conn: Connection, cmd: RemotingCommand, req: SendRequest,
                            topic: str) -> Answer | None:
        """A send to a topic whose creation or change is not durable yet, taken again once it is (or undone):
        nothing is stored, nor answered, in a topic a crash could lose, nor judged by a change that may fail. The
        topic's creation failing is answered as a handler's error.
        Changes that followed the creation are waited for here, in turn, not by a send retried inside this one."""
        manager = self.sends.manager
        while topic in manager.pending:
            await manager.durable(topic)
        result = self._send(conn, cmd, req)
        if isinstance(result, Reply):  # it writes the answer itself
            return None
        return await result if inspect.isawaitable(result) else result

    def _inner(self, h: SendMessageRequestHeader, topic: str, queue_id: int, flag: int, body: bytes,
               props: dict[str, str], born_host: tuple[str, int]) -> MessageExt:
        return inner_message(topic, body, props, flag, queue_id, h.sys_flag,
                             h.born_timestamp or int(time.time() * 1000), born_host, self.store_host,
                             h.reconsume_times)

    def _batch_response(self, cmd: RemotingCommand, msgs: list[MessageExt], result: PutMessageResult, topic: str,
                        kind: str) -> Answer:
        """One write and one flush wait for the whole batch; the answer names every message's offset id and the
        queue offset of the first (the rest follow it; for halves, in the half queue)."""
        ar = result.append_result
        if not result.stored or ar is None:  # stored with a late flush still has ids and offsets to answer with
            return self._response(cmd, msgs[0], result)
        for m in msgs:
            self.stats.put(topic, kind, len(m.body))
        header = SendMessageResponseHeader(
            msg_id=",".join(m.offset_msg_id for m in msgs),
            queue_id=msgs[0].queue_id, queue_offset=ar.logics_offset,
            transaction_id=",".join(m.properties.get(_UNIQ_KEY, "") for m in msgs)
            if is_half(msgs[0].properties) else None)
        return encode_response(cmd, _PUT_STATUS_TO_CODE.get(result.status, _SYSTEM_ERROR), header.to_ext())

    def _response(self, cmd: RemotingCommand, msg: MessageExt, result: PutMessageResult) -> Answer:
        """The answer to a put: a stored message's as an encoded frame (``encode_send_response``), a refusal as a
        command."""
        status = result.status
        code = _SUCCESS if status is _PUT_OK else _PUT_STATUS_TO_CODE.get(status, _SYSTEM_ERROR)
        ar = result.append_result
        if ar is None or not is_stored(result):
            remark = f"store answered {result.status.name}"
            if result.status == PutMessageStatus.SERVICE_NOT_AVAILABLE:
                remark = "service not available now"
            if result.remark:
                remark += f": {result.remark}"
            return RemotingCommand.response_to(cmd, code, remark=remark)
        props = msg.properties
        if msg.topic == RMQ_SYS_WHEEL_TIMER_TOPIC:  # RocketMQ 5.3's answer carries its recall handle
            broker = self.broker
            ext = SendMessageResponseHeader(msg_id=ar.msg_id, queue_id=msg.queue_id,
                                            queue_offset=ar.logics_offset).to_ext()
            handle = broker.timer_service.recall_handle(msg, broker.config.broker_name)
            ext.update(SEND_RESPONSE_EXTRA)
            if handle is not None:
                ext["recallHandle"] = handle
            return encode_response(cmd, code, ext)
        return encode_send_response(cmd, code, ar.msg_id, msg.queue_id, ar.logics_offset,
                                    props.get(_UNIQ_KEY) if is_half(props) else None)

    # --- consumer send-back: retry with delay, or the dead-letter topic --------------------------------

    async def _send_back(self, cmd: RemotingCommand, req: SendBackRequest, host: str) -> RemotingCommand:
        h = req.header
        refusal = await self.broker.core.retries.send_back(h.group, req.record, h.origin_msg_id, h.delay_level,
                                                           h.max_reconsume_times)
        if refusal is not None:
            if refusal.kind is Kind.NO_PERMISSION:
                _SEND_BACK_REFUSALS.refused(host, refusal.message)
            return refused(cmd, refusal)
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS)
