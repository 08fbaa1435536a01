"""``PushConsumer`` (RocketMQ's ``DefaultMQPushConsumer``): rebalancing, long-poll pulls, concurrent or
orderly consumption, retries through ``%RETRY%group`` and the dead-letter topic.

* Clustering: the group's consumers split the queues (``allocate_averagely``) and rebalance when the broker
  says the group changed (code 40) and every ``rebalance_interval_s``; offsets are committed to the broker.
  Broadcasting: every consumer takes every queue and keeps its offsets in memory.
* Each owned queue has one pull loop; pulled messages wait in a bounded process queue (``pull_threshold``
  messages per queue: the loop pauses when it is full). The committed offset is the lowest offset still being
  consumed, so a crash replays and never skips (at-least-once).
* ``RECONSUME_LATER`` (or an exception) sends the message back (code 36): the broker stores it in the retry
  topic with a growing delay and, after ``max_reconsume_times`` (-1: 16, as in RocketMQ), in ``%DLQ%group``.
* Orderly: a queue is consumed only while this client holds its lock on the broker (codes 41/42), one batch at
  a time; a failed batch is retried locally after ``suspend_s``, each of its messages going to the DLQ after its
  own ``max_reconsume_times`` retries (-1: no limit, as in RocketMQ).
* The listener runs on ``consume_thread_nums`` threads, or, with ``listener_on_loop``, on the client's own loop
  thread (beyond RocketMQ, as nats-py calls its callbacks): no hand-off between threads per delivery, for
  listeners that return quickly and never block. Everything else (offsets, send-back, retries, orderly locks,
  ``pull_threshold``) is the same; the send-backs are awaited on the loop instead of blocking a thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
import zlib
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Self

import orjson

from txmq.client.base import ClientBase
from txmq.client.instance import MessageQueue
from txmq.client.rebalance import allocate_averagely
from txmq.client.runtime import ClientRuntime
from txmq.errors import BrokerError, ClientError, RemoteProtocolError
from txmq.failure_run import FailureRun
from txmq.message import MessageConst, MessageExt, MessageSysFlag, decode_messages, java_string_hash
from txmq.remoting import fastjson
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import (
    ConsumerSendMsgBackRequestHeader,
    PullMessageRequestHeader,
    parse_tag_expression,
)
from txmq.remoting.transport import Connection
from txmq.topic import RETRY_GROUP_TOPIC_PREFIX, check_group, check_topic, retry_topic

log = logging.getLogger("txmq.client")
# Pull answers that serve the queue: they end a run of failed pulls (an error answer does not).
_SERVED = frozenset({ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
                     ResponseCode.PULL_OFFSET_MOVED})
# What ``max_reconsume_times=-1`` means (RocketMQ's getMaxReconsumeTimes): 16 retries when consuming concurrently,
# Integer.MAX_VALUE (no limit) in order
_CONCURRENT_MAX_RECONSUME_TIMES = 16
_ORDERLY_MAX_RECONSUME_TIMES = (1 << 31) - 1
# How long a queue's drop waits for the listener calls in progress on it, so that what they consume is committed, not
# consumed again; a shutdown waits this long in all, for every queue (RocketMQ waits awaitTerminationMillisWhenShutdown)
_CALLS_WAIT_S = 5.0


class ConsumeStatus(Enum):
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class MessageModel(Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(Enum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


MessageListener = Callable[[list[MessageExt]], ConsumeStatus]


def prepare_for_user(msg: MessageExt) -> MessageExt:
    """Undo what the broker did for retries and compression, so listeners see the message as sent."""
    if msg.sys_flag & MessageSysFlag.COMPRESSED:
        msg.body = zlib.decompress(msg.body)
        msg.sys_flag &= ~MessageSysFlag.COMPRESSED
    real = msg.properties.get(MessageConst.RETRY_TOPIC)
    if real and msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        msg.topic = real
    msg.transaction_id = msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    return msg


class TagFilter:
    """A subscription's expression and the client-side half of its filtering. TAG: the broker matches hash codes,
    the client the strings. SQL92: the broker alone filters, by the message's properties."""

    def __init__(self, expression: str, expression_type: str = "TAG") -> None:
        self.expression = expression
        self.expression_type = expression_type
        tags = parse_tag_expression(expression) if expression_type == "TAG" else None
        self.tags = None if tags is None else set(tags)
        self.codes = [] if tags is None else sorted({java_string_hash(t) for t in tags})

    @classmethod
    def of(cls, expression: str, sql: str | None) -> TagFilter:
        """The filter of a tag ``expression``, or of a ``sql`` one (SQL92) when given instead."""
        if sql is None:
            return cls(expression)
        if expression not in ("", "*"):
            raise ClientError("subscribe by tags or by sql, not both")
        return cls(sql, "SQL92")

    def match(self, msg: MessageExt) -> bool:
        return self.tags is None or msg.tags in self.tags

    def subscription_data(self, topic: str, sub_version: int) -> dict[str, Any]:
        """As a heartbeat and CHECK_CLIENT_CONFIG carry it (RocketMQ's ``SubscriptionData``)."""
        return {"topic": topic, "subString": self.expression, "tagsSet": sorted(self.tags or []),
                "codeSet": self.codes, "subVersion": sub_version, "expressionType": self.expression_type,
                "classFilterMode": False}


@dataclass(slots=True)
class ProcessQueue:
    """Messages pulled from one queue and not yet consumed, by queue offset (insertion order is offset order)."""

    mq: MessageQueue
    msgs: dict[int, MessageExt] = field(default_factory=dict)
    next_offset: int = 0
    dropped: bool = False
    locked_until: float = 0.0
    orderly_busy: bool = False
    consuming: int = 0  # listener calls in progress for this queue (concurrent mode)
    pull_addr: str = ""  # where the pull in flight went

    def consumed_offset(self) -> int:
        """Everything below this offset is consumed."""
        return next(iter(self.msgs)) if self.msgs else self.next_offset


