"""``Producer``: sync, async, oneway, orderly and batch sends (RocketMQ's ``DefaultMQProducer``).

Queue choice is round robin over the topic's writable queues; a failed attempt is retried up to
``retry_times`` more times on the next queue, avoiding the broker that just failed (RocketMQ's
``retryTimesWhenSendFailed``). Every message gets a ``UNIQ_KEY`` once, before the first attempt, so retries
of one message keep one id (the C++ client makes a new id per attempt). In-flight async sends are bounded by
``max_in_flight`` (backpressure: ``send_async`` blocks when the window is full).

``send_async`` coalesces: the async sends that arrive while the client's loop is busy are taken together and
go out as one batch request per topic (up to ``batch_max_messages`` / ``batch_max_bytes``), which the broker
stores with one write and, under SYNC_FLUSH, one flush wait — Kafka's record accumulator without a linger
delay. Each message still gets its own result and id; at low load every message goes alone. Half messages
(``TRAN_MSG=true``, as the Spark sink's tasks send them) coalesce too, in batches of their own: txmq's broker
stores a batch of halves with one write (RocketMQ's refuses them). Delayed messages always go alone.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Self

from txmq.client.base import ClientBase
from txmq.client.instance import MessageQueue
from txmq.client.runtime import ClientRuntime, HandOff
from txmq.errors import BrokerError, ClientError, InvalidMessageError
from txmq.message import (
    Message,
    MessageConst,
    MessageSysFlag,
    create_uniq_id,
    encode_batch,
    properties_to_string,
)
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import SendMessageRequestHeader
from txmq.topic import AUTO_CREATE_TOPIC_KEY_TOPIC, check_group, check_topic

log = logging.getLogger("txmq.client")

MessageQueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]

# Codes after which another broker may do better (RocketMQ's retryResponseCodes).
_RETRY_CODES = {ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
                ResponseCode.SYSTEM_BUSY, ResponseCode.NO_PERMISSION}

_SEND_FUTURE_LOCK = threading.Lock()


class SendFuture:
    """The answer to one ``send_async``, set once by the client's loop.

    Lighter than ``concurrent.futures.Future``, which builds a lock and a condition per future: here a
    thread that waits before the answer is in gets an ``Event`` then, and only then. ``result``,
    ``exception``, ``done`` and ``add_done_callback`` behave as the standard future's do.
    """

    __slots__ = ("_callbacks", "_done", "_event", "_exception", "_result")

    def __init__(self) -> None:
        self._done = False
        self._result: SendResult | None = None
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[SendFuture], object]] | None = None
        self._event: threading.Event | None = None

    def done(self) -> bool:
        return self._done

    def set_result(self, result: SendResult) -> None:
        self._settle(result, None)

    def set_exception(self, exc: BaseException) -> None:
        self._settle(None, exc)

    def _settle(self, result: SendResult | None, exc: BaseException | None) -> None:
        with _SEND_FUTURE_LOCK:
            if self._done:
                return
            self._result, self._exception, self._done = result, exc, True
            event, callbacks, self._callbacks = self._event, self._callbacks, None
        if event is not None:
            event.set()
        for fn in callbacks or ():
            try:
                fn(self)
            except BaseException:  # SystemExit (``sys.exit()``) too: on the client's loop it would end its thread
                log.exception("send_async callback %r failed", fn)

    def add_done_callback(self, fn: Callable[[SendFuture], object]) -> None:
        with _SEND_FUTURE_LOCK:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)

    def _wait(self, timeout: float | None) -> None:
        if self._done:
            return
        with _SEND_FUTURE_LOCK:
            if not self._done and self._event is None:
                self._event = threading.Event()
            event = self._event
        if event is not None and not event.wait(timeout):
            raise TimeoutError(f"no answer to the send within {timeout}s")

    def result(self, timeout: float | None = None) -> SendResult:
        self._wait(timeout)
        if self._exception is not None:
            raise self._exception
        assert self._result is not None
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._exception


def _settle_from(fut: SendFuture, done: concurrent.futures.Future[SendResult]) -> None:
    if done.cancelled():
        fut.set_exception(ClientError("send cancelled: the producer is shutting down"))
    elif (exc := done.exception()) is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(done.result())


def _fail_send(send: tuple[Message, SendFuture], exc: BaseException) -> None:
    """An async send the loop never took (the producer shut down first) ends with ``exc``."""
    send[1].set_exception(exc)


def _fail_if_cancelled(chunk: list[tuple[Message, SendFuture]], task: asyncio.Task[None]) -> None:
    """A chunk's task was cancelled (the producer shuts down): its sends end as ``_settle_from`` ends them."""
    if task.cancelled():
        Producer._fail_chunk(chunk, ClientError("send cancelled: the producer is shutting down"))


