"""Sends (codes 10, 310, 320) and consumer send-back (36): RocketMQ's ``SendMessageProcessor``.

Checks what the client sent, resolves the topic (auto-creating it from TBW102 when allowed), routes retries
past ``maxReconsumeTimes`` into the dead-letter topic, diverts delayed and transactional (half) messages,
and stores the rest as they are.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import cython

from txmq.acl.model import Action, Needs, User
from txmq.broker.stats import BrokerStats
from txmq.broker.visibility import RecordAt, read_record_at, record_needs, servable
from txmq.errors import InvalidMessageError, LocalProtocolError
from txmq.message import (
    MessageConst,
    MessageExt,
    check_born_timestamp,
    decode_batch,
    inner_message,
    properties_to_string,
    string_to_properties,
)
from txmq.remoting.codec import encode_response, encode_send_response
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.refusals import RefusalLog
from txmq.remoting.registry import RequestSpec
from txmq.remoting.request_headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
)
from txmq.remoting.transport import Answer, Connection, HandlerResult, Reply, parse_address
from txmq.store.results import PutMessageResult, PutMessageStatus, is_stored
from txmq.topic import (
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    PermName,
    check_consumer_group,
    check_topic,
    dlq_topic,
    retry_topic,
)

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

log = logging.getLogger("txmq.broker")
_SEND_BACK_REFUSALS = RefusalLog(log, "broker refused a send-back")  # a consumer may repeat one at will

DEFAULT_MAX_RECONSUME_TIMES = 16

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
_TRAN_MSG = MessageConst.TRANSACTION_PREPARED
_PERM_WRITE = PermName.PERM_WRITE
_UNIQ_KEY = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_PGROUP = MessageConst.PRODUCER_GROUP
_HALF_ACCOUNT = MessageConst.HALF_ACCOUNT
_PUB = Action.PUB  # what every send needs under ACL

MAX_PROPERTIES_SIZE = 32767  # the layout's 2-byte properties length (txmq.message)
_LINK_PROPERTIES_MAX = 192  # what COMMIT adds to a half batch's message: two properties, their names and values
_RECORD_OVERHEAD_MAX = 512  # header, topic and the store's trailer around body and properties


_BORN_HOST = "bornHost"


def is_half(properties: Mapping[str, str]) -> bool:
    """A half (transactional) message, marked as RocketMQ marks it: by its ``TRAN_MSG`` property. Compiled, this,
    ``message_type`` and ``peer_host`` are C functions to the send path (send.pxd): a send asks each once or more."""
    return properties.get(_TRAN_MSG) == "true"


def message_type(msg: MessageExt, order: bool) -> str:
    """RocketMQ 5's message_type label: transaction, delay, fifo or normal."""
    return _message_kind(is_half(msg.properties), msg.delay_time_level, order)


def _message_kind(half: bool, delay_level: int, order: bool) -> str:
    """``message_type`` from what a send has already asked of its message."""
    if half:
        return "transaction"
    if delay_level > 0:
        return "delay"
    return "fifo" if order else "normal"