class PushConsumer(ClientBase):
    def __init__(self, group: str, namesrv: str | None = None, *,
                 message_model: MessageModel = MessageModel.CLUSTERING,
                 consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 consume_timestamp_ms: int = 0, consume_thread_nums: int = 4, pull_batch_size: int = 32,
                 consume_batch_max_size: int = 1, max_reconsume_times: int = 16, orderly: bool = False,
                 pull_threshold: int = 1000, rebalance_interval_s: float = 20.0, suspend_timeout_ms: int = 15_000,
                 persist_interval_s: float = 5.0, suspend_s: float = 1.0, pull_delay_when_exception_s: float = 1.0,
                 listener_on_loop: bool = False, instance_name: str | None = None) -> None:
        """``max_reconsume_times``: the retries of a message before the dead letters (0: none; at most a Java
        int's largest); -1 (the Java client's default) means what it means in RocketMQ: 16 for concurrent
        consumption, no limit for orderly.
        ``listener_on_loop``: call the listener on the client's loop thread, not on consume threads (which are
        then never started). Only for a listener that returns quickly and never blocks: while it runs, this
        consumer's pulls, heartbeats and offset commits wait, and it must not call this consumer's methods."""
        check_group(group)
        for name, value in (("consume_thread_nums", consume_thread_nums), ("pull_batch_size", pull_batch_size),
                            ("consume_batch_max_size", consume_batch_max_size),
                            ("pull_threshold", pull_threshold), ("rebalance_interval_s", rebalance_interval_s),
                            ("suspend_timeout_ms", suspend_timeout_ms), ("persist_interval_s", persist_interval_s),
                            ("suspend_s", suspend_s), ("pull_delay_when_exception_s", pull_delay_when_exception_s)):
            if not value > 0:  # a pause of 0 would re-pull or re-run in a loop that never yields to the broker
                raise ValueError(f"{name} must be above 0, not {value!r}")
        if not -1 <= max_reconsume_times <= _ORDERLY_MAX_RECONSUME_TIMES:  # what the send-back's header can carry
            raise ValueError(f"max_reconsume_times must be -1 (RocketMQ's default) or 0 to "
                             f"{_ORDERLY_MAX_RECONSUME_TIMES}, not {max_reconsume_times!r}")
        super().__init__(namesrv, instance_name, group)
        self.group = group
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms
        self.pull_batch_size = pull_batch_size
        self.consume_batch_max_size = consume_batch_max_size
        self.consume_thread_nums = consume_thread_nums
        self.max_reconsume_times = max_reconsume_times
        self.orderly = orderly
        self.pull_threshold = pull_threshold
        self.rebalance_interval_s = rebalance_interval_s
        self.suspend_timeout_ms = suspend_timeout_ms
        self.persist_interval_s = persist_interval_s
        self.suspend_s = suspend_s
        # RocketMQ's pullTimeDelayMillsWhenException (1 s): the pause before pulling a queue again after the broker
        # refused a pull, or sent it to a member this client cannot reach
        self.pull_delay_when_exception_s = pull_delay_when_exception_s
        self.listener_on_loop = listener_on_loop
        self.subscriptions: dict[str, TagFilter] = {}
        self.listener: MessageListener | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor  # made at each start: shutdown() ends its threads
        self.queues: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        # runs of failed pulls now, by ("address", addr) and ("broker", name): a line each, not one per pull
        self._pull_failures: dict[tuple[str, str], FailureRun] = {}
        # tasks started from callbacks (operator resets; send-backs and orderly consumption with
        # ``listener_on_loop``), kept here from the garbage collector until they end
        self._background: set[asyncio.Task[None]] = set()
        # the operator resets among them, which a shutdown waits for; made at each start, as the rebalance lock
        self._resets: set[asyncio.Task[None]]
        # (orderly) queues a rebalance gave up while a listener call on them still ran, and whether to commit them
        # (not when an operator reset them): locked, its lock renewed, until the call returns
        self._releasing: dict[MessageQueue, tuple[ProcessQueue, bool]] = {}
        # queues a drop let go (a rebalance's, a reset's, a shutdown's) while a listener call on them still ran
        self._left_running: list[ProcessQueue] = []
        self.offsets: dict[MessageQueue, int] = {}
        self._rebalance_now: asyncio.Event | None = None
        self._checked = False  # the masters accepted the subscriptions at this start (heartbeats may go)
        # made at each start (a lock belongs to one loop): held while the queues held change (a rebalance, an
        # operator's reset) and while a queue's offset is read and committed, so that none of them comes between
        # another's steps
        self._rebalance_lock: asyncio.Lock
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = threading.Lock()
        self._listening = threading.local()  # ``active`` while this thread runs the listener

    # --- configuration --------------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*", *, sql: str | None = None) -> None:
        """Consume ``topic``'s messages whose tag ``expression`` selects (``TagA || TagB``, ``*``), or those
        whose properties the SQL92 expression ``sql`` selects (``a > 5 AND TAGS IN ('x')``), filtered at the
        broker. A SQL92 expression the broker refuses makes ``start()`` raise ``BrokerError``."""
        check_topic(topic)
        self.subscriptions[topic] = TagFilter.of(expression, sql)

    def register_listener(self, fn: MessageListener) -> None:
        self.listener = fn

    # --- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> Self:
        if self.listener is None or not self.subscriptions:
            raise ClientError("subscribe to a topic and register a listener before start()")
        if not self.started and self.message_model == MessageModel.CLUSTERING:
            self.subscriptions.setdefault(retry_topic(self.group), TagFilter("*"))
        return super().start()

    def _new_runtime(self, borrow: bool = False) -> ClientRuntime:
        self._pool = concurrent.futures.ThreadPoolExecutor(self.consume_thread_nums,
                                                           thread_name_prefix=f"txmq-consume-{self.group}")
        return super()._new_runtime(borrow)

    async def _on_start(self) -> None:
        assert self.instance is not None
        self._rebalance_now = asyncio.Event()
        self._rebalance_lock = asyncio.Lock()
        self._resets = set()
        self._checked = False
        for topic in self.subscriptions:
            with contextlib.suppress(ClientError):
                await self.instance.update_route(topic)
        await self._check_subscriptions()
        self._checked = True
        await self.instance.start()
        await self.instance.send_heartbeat_to_all()
        self._tasks.append(asyncio.create_task(self._rebalance_loop()))
        self._tasks.append(asyncio.create_task(self._persist_loop()))

    async def _check_subscriptions(self) -> None:
        """Ask each master of a SQL92-subscribed topic whether it filters by that expression
        (CHECK_CLIENT_CONFIG, as RocketMQ's ``checkClientInBroker``): a refusal raises ``BrokerError``."""
        assert self.instance is not None
        for topic, filt in self.subscriptions.items():
            if filt.expression_type == "TAG":
                continue
            try:
                route = await self.instance.route(topic)
            except (BrokerError, ClientError):
                continue  # no route yet: the broker checks the heartbeat's subscriptions too
            for name in sorted(route.broker_addrs) if route else ():
                body = orjson.dumps({"clientId": self.instance.client_id, "group": self.group,
                                     "subscriptionData": filt.subscription_data(topic, 0)})
                resp = await self.instance.invoke_broker(
                    name, RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, body=body))
                if resp.code != ResponseCode.SUCCESS:
                    raise BrokerError(resp.code, resp.remark)

    async def _on_shutdown(self) -> None:
        assert self.instance is not None
        for t in self._tasks:
            t.cancel()
        # Under the rebalance lock: an operator's reset under way ends first (its drops are not committed, and its
        # offsets are committed last), where a drop beside it committed the offsets consumed before it over them.
        async with self._rebalance_lock:
            await self._drop_queues(list(self.queues), final=True)
            for mq, (pq, commit) in list(self._releasing.items()):  # every lock let go (RocketMQ's unlockAll)
                await self._release(mq, pq, commit)
        # A reset told meanwhile commits its offsets (over those just committed) before the connections close.
        await asyncio.gather(*self._resets, return_exceptions=True)
        await self._persist_offsets()
        await self.instance.unregister(consumer_group=self.group)
        await self.instance.close()

    def shutdown(self) -> None:
        """From any thread but the listener's: a shutdown waits for the listener calls in progress to end."""
        if getattr(self._listening, "active", False):
            raise ClientError("shutdown() cannot run inside this consumer's message listener (it would wait for "
                              "the listener itself): call it from another thread")
        super().shutdown()

    def _before_runtime_close(self) -> None:
        """End the consume threads; listener calls still running after the drops' wait are left to return on
        their own (nothing of theirs is committed any more: their messages come to the group again), as RocketMQ's
        shutdown gives up on its consume threads: waiting for them, a listener that never returns kept
        ``shutdown()`` from returning. Judged by every queue whose call may run: those a drop let go running
        (a rebalance's or a reset's before this shutdown), and those still held (a shutdown cut short)."""
        held = [*self._left_running, *self.queues.values(), *(pq for pq, _ in self._releasing.values())]
        self._left_running = []
        running = sum(self._busy(pq) for pq in held)
        if running:
            log.warning("consumer %s shuts down with listener calls still running on %d queues: their messages are "
                        "not committed and are consumed again", self.group, running)
        self._pool.shutdown(wait=not running, cancel_futures=True)

    def _heartbeat_data(self) -> dict[str, Any]:
        """Nothing (no heartbeat) until the masters accepted the SQL92 subscriptions, as RocketMQ's start runs
        ``checkClientInBroker`` before its first heartbeat: a route found meanwhile heartbeats nobody."""
        if not self._checked:
            return {}
        now = int(time.time() * 1000)
        subs = [f.subscription_data(t, now) for t, f in self.subscriptions.items()]
        return {"producerDataSet": [], "consumerDataSet": [{
            "groupName": self.group, "consumeType": "CONSUME_PASSIVELY", "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value, "subscriptionDataSet": subs, "unitMode": False}]}

    def _request_handler(self, conn: Connection, cmd: RemotingCommand) -> Any:
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and self._rebalance_now is not None:
            self._rebalance_now.set()
        elif cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET and cmd.ext_fields.get("group") == self.group:
            reset = self._spawn(self._reset_topic(cmd.ext_fields.get("topic", ""), cmd.body))
            self._resets.add(reset)
            reset.add_done_callback(self._resets.discard)
        return None

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Start ``coro`` as a task of the loop (from the loop), kept until it ends."""
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _reset_topic(self, topic: str, body: bytes) -> None:
        """An operator reset the group's offsets on ``topic``: release its queues without committing what they
        hold, commit the new offsets (``ResetOffsetBody``; again, since this client may have committed its own
        between the broker's reset and this), then take the queues again from there, as RocketMQ's resetOffset.
        Under the rebalance lock: a rebalance between the drop and the commits would take the queues back from the
        offsets this client committed last, and a persist pass would commit those over the new ones."""
        try:
            table = fastjson.loads(body).get("offsetTable") or []
        except (ValueError, AttributeError):
            table = []
        async with self._rebalance_lock:
            await self._drop_queues([q for q in self.queues if q.topic == topic], commit=False)
            self._release_uncommitted(topic)
            for key, offset in table:
                mq = MessageQueue(topic, key["brokerName"], int(key["queueId"]))
                self.offsets[mq] = int(offset)  # where a broadcasting consumer keeps it (RocketMQ's local store)
                await self._commit_offset(mq, int(offset))
        log.info("consumer %s: offsets of %s reset by an operator", self.group, topic)
        if self._rebalance_now is not None:
            self._rebalance_now.set()

    def _release_uncommitted(self, topic: str) -> None:
        """(Orderly) ``topic``'s queues given up while a listener call on them ran are released without committing:
        what they consumed is older than an operator's reset."""
        for mq, (pq, _) in list(self._releasing.items()):
            if mq.topic == topic:
                self._releasing[mq] = (pq, False)

    # --- rebalance ------------------------------------------------------------------------------------

    async def _rebalance_loop(self) -> None:
        assert self._rebalance_now is not None
        while True:
            complete = False
            try:
                complete = await self.rebalance()
            except Exception as exc:  # a broker's answer of another shape too: the next rebalance may do better
                log.warning("rebalance of %s failed: %s: %s", self.group, type(exc).__name__, exc)
            # A subscribed topic without a route yet (not created, or its broker not registered): look again
            # soon, so that its first messages do not wait a whole rebalance interval.
            wait_s = self.rebalance_interval_s if complete else min(1.0, self.rebalance_interval_s)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._rebalance_now.wait()
            self._rebalance_now.clear()

    async def rebalance(self) -> bool:
        """Take and release queues; False when some subscribed topic has no readable queue yet, or (orderly) some
        queue held is not locked yet. One at a time, and never inside an operator's reset (``_reset_topic``)."""
        async with self._rebalance_lock:
            return await self._do_rebalance()

    async def _do_rebalance(self) -> bool:
        """``rebalance`` under its lock.

        A topic without a route keeps the queues this consumer holds, as RocketMQ's rebalance leaves it: a broker
        that stops cleanly unregisters, so its topics are unrouted until it is back, and releasing their queues
        then would take them again from the broker's committed offsets, consuming everything since the last
        commit again."""
        assert self.instance is not None
        wanted: set[MessageQueue] = set()
        complete = True
        for topic in list(self.subscriptions):  # subscribe() may add one while this awaits
            route = await self.instance.update_route(topic)
            if route is None or not route.subscribe_queues:
                complete = False
                wanted.update(mq for mq in self.queues if mq.topic == topic)
                continue
            mqs = sorted(route.subscribe_queues)
            if self.message_model == MessageModel.BROADCASTING:
                wanted.update(mqs)
                continue
            cids = await self._consumer_ids(mqs[0].broker_name)
            if not cids:
                # no member list (this client's heartbeat deferred, as while the broker is busy creating topics, or
                # not arrived; it was sent again, and a member joining makes the broker notify the group): keep
                # what is held, as RocketMQ's rebalance skips a topic whose consumer ids it could not get; taking
                # every queue would consume them beside the members the broker lists
                wanted.update(mq for mq in self.queues if mq.topic == topic)
                continue
            wanted.update(allocate_averagely(mqs, cids, self.instance.client_id))  # none when not listed
        await self._drop_queues([q for q in self.queues if q not in wanted])
        taken = sorted(wanted - set(self.queues) - set(self._releasing))  # one given up: taken once released
        if self.orderly:
            # An orderly queue is taken once locked, as RocketMQ's rebalance does: its offset is then read after
            # the previous owner committed it and let the lock go, so nothing it consumed comes again.
            locked = await self._lock_queues(taken)
            complete = complete and len(locked) == len(taken)
            taken = [mq for mq in taken if mq in locked]
        for mq in taken:
            await self._add_queue(mq)
        if self.orderly and not await self._lock_all():
            complete = False
        return complete

    async def _consumer_ids(self, broker_name: str) -> list[str]:
        assert self.instance is not None
        resp = await self.instance.invoke_broker(
            broker_name, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": self.group}))
        if resp.code == ResponseCode.SUCCESS:
            return list(orjson.loads(resp.body).get("consumerIdList") or [])
        await self.instance.send_heartbeat_to_all()  # so that the next rebalance finds this client listed
        return []

    async def _add_queue(self, mq: MessageQueue) -> None:
        offset = await self._initial_offset(mq)
        pq = ProcessQueue(mq, next_offset=offset)
        self.queues[mq] = pq
        self.offsets[mq] = offset
        self._pull_tasks[mq] = asyncio.create_task(self._pull_loop(pq))
        log.info("consumer %s takes %s:%s:%d from offset %d", self.group, mq.broker_name, mq.topic, mq.queue_id, offset)

    async def _drop_queues(self, mqs: list[MessageQueue], commit: bool = True, final: bool = False) -> None:
        """``_drop_queue`` each, with one wait for their listener calls: ``_CALLS_WAIT_S`` in all, not per queue (a
        rebalance giving up many busy queues, a reset, a shutdown: each waits for the one before it ends).
        RocketMQ's rebalance does not wait for them at all; waiting lets the calls that end in time be committed.
        Every queue stops taking calls before the wait: one stopped at its turn went on starting calls while those
        before it were waited for, and had no wait left for them."""
        for mq in mqs:
            await self._stop_queue(mq)
        deadline = time.monotonic() + _CALLS_WAIT_S
        for mq in mqs:
            await self._drop_queue(mq, commit, final, deadline)

    async def _stop_queue(self, mq: MessageQueue) -> None:
        """Stop pulling ``mq`` and starting listener calls for it (``_drop_queue`` lets it go after)."""
        task = self._pull_tasks.pop(mq, None)
        if task is not None:
            task.cancel()
            # waited for, not awaited: a cancel of this drop itself (a shutdown's) must propagate, which
            # suppressing the pull's CancelledError around ``await task`` swallowed
            await asyncio.wait([task])
            if not task.cancelled():
                task.result()  # the pull loop's own failure, as before
        pq = self.queues.get(mq)
        if pq is not None:
            with self._lock:
                pq.dropped = True  # from now on no listener call starts for this queue

    async def _drop_queue(self, mq: MessageQueue, commit: bool, final: bool, deadline: float) -> None:
        """Let the listener calls in progress on stopped ``mq`` end (until ``deadline``), commit its offset (unless
        ``commit`` is False) and, orderly, unlock it; an orderly queue whose call still runs stays locked until it
        returns (unless ``final``: the consumer shuts down). The queue stays held until then: a drop cut short (a
        rebalance cancelled by ``shutdown``) leaves it to the next one, and its offset to shutdown's commit,
        instead of releasing it uncommitted."""
        pq = self.queues.get(mq)
        if pq is None:
            return
        # Let listener calls in progress finish so that their offsets are committed, not replayed. Messages
        # that never reached the listener stay in ``pq.msgs`` and keep the committed offset below them.
        busy = not await self._idle_by(pq, deadline)
        if busy:  # shutdown's end judges by it (the calls that ended meanwhile forgotten)
            self._left_running = [*(p for p in self._left_running if self._busy(p)), pq]
        if not commit:
            self.offsets.pop(mq, None)
        else:
            self.offsets[mq] = self._consumed_offset(pq)
            await self._commit_offset(mq, self.offsets[mq])
        if self.orderly and busy and not final:
            # RocketMQ keeps such a queue until its consume lock is free: unlocked now, the next owner would consume
            # it beside the call still running here
            log.warning("consumer %s: a listener call on %s:%d still runs: its lock is let go once it returns",
                        self.group, mq.topic, mq.queue_id)
            self._releasing[mq] = (pq, commit)
            self._spawn(self._release_when_idle(mq, pq))
        elif self.orderly:
            await self._unlock(mq)
        if self.queues.get(mq) is pq:
            del self.queues[mq]
        log.info("consumer %s releases %s:%d at offset %d", self.group, mq.topic, mq.queue_id,
                 self._consumed_offset(pq))

    async def _idle_by(self, pq: ProcessQueue, deadline: float) -> bool:
        """Wait until no listener call on ``pq`` runs, at most until ``deadline`` (monotonic): whether none does."""
        while self._busy(pq):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def _busy(self, pq: ProcessQueue) -> bool:
        """Whether a listener call on ``pq`` runs (or an orderly run of them)."""
        with self._lock:
            return bool(pq.consuming or pq.orderly_busy)

    async def _release_when_idle(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """An orderly queue given up while a listener call on it ran: released once no call runs, then a
        rebalance at once: a queue an operator's reset gave up is this consumer's again, from the reset offset,
        without waiting for the periodic rebalance."""
        while self._busy(pq):
            await asyncio.sleep(0.1)
        async with self._rebalance_lock:  # a reset under way first says whether to commit
            releasing = self._releasing.get(mq)
            if releasing is None or releasing[0] is not pq:  # released by a shutdown meanwhile
                return
            await self._release(mq, pq, releasing[1])
        if self._rebalance_now is not None:
            self._rebalance_now.set()

    async def _release(self, mq: MessageQueue, pq: ProcessQueue, commit: bool) -> None:
        """Commit what the calls on a given-up orderly queue consumed (``commit``) and unlock it."""
        self._releasing.pop(mq, None)
        if commit:
            self.offsets[mq] = self._consumed_offset(pq)
            await self._commit_offset(mq, self.offsets[mq])
        await self._unlock(mq)

    # --- offsets --------------------------------------------------------------------------------------

    async def _initial_offset(self, mq: MessageQueue) -> int:
        assert self.instance is not None
        if self.message_model == MessageModel.CLUSTERING:
            resp = await self.instance.invoke_broker(mq.broker_name, RemotingCommand.request(
                RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": self.group, "topic": mq.topic,
                                                    "queueId": str(mq.queue_id)}))
            if resp.code == ResponseCode.SUCCESS:
                return int(resp.ext_fields.get("offset", "0"))
        elif mq in self.offsets:
            return self.offsets[mq]
        where = self.consume_from_where
        if where == ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET or mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            code, ext = RequestCode.GET_MIN_OFFSET, {}
        elif where == ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            code, ext = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"timestamp": str(self.consume_timestamp_ms)}
        else:
            code, ext = RequestCode.GET_MAX_OFFSET, {}
        resp = await self.instance.invoke_broker(mq.broker_name, RemotingCommand.request(
            code, {"topic": mq.topic, "queueId": str(mq.queue_id), **ext}))
        if resp.code != ResponseCode.SUCCESS:
            raise ClientError(f"cannot find a start offset for {mq}: {resp.remark}")
        return int(resp.ext_fields.get("offset", "0"))

    async def _commit_offset(self, mq: MessageQueue, offset: int) -> None:
        if self.message_model != MessageModel.CLUSTERING or self.instance is None:
            return
        cmd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": self.group, "topic": mq.topic, "queueId": str(mq.queue_id), "commitOffset": str(offset)})
        try:
            await self.instance.invoke_broker(mq.broker_name, cmd)
        except ClientError as exc:
            log.warning("committing offset %d of %s failed: %s", offset, mq, exc)

    async def _persist_offsets(self) -> None:
        """Commit each queue's consumed offset, each read and commit under the rebalance lock: a queue dropped
        meanwhile (by a rebalance, which commits it itself, or by an operator's reset, whose offsets must stay) is
        not committed, and no drop comes between a read and its commit."""
        for mq, pq in list(self.queues.items()):
            async with self._rebalance_lock:
                if pq.dropped:
                    continue
                self.offsets[mq] = self._consumed_offset(pq)
                await self._commit_offset(mq, self.offsets[mq])

    def _consumed_offset(self, pq: ProcessQueue) -> int:
        """``pq.consumed_offset()`` read under the lock the consume threads take messages off it with: iterating
        its messages while one is removed raises."""
        with self._lock:
            return pq.consumed_offset()

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(self.persist_interval_s)
            try:
                await self._persist_offsets()
            except Exception as exc:  # the next pass commits what this one did not: the loop must outlive it
                log.warning("committing the offsets of %s failed: %s: %s", self.group, type(exc).__name__, exc)

    # --- pulling --------------------------------------------------------------------------------------

    def _pull_run(self, key: tuple[str, str]) -> FailureRun:
        """The run of failed pulls from an address (it went away) or of a broker's queues (no member to pull them
        from): every queue read there fails together, and that is one event to log, not one per queue and try."""
        run = self._pull_failures.get(key)
        if run is None:
            run = self._pull_failures[key] = FailureRun(log)
        return run

    def _pulls_work(self, addr: str, broker_name: str) -> None:
        """A pull from ``addr`` of a queue of ``broker_name`` was served: the runs it ends are logged and
        forgotten (the table holds only what fails now)."""
        for key in (("address", addr), ("broker", broker_name)):
            run = self._pull_failures.pop(key, None)
            if run is not None:
                run.worked("pulls from %s work again", key[1])

    async def _pull_loop(self, pq: ProcessQueue) -> None:
        """Pull ``pq``'s queue for as long as it is owned. The next pull is on the socket as soon as an answer is
        decoded, before its messages are prepared and handed to the consume threads (RocketMQ's client issues it
        from the pull callback, the consumption decoupled by the process queue): a message that arrives meanwhile
        finds a pull held at the broker instead of waiting for this client's work and another round trip."""
        assert self.instance is not None
        filt = self.subscriptions.get(pq.mq.topic) or TagFilter("*")
        pending: asyncio.Task[RemotingCommand] | None = None
        try:
            while not pq.dropped:
                if pending is None:
                    if not self._may_pull(pq, 0):
                        await asyncio.sleep(0.05)
                        continue
                    pending = self._start_pull(pq, filt, pq.next_offset)
                addr = pq.pull_addr
                try:
                    resp = await pending
                except ClientError as exc:
                    self._pull_run(("address", addr)).failed(
                        "pulls from %s fail (%s): each queue pulls again every 0.2 s", addr, exc)
                    self.instance.failed(addr)
                    await asyncio.sleep(0.2)
                    continue
                finally:
                    pending = None
                self.instance.suggest(pq.mq, int(resp.ext_fields.get("suggestWhichBrokerId", "0")))
                next_offset = int(resp.ext_fields.get("nextBeginOffset", pq.next_offset))
                if resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY and next_offset == pq.next_offset \
                        and self.instance.sent_back(pq.mq, addr):
                    # A slave without slaveReadEnable sends every pull to its master; with the master gone, pulling
                    # it again at once would spin both processes: wait as RocketMQ's client after an exception.
                    self._pull_run(("broker", pq.mq.broker_name)).failed(
                        "pulls of %s: %s at %s, and no other member to pull from: each queue pulls again every %.1f s",
                        pq.mq.broker_name, resp.remark, addr, self.pull_delay_when_exception_s)
                    await asyncio.sleep(self.pull_delay_when_exception_s)
                    continue
                if self._pull_failures and resp.code in _SERVED:
                    self._pulls_work(addr, pq.mq.broker_name)
                if resp.code == ResponseCode.SUCCESS:
                    try:
                        found = decode_messages(resp.body)
                    except RemoteProtocolError as exc:
                        log.error("undecodable pull response from %s: %s", pq.mq, exc)
                        await asyncio.sleep(1.0)
                        continue
                    if self._may_pull(pq, len(found)):
                        pending = self._start_pull(pq, filt, next_offset)
                        # One turn of the loop before this client's work on the answer: in it the pull's task
                        # runs first and writes its request to the socket.
                        await asyncio.sleep(0)
                    try:
                        msgs = [prepare_for_user(m) for m in found if filt.match(m)]
                    except zlib.error as exc:
                        log.error("undecodable pull response from %s: %s", pq.mq, exc)
                        if pending is not None:  # read from the same offset again
                            pending.cancel()
                            pending = None
                        await asyncio.sleep(1.0)
                        continue
                    pq.next_offset = next_offset
                    if msgs:
                        self._deliver(pq, msgs)
                elif resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                    pq.next_offset = next_offset
                elif resp.code == ResponseCode.PULL_OFFSET_MOVED:
                    log.warning("offset of %s moved from %d to %d", pq.mq, pq.next_offset, next_offset)
                    pq.next_offset = next_offset
                else:
                    log.warning("pull from %s answered %d: %s", pq.mq, resp.code, resp.remark)
                    await asyncio.sleep(self.pull_delay_when_exception_s)
        finally:
            if pending is not None:
                pending.cancel()

    def _may_pull(self, pq: ProcessQueue, arriving: int) -> bool:
        """Flow control: the process queue (with ``arriving`` messages about to join it) has room, and an orderly
        consumer holds the queue's lock."""
        if len(pq.msgs) + arriving >= self.pull_threshold:
            return False
        return not (self.orderly and pq.locked_until < time.monotonic())

    def _start_pull(self, pq: ProcessQueue, filt: TagFilter, offset: int) -> asyncio.Task[RemotingCommand]:
        """A long-polling pull of ``pq``'s queue from ``offset``, as a task (its request is written once it runs)."""
        assert self.instance is not None
        mq = pq.mq
        header = PullMessageRequestHeader(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset,
            max_msg_nums=self.pull_batch_size,
            sys_flag=PullMessageRequestHeader.FLAG_SUSPEND | PullMessageRequestHeader.FLAG_SUBSCRIPTION,
            suspend_timeout_millis=self.suspend_timeout_ms, subscription=filt.expression,
            sub_version=0, expression_type=filt.expression_type)
        pq.pull_addr = self.instance.pull_addr(mq)
        return asyncio.get_running_loop().create_task(self.instance.remoting.invoke(
            pq.pull_addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext()),
            self.suspend_timeout_ms / 1000 + 5))

    def _deliver(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        with self._lock:
            for m in msgs:
                pq.msgs[m.queue_offset] = m
        if self.orderly:
            self._schedule_orderly(pq)
            return
        # One listener call per ``consume_batch_max_size`` messages, as RocketMQ's ConsumeRequests, but handed to
        # the pool as at most one task per consume thread: a task per message woke a sleeping thread per message,
        # and on two cores those wake-ups (a GIL hand-off each) could triple the client's CPU and halve the rate.
        size = self.consume_batch_max_size
        calls = [msgs[i : i + size] for i in range(0, len(msgs), size)]
        if self.listener_on_loop:
            self._consume_calls(pq, calls)
            return
        per_task = -(-len(calls) // self.consume_thread_nums)
        for k in range(0, len(calls), per_task):
            self._pool.submit(self._consume_calls, pq, calls[k : k + per_task])

    # --- concurrent consumption (consume threads, or the loop with ``listener_on_loop``) --------------

    def _call_listener(self, msgs: list[MessageExt]) -> ConsumeStatus:
        assert self.listener is not None
        self._listening.active = True
        try:
            status = self.listener(msgs)
        except BaseException:  # the listener's failure, whatever it raised (RocketMQ catches Throwable)
            # Not only Exception: KeyboardInterrupt or SystemExit raised on the loop would stop the loop (the
            # whole client), CancelledError end the queue's pull task, and on a consume thread any of them would
            # leave the batch unconsumed below the committed offset for good.
            log.exception("message listener of %s raised: messages will be consumed again later", self.group)
            return ConsumeStatus.RECONSUME_LATER
        finally:
            self._listening.active = False
        return status if isinstance(status, ConsumeStatus) else ConsumeStatus.RECONSUME_LATER

    def _consume_calls(self, pq: ProcessQueue, calls: list[list[MessageExt]]) -> None:
        for msgs in calls:
            self._consume_concurrently(pq, msgs)

    def _consume_concurrently(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        with self._lock:
            if pq.dropped:
                return
            pq.consuming += 1
        try:
            status = self._call_listener(msgs)
            if status == ConsumeStatus.SUCCESS:
                failed: list[MessageExt] = []
            elif self.listener_on_loop:
                # Sending back must not block the loop: a task does it, counted as a call still in progress.
                with self._lock:
                    pq.consuming += 1
                self._spawn(self._send_back_on_loop(pq, msgs))
                return
            else:
                failed = [m for m in msgs if not self._send_back(m, pq.mq.broker_name, 0)]
            self._consumed(pq, msgs, failed)
        finally:
            with self._lock:
                pq.consuming -= 1

    async def _send_back_on_loop(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        try:
            failed = [m for m in msgs if not await self._send_back_async(m, pq.mq.broker_name, 0)]
            self._consumed(pq, msgs, failed)
        finally:
            with self._lock:
                pq.consuming -= 1

    def _consumed(self, pq: ProcessQueue, msgs: list[MessageExt], failed: list[MessageExt]) -> None:
        """Take ``msgs`` off the process queue but for ``failed``, which the broker would not take back: those
        are consumed again here later, each counted one more try (RocketMQ's concurrent service counts it so:
        send-backs refused for good must not keep a message short of the dead letters for good)."""
        for m in failed:
            m.reconsume_times += 1
        kept = {m.queue_offset for m in failed}
        with self._lock:
            for m in msgs:
                if m.queue_offset not in kept:
                    pq.msgs.pop(m.queue_offset, None)
        if failed:
            self._soon(functools.partial(self._retry_later, pq, failed))

    def _retry_later(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if self.listener_on_loop:
            asyncio.get_running_loop().call_later(5.0, self._consume_concurrently, pq, msgs)
        else:
            asyncio.get_running_loop().call_later(5.0, self._pool.submit, self._consume_concurrently, pq, msgs)

    def _send_back(self, msg: MessageExt, broker_name: str, delay_level: int) -> bool:
        """``_send_back_async`` from a consume thread."""
        if self._runtime is None:
            return False
        try:
            return bool(self._runtime.call(self._send_back_async(msg, broker_name, delay_level), 10))
        except ClientError as exc:
            log.warning("send back of %s failed: %s", msg.msg_id, exc)
            return False

    def _max_reconsume_times(self) -> int:
        """``max_reconsume_times`` with -1 read as RocketMQ reads it (``getMaxReconsumeTimes`` of each consume
        service): 16 for concurrent consumption, no limit (``Integer.MAX_VALUE``) for orderly."""
        if self.max_reconsume_times != -1:
            return self.max_reconsume_times
        return _ORDERLY_MAX_RECONSUME_TIMES if self.orderly else _CONCURRENT_MAX_RECONSUME_TIMES

    async def _send_back_async(self, msg: MessageExt, broker_name: str, delay_level: int) -> bool:
        """Hand ``msg`` back to ``broker_name``, the broker it was pulled from (its commit-log offset means
        something there only), for a later retry (or the DLQ); False when that failed."""
        if self.instance is None:
            return False
        header = ConsumerSendMsgBackRequestHeader(
            offset=msg.commit_log_offset, group=self.group, delay_level=delay_level, origin_msg_id=msg.msg_id,
            origin_topic=msg.topic, max_reconsume_times=self._max_reconsume_times())
        cmd = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext())
        try:
            resp = await self.instance.invoke_broker(broker_name, cmd)
        except ClientError as exc:
            log.warning("send back of %s failed: %s", msg.msg_id, exc)
            return False
        return resp.code == ResponseCode.SUCCESS

    # --- orderly consumption --------------------------------------------------------------------------

    async def _lock_queues(self, queues: list[MessageQueue]) -> set[MessageQueue]:
        """Ask each broker to lock ``queues`` for this client (LOCK_BATCH_MQ): those it now holds the lock of."""
        assert self.instance is not None
        locked: set[MessageQueue] = set()
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in queues:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, mqs in by_broker.items():
            body = orjson.dumps({"consumerGroup": self.group, "clientId": self.instance.client_id,
                                 "mqSet": [m.to_json() for m in mqs]})
            try:
                resp = await self.instance.invoke_broker(broker, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ,
                                                                                         body=body))
            except ClientError as exc:
                log.warning("locking queues on %s failed: %s", broker, exc)
                continue
            ok = {(d["topic"], int(d["queueId"])) for d in orjson.loads(resp.body).get("lockOKMQSet") or []}
            locked.update(mq for mq in mqs if (mq.topic, mq.queue_id) in ok)
        return locked

    async def _lock_all(self) -> bool:
        """Lock (or keep locked) every queue held; False when some lock was not had: its owner may release it any
        moment (a rebalance under way), so the caller tries again soon, as RocketMQ's rebalanceLater(500 ms)."""
        held = list(self.queues)
        until = time.monotonic() + 30.0
        locked = await self._lock_queues(held + list(self._releasing))  # a given-up queue's lock renewed too
        for mq in held:
            pq = self.queues.get(mq)
            if pq is not None:
                pq.locked_until = until if mq in locked else 0.0
                if pq.locked_until:
                    self._schedule_orderly(pq)
        return all(mq in locked for mq in held)

    async def _unlock(self, mq: MessageQueue) -> None:
        assert self.instance is not None
        body = orjson.dumps({"consumerGroup": self.group, "clientId": self.instance.client_id, "mqSet": [mq.to_json()]})
        with contextlib.suppress(ClientError):
            await self.instance.invoke_broker(mq.broker_name, RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ,
                                                                                      body=body))

    def _schedule_orderly(self, pq: ProcessQueue) -> None:
        with self._lock:
            if pq.orderly_busy or not pq.msgs:
                return
            pq.orderly_busy = True
        if self.listener_on_loop:
            self._spawn(self._consume_orderly_on_loop(pq))
        else:
            self._pool.submit(self._consume_orderly, pq)

    def _orderly_steps(self, pq: ProcessQueue) -> Generator[float | MessageExt, bool | None, None]:
        """Consume ``pq`` in order, one batch at a time, while this client holds its lock. What has to wait is
        yielded for the caller to do on its own thread: a pause in seconds (before a failed batch is consumed
        again; 0 after a batch done, a turn for the loop's other work when the listener runs on it), or a message
        to send to the dead-letter topic (out of retries), for which the caller sends back whether the broker took
        it. A failed batch is consumed again after a pause (RocketMQ's orderly service suspends the queue), without
        the messages the dead letters took and with none behind it, until none of its messages is left."""
        batch: list[MessageExt] = []
        while not pq.dropped and pq.locked_until > time.monotonic():
            if not batch:
                with self._lock:
                    batch = list(pq.msgs.values())[: self.consume_batch_max_size]
                if not batch:
                    return
            if self._call_listener(batch) == ConsumeStatus.SUCCESS:
                self._orderly_consumed(pq, batch)
                batch = []
            else:
                batch = yield from self._orderly_failed(pq, batch)
            yield self.suspend_s if batch else 0.0

    def _orderly_failed(self, pq: ProcessQueue, batch: list[MessageExt]) -> Generator[MessageExt, bool | None,
                                                                                        list[MessageExt]]:
        """Judge each message of a failed batch by its own retries (RocketMQ's ``checkReconsumeTimes``): a batch
        taken again after the lock lapsed may hold messages with different pasts. One with retries left is counted
        one more; one out of them is yielded for the dead letters, once (taken, it leaves the queue). The messages
        left to consume again are returned: those with retries left, and those the dead letters refused (tried
        again after the pause, so that none is lost; counted one more too, as RocketMQ counts them). A message's
        count starts at the retries it came with (one of the retry topic was failed before)."""
        most = self._max_reconsume_times()
        left: list[MessageExt] = []
        for m in batch:
            if m.reconsume_times >= most and (yield m):
                self._orderly_consumed(pq, [m])
            else:  # the message stays in ``pq.msgs``: its count with it
                m.reconsume_times += 1
                left.append(m)
        return left

    def _orderly_consumed(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Take ``msgs`` off the queue: the committed offset moves up to the first message still to consume."""
        with self._lock:
            for m in msgs:
                pq.msgs.pop(m.queue_offset, None)

    def _consume_orderly(self, pq: ProcessQueue) -> None:
        steps = self._orderly_steps(pq)
        try:
            answer: bool | None = None
            while True:
                step = steps.send(answer)
                answer = None
                if isinstance(step, MessageExt):
                    answer = self._send_back(step, pq.mq.broker_name, -1)
                elif step:
                    time.sleep(step)
        except StopIteration:
            pass
        finally:
            steps.close()
            self._orderly_done(pq)

    async def _consume_orderly_on_loop(self, pq: ProcessQueue) -> None:
        steps = self._orderly_steps(pq)
        try:
            answer: bool | None = None
            while True:
                step = steps.send(answer)
                answer = None
                if isinstance(step, MessageExt):
                    answer = await self._send_back_async(step, pq.mq.broker_name, -1)
                else:
                    await asyncio.sleep(step)
        except StopIteration:
            pass
        finally:
            steps.close()
            self._orderly_done(pq)

    def _orderly_done(self, pq: ProcessQueue) -> None:
        with self._lock:
            pq.orderly_busy = False
        if pq.msgs and not pq.dropped and pq.locked_until > time.monotonic():
            self._soon(functools.partial(self._schedule_orderly, pq))

    def _soon(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the client's loop, called from a consume thread or from the loop itself (there
        without waking the loop through its self-pipe); not once the client shuts down, dropping its queues."""
        runtime = self._runtime
        if runtime is not None:
            with contextlib.suppress(ClientError):
                runtime.call_soon(callback)