class SendStatus(Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_STATUS_OF_CODE: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(slots=True)
class SendResult:
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    message_queue: MessageQueue
    transaction_id: str | None = None
    recall_handle: str | None = None  # a timer message's: ``Producer.recall`` cancels it before it is due


def _check_batch(msgs: Sequence[Message]) -> None:
    if not msgs:
        raise InvalidMessageError("empty batch")
    topic = msgs[0].topic
    if any(m.topic != topic for m in msgs):
        raise InvalidMessageError("all messages of a batch must have the same topic")
    if any(m.delay_time_level for m in msgs):
        raise InvalidMessageError("delayed messages cannot be sent in a batch")


def select_by_hash(mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """Orderly sends: one sharding key always lands on the same queue (RocketMQ's SelectMessageQueueByHash)."""
    return mqs[zlib.crc32(str(arg).encode()) % len(mqs)]


class Producer(ClientBase):
    def __init__(self, group: str, namesrv: str | None = None, *, send_timeout_s: float = 3.0,
                 retry_times: int = 2, max_message_size: int = 4 * 1024 * 1024, max_in_flight: int = 1024,
                 compress_threshold: int = 0, batch_max_messages: int = 128, batch_max_bytes: int = 1024 * 1024,
                 instance_name: str | None = None) -> None:
        check_group(group)
        super().__init__(namesrv, instance_name, group)
        self.group = group
        self.send_timeout_s = send_timeout_s
        self.retry_times = retry_times
        self.max_message_size = max_message_size
        self.compress_threshold = compress_threshold  # 0: never compress
        self._rr = itertools.count()
        # The window of unanswered async sends: a counter under a C lock (threading.Semaphore is pure Python),
        # and an event that a full window waits on.
        self.max_in_flight = max_in_flight
        self._in_flight = 0
        self._window_lock = threading.Lock()
        self._room = threading.Event()
        self._room.set()
        self.batch_max_messages = batch_max_messages
        self.batch_max_bytes = batch_max_bytes
        self._outbox: HandOff[tuple[Message, SendFuture]]  # the coalesced async sends: made with each runtime

    # --- lifecycle ------------------------------------------------------------------------------------

    def _heartbeat_data(self) -> dict[str, Any]:
        return {"producerDataSet": [{"groupName": self.group}], "consumerDataSet": []}

    async def _on_start(self) -> None:
        assert self.instance is not None
        await self.instance.start()

    async def _on_shutdown(self) -> None:
        assert self.instance is not None
        await self.instance.unregister(producer_group=self.group)
        await self.instance.close()

    # --- public sends ---------------------------------------------------------------------------------

    def send(self, msg: Message, *, selector: MessageQueueSelector | None = None, arg: Any = None,
             queue: MessageQueue | None = None, timeout_s: float | None = None) -> SendResult:
        """Send and wait for the broker's answer. Raises ``BrokerError``, ``ClientError`` or
        ``InvalidMessageError``."""
        return self._call(self._send(msg, selector=selector, arg=arg, queue=queue, timeout_s=timeout_s))

    def send_orderly(self, msg: Message, sharding_key: Any) -> SendResult:
        """Messages with one sharding key go to one queue, in order (no retry on another queue)."""
        return self.send(msg, selector=select_by_hash, arg=sharding_key)

    def send_async(self, msg: Message, queue: MessageQueue | None = None) -> SendFuture:
        """Send without waiting; blocks only while ``max_in_flight`` sends are unanswered (called on the client's
        own loop thread, from a send's callback, it cannot wait: it raises ``ClientError`` then). ``queue``: that
        queue, without retry on another (and without batching). A send still unanswered at ``shutdown()`` ends
        with ``ClientError``; once ``shutdown()`` began, ``send_async`` raises ``ClientError`` instead of returning
        a future (RocketMQ's send after shutdown throws rather than calling the callback)."""
        # read before a place in the window is taken: an ill-formed DELAY raises, and the place would stay taken
        alone = queue is not None or self.batch_max_messages <= 1 or msg.delay_time_level
        runtime, fut = self._window_slot()
        if alone:
            runtime.post(self._send(msg, queue=queue)).add_done_callback(functools.partial(_settle_from, fut))
        else:
            self._outbox.put((msg, fut))
        return fut

    def _window_slot(self) -> tuple[ClientRuntime, SendFuture]:
        """A place in the window of unanswered async sends (waits while it is full, but on the client's loop,
        whose answers would free it), as the future of the send that takes it: the place is freed when the future
        is settled."""
        runtime = self._runtime
        if runtime is None or not self._running:
            # refused at once once shutdown() began, with no future: a send's callback that sends again on failure
            # (as the sends shutdown ends fail) would get each new send's failure, at once or from a closed
            # connection, and send again
            raise ClientError("producer is not started" if runtime is None else
                              "producer is not running (its start() has not returned yet, or its shutdown() began)")
        self._acquire_window(wait=not runtime.on_loop_thread())
        fut = SendFuture()
        fut.add_done_callback(self._release_window)
        return runtime, fut

    def _acquire_window(self, wait: bool) -> None:
        while True:
            with self._window_lock:
                if self._in_flight < self.max_in_flight:
                    self._in_flight += 1
                    return
                if not wait:
                    raise ClientError(f"{self.max_in_flight} async sends unanswered (max_in_flight): a send on the "
                                      "client's own loop thread cannot wait for room")
                self._room.clear()
            self._room.wait()

    def _release_window(self, _fut: SendFuture) -> None:
        with self._window_lock:
            self._in_flight -= 1
            wake = not self._room.is_set()
        if wake:
            self._room.set()

    def send_oneway(self, msg: Message) -> None:
        """Send with no answer expected (no retry, no result): fastest and least safe."""
        self._call(self._send(msg, oneway=True))

    def send_batch(self, msgs: Sequence[Message], queue: MessageQueue | None = None) -> SendResult:
        """Several messages of one topic in one request; they get consecutive offsets in one queue (``queue``
        when given: then without retry on another queue, as an orderly send)."""
        _check_batch(msgs)
        return self._call(self._send(msgs[0], batch=list(msgs), queue=queue))

    def publish_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a send of ``topic`` may go to, as the route has them."""
        return self._call(self._publish_queues(topic))

    def send_half_batch_async(self, msgs: Sequence[Message], producer_group: str,
                              properties: Mapping[str, str] | None = None,
                              queue: MessageQueue | None = None) -> SendFuture:
        """Send ``msgs`` (one topic) as one half message: one transaction for them all (txmq beyond RocketMQ,
        whose broker refuses transactional batches). A ``TransactionProducer`` of ``producer_group`` ends it
        (``HalfMessageRef.of(result)``) and answers its check-back; the half it is asked about carries
        ``properties`` and the batch as its body. On COMMIT each message becomes a real message of its own, with
        its own ``UNIQ_KEY``. The result's ``msg_id`` and ``transaction_id`` are the batch's transaction id.
        ``queue``: that queue, without retry on another. Blocks only while ``max_in_flight`` sends are unanswered."""
        _check_batch(msgs)
        if any(m.properties.get(MessageConst.TRANSACTION_PREPARED) == "true" for m in msgs):
            raise InvalidMessageError("a half batch carries plain messages, not half messages")
        check_group(producer_group)
        props = {**(properties or {}), MessageConst.TRANSACTION_PREPARED: "true",
                 MessageConst.PRODUCER_GROUP: producer_group}
        props.setdefault(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, create_uniq_id())
        runtime, fut = self._window_slot()
        runtime.post(self._send(msgs[0], batch=list(msgs), batch_properties=props, queue=queue)).add_done_callback(
            functools.partial(_settle_from, fut))
        return fut

    def _new_runtime(self, borrow: bool = False) -> ClientRuntime:
        runtime = super()._new_runtime(borrow)
        self._outbox = HandOff(runtime, self._start_sends, _fail_send)  # before a send can find the runtime
        return runtime

    # --- the send path (on the loop) ------------------------------------------------------------------

    def _start_sends(self, sends: list[tuple[Message, SendFuture]]) -> None:
        """Start one request per chunk of one topic of the async sends taken together (half messages apart: the
        broker takes a batch of halves, or of plain messages, not both). A message that fails its check, however
        (an ill-typed field raises ``TypeError``), ends its own send only: raised here, it would leave every send
        of the batch unanswered."""
        by_topic: dict[tuple[str, bool], list[tuple[Message, SendFuture]]] = {}
        for msg, fut in sends:
            try:
                self._prepare(msg)
            except Exception as exc:  # what ``send`` would raise for this message
                fut.set_exception(exc)
                continue
            half = msg.properties.get(MessageConst.TRANSACTION_PREPARED) == "true"
            by_topic.setdefault((msg.topic, half), []).append((msg, fut))
        for entries in by_topic.values():
            chunk: list[tuple[Message, SendFuture]] = []
            size = 0
            for entry in entries:
                body = len(entry[0].body)
                if chunk and (len(chunk) >= self.batch_max_messages or size + body > self.batch_max_bytes):
                    self._start_chunk(chunk)
                    chunk, size = [], 0
                chunk.append(entry)
                size += body
            self._start_chunk(chunk)

    def _start_chunk(self, chunk: list[tuple[Message, SendFuture]]) -> None:
        """The chunk's request as a task that shutting down cancels. Its sends learn of that from the task's end,
        not from inside ``_send_chunk``: a task cancelled before its first step (``AsyncProducer.shutdown()`` right
        after ``send_async``) never runs a line of it."""
        assert self._runtime is not None
        self._runtime.spawn(self._send_chunk(chunk)).add_done_callback(functools.partial(_fail_if_cancelled, chunk))

    async def _send_chunk(self, chunk: list[tuple[Message, SendFuture]]) -> None:
        msgs = [m for m, _ in chunk]
        try:
            if len(msgs) == 1:
                results = [await self._send(msgs[0], prepared=True)]
            else:
                r = await self._send(msgs[0], batch=msgs, prepared=True)
                offset_ids = r.offset_msg_id.split(",")
                uniq = [m.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] for m in msgs]
                results = [SendResult(r.status, uniq[i], offset_ids[i] if i < len(offset_ids) else "", r.queue_id,
                                      r.queue_offset + i, r.message_queue, uniq[i] if r.transaction_id else None)
                           for i in range(len(msgs))]
        except BrokerError as exc:
            if exc.code == ResponseCode.MESSAGE_ILLEGAL and len(chunk) > 1:
                # Refused whole, nothing stored: too large together (the broker counts a batch whole against its
                # maxMessageSize) or one bad message. The halves go on their own, down to single messages.
                half = len(chunk) // 2
                await asyncio.gather(self._send_chunk(chunk[:half]), self._send_chunk(chunk[half:]))
                return
            self._fail_chunk(chunk, exc)
            return
        except Exception as exc:
            self._fail_chunk(chunk, exc)
            return
        for (_, fut), result in zip(chunk, results, strict=True):
            fut.set_result(result)

    @staticmethod
    def _fail_chunk(chunk: list[tuple[Message, SendFuture]], exc: Exception) -> None:
        """Every message of the chunk shares the request's fate."""
        for _, fut in chunk:
            fut.set_exception(exc)

    def _prepare(self, msg: Message) -> None:
        self._validate(msg)
        if MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in msg.properties:
            msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = create_uniq_id()

    def _validate(self, msg: Message) -> None:
        check_topic(msg.topic)
        if not msg.body:
            raise InvalidMessageError("message body is empty")
        if len(msg.body) > self.max_message_size:
            raise InvalidMessageError(f"message body of {len(msg.body)} bytes exceeds max {self.max_message_size}")

    async def _publish_queues(self, topic: str) -> list[MessageQueue]:
        assert self.instance is not None
        route = self.instance.routes.get(topic)
        if route is None or not route.publish_queues:  # unknown, or its group has no master now: ask again
            route = await self.instance.update_route(topic)  # (RocketMQ's tryToFindTopicPublishInfo)
        if route is None or not route.publish_queues:
            # Unknown topic: send through the brokers that serve TBW102, which create it (autoCreateTopicEnable).
            default = await self.instance.route(AUTO_CREATE_TOPIC_KEY_TOPIC)
            if default is None or not default.publish_queues:
                raise ClientError(f"no route for topic {topic} and no broker allows auto-creation")
            names = sorted({q.broker_name for q in default.publish_queues})
            return [MessageQueue(topic, n, i) for n in names for i in range(4)]
        return route.publish_queues

    async def _send(self, msg: Message, *, selector: MessageQueueSelector | None = None, arg: Any = None,
                    queue: MessageQueue | None = None, timeout_s: float | None = None, oneway: bool = False,
                    batch: list[Message] | None = None, batch_properties: dict[str, str] | None = None,
                    prepared: bool = False) -> SendResult:
        assert self.instance is not None
        if not prepared:
            for m in batch or [msg]:
                self._prepare(m)
        deadline = time.monotonic() + (timeout_s or self.send_timeout_s)
        attempts = 1 if (oneway or selector or queue) else self.retry_times + 1
        last_broker: str | None = None
        last_error: Exception | None = None
        for _ in range(attempts):
            if queue is not None:
                mq = queue
                await self.instance.find_broker(mq)  # a queue the application named: its group's route first
            else:
                route = self.instance.routes.get(msg.topic)  # the common case, without two awaits
                mqs = route.publish_queues if route is not None and route.publish_queues else \
                    await self._publish_queues(msg.topic)
                if selector is not None:
                    mq = selector(mqs, msg, arg)
                elif last_broker is None:
                    mq = mqs[next(self._rr) % len(mqs)]
                else:
                    start = next(self._rr)
                    candidates = [mqs[(start + i) % len(mqs)] for i in range(len(mqs))]
                    mq = next((q for q in candidates if q.broker_name != last_broker), candidates[0])
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                result = await self._send_to(mq, msg, batch, batch_properties, oneway, remaining)
                if result.status != SendStatus.SEND_OK and self.instance.routes.get(msg.topic) is not None:
                    # e.g. a master that stepped down (controller mode) answers as a slave: its group's routes moved
                    with contextlib.suppress(BrokerError, ClientError):
                        await self.instance.update_route(msg.topic)
                return result
            except BrokerError as exc:
                if exc.code not in _RETRY_CODES:
                    raise
                last_error = exc
            except ClientError as exc:
                last_error = exc
            last_broker = mq.broker_name
            if self.instance.routes.get(msg.topic) is not None:
                await self.instance.update_route(msg.topic)
        raise last_error or ClientError(f"send to {msg.topic} timed out")

    async def _send_to(self, mq: MessageQueue, msg: Message, batch: list[Message] | None,
                       batch_properties: dict[str, str] | None, oneway: bool, timeout: float) -> SendResult:
        """One attempt. A batch's own properties (``batch_properties``, in the request header) make it a half
        batch; without them, a batch of half messages is flagged by its first."""
        assert self.instance is not None
        sys_flag = 0
        body = msg.body
        if (batch_properties or msg.properties).get(MessageConst.TRANSACTION_PREPARED) == "true":
            sys_flag |= MessageSysFlag.TRANSACTION_PREPARED_TYPE
        if batch is not None:
            body = encode_batch(batch)
        elif self.compress_threshold and len(body) > self.compress_threshold:
            body = zlib.compress(body)
            sys_flag |= MessageSysFlag.COMPRESSED
        header = SendMessageRequestHeader(
            producer_group=self.group, topic=msg.topic, default_topic=AUTO_CREATE_TOPIC_KEY_TOPIC,
            default_topic_queue_nums=4, queue_id=mq.queue_id, sys_flag=sys_flag,
            born_timestamp=int(time.time() * 1000), flag=msg.flag,
            properties=properties_to_string(batch_properties or {}) if batch is not None
            else properties_to_string(msg.properties),
            reconsume_times=0, batch=batch is not None,
        )
        code = RequestCode.SEND_BATCH_MESSAGE if batch is not None else RequestCode.SEND_MESSAGE_V2
        cmd = RemotingCommand.request(code, header.to_v2_ext(), body=body, oneway=oneway)
        addr = self.instance.broker_addr(mq.broker_name)
        if oneway:
            await self.instance.remoting.invoke_oneway(addr, cmd)
            return SendResult(SendStatus.SEND_OK, msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX], "",
                              mq.queue_id, -1, mq)
        resp = await self.instance.remoting.invoke(addr, cmd, timeout)
        status = _STATUS_OF_CODE.get(resp.code)
        if status is None:
            raise BrokerError(resp.code, resp.remark)
        ext = resp.ext_fields
        if batch_properties:
            uniq = batch_properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
        elif batch:
            uniq = ",".join(m.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] for m in batch)
        else:
            uniq = msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
        return SendResult(status, uniq, ext.get("msgId", ""), int(ext.get("queueId", mq.queue_id)),
                          int(ext.get("queueOffset", -1)), mq, ext.get("transactionId"), ext.get("recallHandle"))

    def recall(self, topic: str, recall_handle: str, timeout_s: float | None = None) -> str:
        """Cancel a scheduled timer message by the ``recall_handle`` of its send result (RocketMQ 5.3's
        RECALL_MESSAGE); returns its message id. ``BrokerError`` when refused: delivered or recalled already, a
        handle of another topic, or no ``Pub`` on the topic."""
        return self._call(self._recall(topic, recall_handle, timeout_s))

    async def _recall(self, topic: str, recall_handle: str, timeout_s: float | None) -> str:
        assert self.instance is not None
        try:
            broker_name = base64.urlsafe_b64decode(recall_handle.encode()).decode().split(" ")[2]
        except (ValueError, UnicodeError, IndexError):
            raise InvalidMessageError("recall handle is invalid") from None
        if self.instance.routes.get(topic) is None:
            await self.instance.update_route(topic)
        ext = {"topic": topic, "recallHandle": recall_handle, "producerGroup": self.group}
        cmd = RemotingCommand.request(RequestCode.RECALL_MESSAGE, ext)
        resp = await self.instance.remoting.invoke(self.instance.broker_addr(broker_name), cmd,
                                                   timeout_s or self.send_timeout_s)
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark)
        return resp.ext_fields.get("msgId", "")


