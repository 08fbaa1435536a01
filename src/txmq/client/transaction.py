"""``TransactionProducer`` and ``TransactionListener`` (RocketMQ's ``TransactionMQProducer``), as the seeds
describe ``sendMessageInTransaction``:

1. mark the message (``TRAN_MSG=true``, ``PGROUP``) and send the half message synchronously;
2. on ``SEND_OK`` set the transaction id and run ``execute_local_transaction``; a flush or slave failure
   means ROLLBACK; an exception or ``None`` from the listener means UNKNOWN (the exception goes in the remark);
3. end the transaction (code 37, oneway) with every header field, and return a ``TransactionSendResult``.

Checks from the broker (code 39) run ``check_local_transaction`` on a bounded thread pool and are answered on
the connection they came in on, with ``fromTransactionCheck=true``. A full check queue drops the request with
a log line: the broker checks again at its next interval.

Half messages are not retried on another broker: a retry after a lost answer would leave a second half
message for one local transaction.

``end_transactions`` ends many transactions at once (txmq's TXMQ_END_TRANSACTION_BATCH, code 9005): one
request per broker and chunk of entries, each answered entry by entry; for callers that decide many
transactions together, such as the Spark sink's driver.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple, Protocol

import orjson

from txmq.client.instance import MessageQueue
from txmq.client.producer import Producer, SendResult, SendStatus
from txmq.client.runtime import ClientRuntime
from txmq.errors import BrokerError, ClientError, RemoteProtocolError
from txmq.message import (
    Message,
    MessageConst,
    MessageExt,
    MessageSysFlag,
    create_uniq_id,
    decode_message,
    decode_offset_msg_id,
)
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from txmq.remoting.transport import Connection

log = logging.getLogger("txmq.client")

# How long a shutdown waits for the checks of local transactions in progress (RocketMQ's producer shuts its check
# executor down without waiting)
_CHECKS_WAIT_S = 5.0
DISCOVER_AT_START_S = 10.0  # the brokers' discovery at start: past it, the start goes on without


class LocalTransactionState(Enum):
    COMMIT = "COMMIT_MESSAGE"
    ROLLBACK = "ROLLBACK_MESSAGE"
    UNKNOWN = "UNKNOW"

    @property
    def sys_flag(self) -> int:
        return {LocalTransactionState.COMMIT: MessageSysFlag.TRANSACTION_COMMIT_TYPE,
                LocalTransactionState.ROLLBACK: MessageSysFlag.TRANSACTION_ROLLBACK_TYPE,
                LocalTransactionState.UNKNOWN: MessageSysFlag.TRANSACTION_NOT_TYPE}[self]


class TransactionListener(Protocol):
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState | None:
        """Run the local transaction after the half message is stored."""
        ...

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState | None:
        """Answer the broker's question: did the local transaction of ``msg.transaction_id`` commit?"""
        ...


@dataclass(slots=True)
class TransactionSendResult(SendResult):
    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOWN


class HalfMessageRef(NamedTuple):
    """Where a half message is stored: what ending its transaction needs."""

    broker_name: str
    tran_state_table_offset: int
    commit_log_offset: int

    @classmethod
    def of(cls, result: SendResult) -> HalfMessageRef:
        return cls(result.message_queue.broker_name, result.queue_offset,
                   decode_offset_msg_id(result.offset_msg_id)[1])


class EndTransactionAnswer(NamedTuple):
    code: int
    remark: str | None = None

    @property
    def decided(self) -> bool:
        """The transaction has an outcome: this one (SUCCESS) or an earlier, different one (the first decision
        wins: TRANSACTION_SHOULD_COMMIT or TRANSACTION_SHOULD_ROLLBACK). Anything else may be retried."""
        return self.code in _DECIDED


_DECIDED = (ResponseCode.SUCCESS, ResponseCode.TRANSACTION_SHOULD_COMMIT, ResponseCode.TRANSACTION_SHOULD_ROLLBACK)


_Job = tuple[concurrent.futures.Future[None], Callable[..., None], tuple[Any, ...]]


class CheckThreads:
    """The producer's check threads: ``size`` daemon threads taking checks from a queue, in order. Not a
    ``ThreadPoolExecutor``, whose threads the interpreter joins at exit: a check that never returns (a database
    call without a timeout) would keep the process from ending after ``shutdown()`` gave up on it."""

    def __init__(self, size: int, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True) for i in range(size)]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., None], *args: Any) -> concurrent.futures.Future[None]:
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("check threads shut down")
            self._jobs.put((future, fn, args))
        return future

    def shutdown(self) -> None:
        """Cancel the checks not begun and end each thread after its check in progress, without waiting."""
        with self._lock:
            self._closed = True
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0].cancel()
        for _ in self._threads:
            self._jobs.put(None)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:
                future.set_exception(exc)