def peer_host(conn: Connection) -> tuple[str, int]:
    """The peer as (IPv4, port) for BORNHOST; a peer we cannot express in IPv4 shows as 0.0.0.0. Worked out once
    per connection (``attrs``): every send asks."""
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
    ``batch`` holds a batch's messages (None for one message: ``msg``). Compiled, an extension type (send.pxd)."""

    __slots__ = ("batch", "kind", "msg", "processor", "topic")

    def __init__(self, processor: SendMessageProcessor, conn: Connection, cmd: RemotingCommand, msg: MessageExt,
                 batch: list[MessageExt] | None, topic: str, kind: str) -> None:
        Reply.__init__(self, conn, cmd)  # positional, no super() object per send
        self.processor = processor
        self.msg = msg
        self.batch = batch
        self.topic = topic
        self.kind = kind

    @cython.locals(stats=BrokerStats)
    def __call__(self, result: PutMessageResult) -> Answer:
        if self.batch is not None:
            return self.processor._batch_response(self.cmd, self.batch, result, self.topic, self.kind)
        if is_stored(result):
            stats = self.processor.broker.stats_manager  # typed: its put is a C call (stats.pxd)
            stats.put(self.topic, self.kind, len(self.msg.body))
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
    batch by its code or its ``batch`` field, decided here once. A property only the broker sets is refused."""
    if cmd.code == _SEND_MESSAGE:
        h = SendMessageRequestHeader.from_ext(cmd.ext_fields)
    else:
        h = SendMessageRequestHeader.from_v2_ext(cmd.ext_fields)
    if cmd.code == _SEND_BATCH_MESSAGE:
        h.batch = True
    props = string_to_properties(h.properties) if h.properties else {}
    entries = decode_batch(cmd.body) if h.batch else None
    if _HALF_ACCOUNT in props or (entries is not None and any(_HALF_ACCOUNT in e[2] for e in entries)):
        raise InvalidMessageError(f"property {_HALF_ACCOUNT} is set by the broker only")
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
    """Compiled, an extension type whose per-send steps are C methods (send.pxd)."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

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
        broker = self.broker
        h = req.header
        batch = h.batch
        if broker.config.is_slave:  # RocketMQ's store in slave mode: nothing stored. Not SLAVE_NOT_AVAILABLE, which
            # says "stored on the master" and whose answer RocketMQ clients read a send header from (the C++ client
            # crashes on one without it)
            return RemotingCommand.response_to(cmd, ResponseCode.SERVICE_NOT_AVAILABLE,
                                               remark="service not available now: broker is a slave, putMessage is "
                                               "forbidden")
        check_topic(h.topic)
        if h.topic in NOT_ALLOWED_SEND_TOPICS:
            return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION,
                                               remark=f"topic {h.topic} is a system topic; sending to it is forbidden")
        if len(cmd.body) > broker.config.store.max_message_size:  # a batch counts whole, as RocketMQ counts it
            return RemotingCommand.response_to(
                cmd, ResponseCode.MESSAGE_ILLEGAL,
                remark=f"the message body size over max value, MAX: {broker.config.store.max_message_size} "
                f"(maxMessageSize; this {'batch' if batch else 'message'} has {len(cmd.body)} bytes)",
            )
        topic_config = broker.topic_config_manager.table.get(h.topic)  # the table itself: no call per send
        if topic_config is None:
            if h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                topic_config = broker.topic_config_manager.create_if_absent(h.topic, 1)
            else:
                topic_config = broker.topic_config_manager.create_in_send(
                    h.topic, h.default_topic, h.default_topic_queue_nums, 0)
                if topic_config is not None:
                    broker.schedule_register()
            if topic_config is None:
                return RemotingCommand.response_to(
                    cmd, ResponseCode.TOPIC_NOT_EXIST,
                    remark=f"topic[{h.topic}] not exist, apply first please! (autoCreateTopicEnable is off)",
                )
        if not topic_config.perm & _PERM_WRITE:  # PermName.is_writeable
            return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION,
                                               remark=f"the topic[{h.topic}] sending message is forbidden")
        queue_id = h.queue_id
        if queue_id < 0:
            queue_id = random.randrange(topic_config.write_queue_nums)
        elif queue_id >= topic_config.write_queue_nums:
            return RemotingCommand.response_to(
                cmd, ResponseCode.SYSTEM_ERROR,
                remark=f"queueId {queue_id} is illegal: topic {h.topic} has "
                f"{topic_config.write_queue_nums} write queues",
            )
        if h.born_timestamp:  # 0: not given, the broker's time is taken; a batch's messages share the header's
            check_born_timestamp(h.born_timestamp)
        born_host = peer_host(conn)
        entries = req.entries
        if entries is not None:
            if not entries:
                return RemotingCommand.response_to(cmd, ResponseCode.MESSAGE_ILLEGAL, remark="empty batch")
            batch_props = req.props
            halves = 0
            for _flag, data, props in entries:
                if len(data) > broker.config.store.max_message_size:
                    return RemotingCommand.response_to(
                        cmd, ResponseCode.MESSAGE_ILLEGAL,
                        remark=f"a batch message of {len(data)} bytes exceeds maxMessageSize")
                if props.get(MessageConst.DELAY_TIME_LEVEL):
                    return RemotingCommand.response_to(cmd, ResponseCode.MESSAGE_ILLEGAL,
                                                       remark="batch messages cannot be delayed")
                halves += is_half(props)
            if halves not in (0, len(entries)):
                return RemotingCommand.response_to(
                    cmd, ResponseCode.MESSAGE_ILLEGAL,
                    remark="a batch is all half (transactional) messages or none")
            if (halves or is_half(batch_props)) and broker.config.reject_transaction_message:
                return self._rejected_transaction(cmd)
            if is_half(batch_props):
                return self._half_batch(conn, cmd, h, queue_id, entries, batch_props, halves)
            msgs = [self._inner(h, queue_id, flag, data, props, born_host) for flag, data, props in entries]
            answer = _SendAnswer(self, conn, cmd, msgs[0], msgs, h.topic, message_type(msgs[0], topic_config.order))
            # txmq beyond RocketMQ: a batch of halves is stored with one write (the Spark sink's tasks).
            if halves:
                return broker.transaction_service.prepare_messages(msgs, answer=answer)
            return broker.store.put_messages(msgs, answer, answer)
        msg = self._inner(h, queue_id, h.flag, cmd.body, req.props, born_host)
        if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            max_times = h.max_reconsume_times if h.max_reconsume_times is not None else DEFAULT_MAX_RECONSUME_TIMES
            if h.reconsume_times >= max_times:
                self._to_dlq(msg, msg.topic.removeprefix(RETRY_GROUP_TOPIC_PREFIX))
        half = is_half(msg.properties)  # asked once here for the checks, the label and the store
        if half and broker.config.reject_transaction_message:
            return self._rejected_transaction(cmd)
        delay_level = msg.delay_time_level
        answer = _SendAnswer(self, conn, cmd, msg, None, h.topic, _message_kind(half, delay_level, topic_config.order))
        return self._store(msg, half, delay_level, answer, answer)

    def _half_batch(self, conn: Connection, cmd: RemotingCommand, h: SendMessageRequestHeader, queue_id: int,
                    entries: list[tuple[int, bytes, dict[str, str]]], batch_props: dict[str, str],
                    halves: int) -> RemotingCommand | Awaitable[Answer]:
        """A batch whose own properties (the request header's) make it a half message: one transaction for all
        its messages, stored as one half whose body is the batch as sent (txmq beyond RocketMQ). Its messages
        need a ``UNIQ_KEY`` each: after a crash, that is how a commit cut short finds what it already stored."""
        if halves:
            return RemotingCommand.response_to(cmd, ResponseCode.MESSAGE_ILLEGAL,
                                               remark="a half batch carries plain messages, not half messages")
        uniq = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
        limit = self.broker.config.store.max_message_size
        for _, data, props in entries:
            # Refused now, not at COMMIT: each message must fit as it will be stored, with the link properties
            # (TRAN_PREPARED_QUEUE_OFFSET, __transactionId__) a COMMIT adds.
            size = len(properties_to_string(props).encode()) + _LINK_PROPERTIES_MAX
            if size > MAX_PROPERTIES_SIZE or len(data) + size + _RECORD_OVERHEAD_MAX > limit:
                return RemotingCommand.response_to(
                    cmd, ResponseCode.MESSAGE_ILLEGAL,
                    remark=f"a message of the half batch would not fit when committed: properties {size} bytes "
                    f"(at most {MAX_PROPERTIES_SIZE}), message {len(data) + size} bytes (maxMessageSize {limit})")
        if not all(props.get(uniq) for _, _, props in entries):
            return RemotingCommand.response_to(cmd, ResponseCode.MESSAGE_ILLEGAL,
                                               remark=f"each message of a half batch needs a {uniq}")
        if not batch_props.get(uniq):
            return RemotingCommand.response_to(cmd, ResponseCode.MESSAGE_ILLEGAL,
                                               remark=f"a half batch needs its own {uniq} (its transaction id)")
        msg = self._inner(h, queue_id, h.flag, cmd.body, batch_props, peer_host(conn))
        return self.broker.transaction_service.prepare_half_batch(
            msg, len(entries), _SendAnswer(self, conn, cmd, msg, None, h.topic, "transaction"))

    def _rejected_transaction(self, cmd: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(
            cmd, ResponseCode.NO_PERMISSION,
            remark=f"the broker[{self.broker.config.broker_addr}] sending transaction message is forbidden "
            "(rejectTransactionMessage=true)",
        )

    def store_message(self, msg: MessageExt, answer: Callable[[PutMessageResult], Any] | None = None,
                      waiter: Reply | None = None) -> Any:
        """Store one checked message by its kind: a half message through the transaction service, a delayed one
        through the schedule topic, the rest as it is; a future of the result, or of ``answer(result)``
        (``put_messages``), or the ``waiter`` given, resolved instead of a future. Shared by the remoting and gRPC
        (``txmq.grpc``) sends."""
        return self._store(msg, is_half(msg.properties), msg.delay_time_level, answer, waiter)

    def _store(self, msg: MessageExt, half: bool, delay_level: int,
               answer: Callable[[PutMessageResult], Any] | None, waiter: Reply | None) -> Any:
        """``store_message`` with what the caller already asked of the message (a half, its delay level)."""
        broker = self.broker
        if half:
            return broker.transaction_service.prepare_message(msg, answer, waiter)
        if delay_level > 0 and not msg.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            broker.schedule_service.divert(msg)
        return broker.store.put_message(msg, answer, waiter)

    def _inner(self, h: SendMessageRequestHeader, queue_id: int, flag: int, body: bytes,
               props: dict[str, str], born_host: tuple[str, int]) -> MessageExt:
        return inner_message(h.topic, body, props, flag, queue_id, h.sys_flag,
                             h.born_timestamp or int(time.time() * 1000), born_host, self.broker.store_host,
                             h.reconsume_times)

    def _to_dlq(self, msg: MessageExt, group: str) -> None:
        topic = dlq_topic(group)
        # readable, as in RocketMQ 5: operators read dead letters (the console, printMsg) before resending them
        self.broker.topic_config_manager.create_if_absent(topic, 1, PermName.READ_WRITE)
        msg.properties.setdefault(MessageConst.RETRY_TOPIC, msg.topic)
        self.broker.stats_manager.to_dlq(msg.properties[MessageConst.RETRY_TOPIC], group)
        msg.topic = topic
        msg.queue_id = 0
        msg.properties.pop(MessageConst.DELAY_TIME_LEVEL, None)
        log.info("message %s to dead-letter topic %s after %d reconsumes", msg.msg_id, topic, msg.reconsume_times)

    def _batch_response(self, cmd: RemotingCommand, msgs: list[MessageExt], result: PutMessageResult, topic: str,
                        kind: str) -> Answer:
        """One write and one flush wait for the whole batch; the answer names every message's offset id and the
        queue offset of the first (the rest follow it; for halves, in the half queue)."""
        ar = result.append_result
        if not result.stored or ar is None:  # stored with a late flush still has ids and offsets to answer with
            return self._response(cmd, msgs[0], result)
        for m in msgs:
            self.broker.stats_manager.put(topic, kind, len(m.body))
        header = SendMessageResponseHeader(
            msg_id=",".join(m.offset_msg_id for m in msgs),
            queue_id=msgs[0].queue_id, queue_offset=ar.logics_offset,
            transaction_id=",".join(m.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "") for m in msgs)
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
        return encode_send_response(cmd, code, ar.msg_id, msg.queue_id, ar.logics_offset,
                                    props.get(_UNIQ_KEY) if is_half(props) else None)

    # --- consumer send-back: retry with delay, or the dead-letter topic --------------------------------

    def _send_back_refusal(self, h: ConsumerSendMsgBackRequestHeader, origin: MessageExt) -> str | None:
        """Why the record at ``h.offset`` may not be sent back by ``h.group``, or None. A send-back copies a record
        into a topic the group reads, so it takes only a visible message of a topic the group consumes (its
        retry topic, or one its consumers subscribe to by heartbeat), and the message ``originMsgId`` names."""
        if not servable(origin):
            return f"the record at offset {h.offset} is not a visible message"
        group = self.broker.consumer_manager.get(h.group)
        if origin.topic != retry_topic(h.group) and (group is None or origin.topic not in group.subscriptions):
            return f"group {h.group} does not consume topic {origin.topic} of the message at offset {h.offset}"
        ids = (origin.msg_id, origin.offset_msg_id, origin.properties.get(MessageConst.ORIGIN_MESSAGE_ID))
        if h.origin_msg_id and h.origin_msg_id not in ids:
            return f"the message at offset {h.offset} is not {h.origin_msg_id}"
        return None

    async def _send_back(self, cmd: RemotingCommand, req: SendBackRequest, host: str) -> RemotingCommand:
        broker = self.broker
        h, origin = req.header, req.record.msg
        if origin is None:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR,
                                               remark=f"look message by offset {h.offset} failed: {req.record.why}")
        refused = self._send_back_refusal(h, origin)
        if refused is not None:
            _SEND_BACK_REFUSALS.refused(host, refused)
            return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION, remark=refused)
        retry = retry_topic(h.group)
        broker.topic_config_manager.create_if_absent(retry, 1)
        props = dict(origin.properties)
        props.setdefault(MessageConst.RETRY_TOPIC, origin.topic)
        props.setdefault(MessageConst.ORIGIN_MESSAGE_ID, h.origin_msg_id or origin.msg_id)
        reconsume = origin.reconsume_times + 1
        props.pop(MessageConst.DELAY_TIME_LEVEL, None)
        msg = MessageExt(retry, origin.body, props, flag=origin.flag, queue_id=0, sys_flag=origin.sys_flag,
                         born_timestamp=origin.born_timestamp, born_host=origin.born_host,
                         store_host=broker.store_host, reconsume_times=reconsume)
        max_times = h.max_reconsume_times if h.max_reconsume_times is not None else DEFAULT_MAX_RECONSUME_TIMES
        if origin.reconsume_times >= max_times or h.delay_level < 0:
            self._to_dlq(msg, h.group)
        else:
            level = h.delay_level if h.delay_level > 0 else 3 + origin.reconsume_times
            level = min(level, len(broker.config.delay_levels_ms()))
            msg.properties[MessageConst.DELAY_TIME_LEVEL] = str(level)
            broker.schedule_service.divert(msg)
        result = await broker.store.put_message(msg)
        if not result.stored:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR,
                                               remark=f"send back failed: {result.status.name} {result.remark}")
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS)