class AsyncProducer:
    """A ``Producer`` for an application on asyncio: started on the application's running loop, where its
    connections, heartbeats and sends then run, with no thread of its own, so a send never waits for another thread
    to be scheduled (nats-py's and aiokafka's shape). Plain sends only; transactions stay with
    ``TransactionProducer``. Options as ``Producer``'s.

    ``await send(msg)`` is one request and its answer; ``await send_async(msg)`` returns at once with an
    ``asyncio.Future`` of the answer (the sends made meanwhile coalesce as ``Producer.send_async``'s do), and waits
    only while ``max_in_flight`` are unanswered. Sends unanswered at ``shutdown()`` end with ``ClientError``."""

    def __init__(self, group: str, namesrv: str | None = None, **options: Any) -> None:
        self.producer = Producer(group, namesrv, **options)  # underneath; its blocking calls are refused on the loop
        self._window: asyncio.Semaphore | None = None

    def set_session_credentials(self, access_key: str, secret_key: str, security_token: str = "") -> Self:
        """As ``Producer.set_session_credentials``; before ``start``."""
        self.producer.set_session_credentials(access_key, secret_key, security_token)
        return self

    def use_tls(self, trust_cert_path: str = "") -> Self:
        """As ``Producer.use_tls``; before ``start``."""
        self.producer.use_tls(trust_cert_path)
        return self

    async def start(self) -> Self:
        if self._window is None:
            await self.producer._start_on_running_loop()
            self._window = asyncio.Semaphore(self.producer.max_in_flight)
        return self

    async def shutdown(self) -> None:
        self._window = None
        await self.producer._shutdown_on_running_loop()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def send(self, msg: Message, *, selector: MessageQueueSelector | None = None, arg: Any = None,
                   queue: MessageQueue | None = None, timeout_s: float | None = None) -> SendResult:
        """Send and wait for the broker's answer, as ``Producer.send``."""
        self._started()
        return await self.producer._send(msg, selector=selector, arg=arg, queue=queue, timeout_s=timeout_s)

    async def send_async(self, msg: Message, queue: MessageQueue | None = None) -> asyncio.Future[SendResult]:
        """Start a send and return the future of its answer; waits only for room in the window."""
        window = self._started()
        await window.acquire()
        try:
            if self._window is not window:
                # shut down meanwhile (the room came from the sends shutdown ended): a send started now could reach
                # the loop after shutdown returned, with no client left to take it
                raise ClientError("AsyncProducer is shut down")
            sent = self.producer.send_async(msg, queue)
        except BaseException:
            window.release()
            raise
        answer: asyncio.Future[SendResult] = asyncio.get_running_loop().create_future()
        sent.add_done_callback(functools.partial(_answer, window, answer))
        return answer

    def _started(self) -> asyncio.Semaphore:
        if self._window is None:
            raise ClientError("AsyncProducer is not started")
        return self._window


def _answer(window: asyncio.Semaphore, answer: asyncio.Future[SendResult], sent: SendFuture) -> None:
    """Copy a send's outcome to its asyncio future and free its place (on the loop, where sends are answered)."""
    window.release()
    if answer.done():  # the caller cancelled it
        return
    exc = sent.exception()
    if exc is not None:
        answer.set_exception(exc)
    else:
        answer.set_result(sent.result())