class TransactionProducer(Producer):
    def __init__(self, group: str, listener: TransactionListener, namesrv: str | None = None, *,
                 check_thread_pool_size: int = 4, check_queue_size: int = 2000, **kwargs: Any) -> None:
        super().__init__(group, namesrv, **kwargs)
        self.listener = listener
        self.check_thread_pool_size = check_thread_pool_size
        self._check_pool: CheckThreads  # made at each start: shutdown() ends its threads
        self._checking = threading.local()  # ``active`` while this thread runs ``check_local_transaction``
        self._check_slots = threading.BoundedSemaphore(check_queue_size)
        self._checks: set[concurrent.futures.Future[None]] = set()  # submitted, not done
        self.checks_received = 0

    async def _on_start(self) -> None:
        """Start, and make this producer known to every broker now: a new process of the group must be
        reachable by check-backs of transactions an earlier (crashed) process left pending."""
        await super()._on_start()
        assert self.instance is not None
        try:
            async with asyncio.timeout(DISCOVER_AT_START_S):
                await self.instance.discover_brokers()
        except (BrokerError, ClientError, TimeoutError) as exc:  # the periodic heartbeat and the first send try again
            log.warning("producer %s could not reach the brokers at start: %s", self.group, exc or "timed out")

    def shutdown(self) -> None:
        """From any thread but a check's: a shutdown waits for the checks in progress to end, at most
        ``_CHECKS_WAIT_S``."""
        if getattr(self._checking, "active", False):
            raise ClientError("shutdown() cannot run inside check_local_transaction (it would wait for the check "
                              "itself): call it from another thread")
        super().shutdown()

    def _before_runtime_close(self) -> None:
        """End the check threads (under the lock of start() and shutdown(): a start from another thread makes its
        pool after this). Checks still running after ``_CHECKS_WAIT_S`` are left to return on their own, as
        RocketMQ's shutdown gives up on its check executor: a check that never returned (a database that hangs)
        kept ``shutdown()`` from returning. Their answers go nowhere; the broker checks again."""
        self._check_pool.shutdown()
        _, running = concurrent.futures.wait(self._checks, _CHECKS_WAIT_S)
        if running:
            log.warning("producer %s shuts down with %d check%s of local transactions still running: left to "
                        "return on their own, unanswered (the broker checks again)", self.group, len(running),
                        "" if len(running) == 1 else "s")

    def _new_runtime(self, borrow: bool = False) -> ClientRuntime:
        self._check_pool = CheckThreads(self.check_thread_pool_size, f"txmq-check-{self.group}")
        return super()._new_runtime(borrow)

    # --- phase one and two ----------------------------------------------------------------------------

    def _next_queue(self, mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        return mqs[next(self._rr) % len(mqs)]

    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        msg.properties[MessageConst.TRANSACTION_PREPARED] = "true"
        msg.properties[MessageConst.PRODUCER_GROUP] = self.group
        msg.properties.pop(MessageConst.DELAY_TIME_LEVEL, None)
        # Each half is a transaction of its own, and its UNIQ_KEY is the id checks name it by: a Message sent again
        # (a template, a retry after a send that raised) keeping its last id would be answered from the log of
        # that other transaction.
        msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = create_uniq_id()
        # One attempt only (a selector means no retry); never by setting retry_times to 0 for the duration,
        # which races with other threads' sends and could leave the producer retrying half messages.
        send_result = self.send(msg, selector=self._next_queue)
        state = LocalTransactionState.UNKNOWN
        error: BaseException | None = None
        if send_result.status == SendStatus.SEND_OK:
            if send_result.transaction_id:
                msg.properties[MessageConst.TRANSACTION_ID] = send_result.transaction_id
            msg.transaction_id = msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            try:
                state = self.listener.execute_local_transaction(msg, arg) or LocalTransactionState.UNKNOWN
            except Exception as exc:  # the local transaction's failure is the user's; we report it, not raise it
                log.info("execute_local_transaction raised %r: state UNKNOWN", exc)
                error = exc
        else:
            state = LocalTransactionState.ROLLBACK
        try:
            self._call(self._end_transaction(send_result, state, error), stopping=True)
        except ClientError as exc:
            log.warning("local transaction %s is %s but ending it failed (the broker will check back): %s",
                        msg.transaction_id, state.name, exc)
        return TransactionSendResult(send_result.status, send_result.msg_id, send_result.offset_msg_id,
                                     send_result.queue_id, send_result.queue_offset, send_result.message_queue,
                                     send_result.transaction_id or msg.transaction_id,
                                     local_transaction_state=state)

    async def _end_transaction(self, result: SendResult, state: LocalTransactionState,
                               error: BaseException | None) -> None:
        assert self.instance is not None
        ref = HalfMessageRef.of(result)
        header = EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=ref.tran_state_table_offset,
            commit_log_offset=ref.commit_log_offset, commit_or_rollback=state.sys_flag, from_transaction_check=False,
            msg_id=result.msg_id, transaction_id=result.transaction_id or result.msg_id)
        cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext(), oneway=True)
        if error is not None:
            cmd.remark = f"executeLocalTransactionBranch exception: {error!r}"
        await self.instance.remoting.invoke_oneway(self.instance.broker_addr(ref.broker_name), cmd)

    def end_transactions(self, ends: Sequence[tuple[HalfMessageRef, LocalTransactionState]], *, chunk: int = 1000,
                         in_flight: int = 4, timeout_s: float = 30.0) -> list[EndTransactionAnswer]:
        """End many transactions of this group, confirmed: TXMQ_END_TRANSACTION_BATCH to the broker of each
        half, ``chunk`` entries a request, ``in_flight`` requests at a time. One answer per entry, in order; a
        request that failed (connection, timeout, unknown broker) answers SYSTEM_ERROR for each of its entries,
        which may be retried (repeats are harmless) or left to check-back."""
        return self._call(self.end_transactions_async(ends, chunk=chunk, in_flight=in_flight, timeout_s=timeout_s),
                          None)

    async def end_transactions_async(self, ends: Sequence[tuple[HalfMessageRef, LocalTransactionState]], *,
                                     chunk: int = 1000, in_flight: int = 4,
                                     timeout_s: float = 30.0) -> list[EndTransactionAnswer]:
        """``end_transactions`` on the client's loop."""
        out = [EndTransactionAnswer(ResponseCode.SYSTEM_ERROR, "not sent")] * len(ends)
        per_broker: dict[str, list[int]] = {}
        for i, (ref, _) in enumerate(ends):
            per_broker.setdefault(ref.broker_name, []).append(i)
        slots = asyncio.Semaphore(in_flight)

        async def send(broker: str, which: list[int]) -> None:
            assert self.instance is not None
            body = orjson.dumps({"producerGroup": self.group, "entries": [
                {"tranStateTableOffset": ends[i][0].tran_state_table_offset,
                 "commitLogOffset": ends[i][0].commit_log_offset, "commitOrRollback": ends[i][1].sys_flag}
                for i in which]})
            async with slots:
                try:
                    if broker not in self.instance.broker_addrs:
                        await self.instance.discover_brokers()
                    resp = await self.instance.invoke_broker(
                        broker, RemotingCommand.request(RequestCode.TXMQ_END_TRANSACTION_BATCH, body=body), timeout_s)
                    answers = orjson.loads(resp.body)["results"] if resp.code == ResponseCode.SUCCESS else None
                except (ClientError, BrokerError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
                    failed = EndTransactionAnswer(ResponseCode.SYSTEM_ERROR, f"ending transactions on {broker}: {exc}")
                    for i in which:
                        out[i] = failed
                    return
            if answers is None or len(answers) != len(which):
                failed = EndTransactionAnswer(resp.code if answers is None else ResponseCode.SYSTEM_ERROR,
                                              resp.remark if answers is None else "answer does not match the request")
                for i in which:
                    out[i] = failed
                return
            for i, a in zip(which, answers, strict=True):
                out[i] = EndTransactionAnswer(a["code"], a.get("remark"))

        await asyncio.gather(*(send(broker, which[k:k + chunk]) for broker, which in per_broker.items()
                               for k in range(0, len(which), chunk)))
        return out

    # --- check-back -----------------------------------------------------------------------------------

    def _request_handler(self, conn: Connection, cmd: RemotingCommand) -> Any:
        if cmd.code != RequestCode.CHECK_TRANSACTION_STATE:
            return None
        try:
            header = CheckTransactionStateRequestHeader.from_ext(cmd.ext_fields)
            msg, _ = decode_message(cmd.body)
        except RemoteProtocolError as exc:
            log.warning("unreadable check request from %s: %s", conn.remote_address, exc)
            return None
        if msg.properties.get(MessageConst.PRODUCER_GROUP, self.group) != self.group:
            return None
        self.checks_received += 1
        if not self._check_slots.acquire(blocking=False):
            log.warning("check queue full: check of %s dropped (the broker will ask again)", header.transaction_id)
            return None
        msg.transaction_id = msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or header.transaction_id
        loop = self._runtime.loop if self._runtime else None
        future = self._check_pool.submit(self._check, conn, header, msg, loop)
        self._checks.add(future)
        future.add_done_callback(self._check_done)
        return None

    def _check_done(self, future: concurrent.futures.Future[None]) -> None:
        self._checks.discard(future)
        self._check_slots.release()

    def _check(self, conn: Connection, header: CheckTransactionStateRequestHeader, msg: MessageExt, loop: Any) -> None:
        error: BaseException | None = None
        self._checking.active = True
        try:
            state = self.listener.check_local_transaction(msg) or LocalTransactionState.UNKNOWN
        except Exception as exc:
            state, error = LocalTransactionState.UNKNOWN, exc
            log.warning("check_local_transaction raised %r: state UNKNOWN", exc)
        finally:
            self._checking.active = False
        end = EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset, commit_or_rollback=state.sys_flag,
            from_transaction_check=True, msg_id=msg.msg_id, transaction_id=header.transaction_id)
        cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, end.to_ext(), oneway=True)
        if error is not None:
            cmd.remark = f"checkLocalTransactionState exception: {error!r}"
        if loop is not None and not conn.closed:
            loop.call_soon_threadsafe(self._send_quietly, conn, cmd)

    @staticmethod
    def _send_quietly(conn: Connection, cmd: RemotingCommand) -> None:
        try:
            conn.send(cmd)
        except ClientError as exc:
            log.warning("answer to a check could not be sent: %s", exc)
