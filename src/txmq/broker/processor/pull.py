"""Pulls (code 11) with long polling: RocketMQ's ``PullMessageProcessor`` and ``PullRequestHoldService``.

A pull that finds nothing and carries the suspend flag is held until a message arrives in that queue (the
store's arrival listener wakes it) or its suspend timeout passes; then it is answered from the store again. A
queue of an existing topic that was never written is held the same way (RocketMQ answers PULL_NOT_FOUND after
the hold), so an idle consumer does not spin. A held pull is dropped, unanswered, when its connection closes,
and held pulls are capped per connection and in total (``maxHeldPullsPerConnection``, ``maxHeldPulls``):
beyond a cap the pull is answered SYSTEM_BUSY at once, which RocketMQ's clients and txmq's retry after a pause.

A pull is filtered by its own subscription (the subscription flag: expression and type in its header), else by
the one its group's heartbeat registered: tags by the consume queue's tag hash, SQL92 by each record's properties
(txmq.filter). A SQL92 expression that does not parse is answered SUBSCRIPTION_PARSE_FAILED, SQL92 with
``enablePropertyFilter=false`` SYSTEM_ERROR, as RocketMQ answers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from txmq.acl.model import Action, Needs
from txmq.broker.visibility import internal_refusal
from txmq.filter import ExpressionType, FilterRefused, MessageFilter, build_filter
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import RequestSpec
from txmq.remoting.request_headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
)
from txmq.remoting.transport import Connection
from txmq.store import GetMessageResult, GetMessageStatus
from txmq.topic import PermName, check_group, check_topic

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

MASTER_ID = 0
WHEN_CONSUME_SLOWLY = 1  # RocketMQ SubscriptionGroupConfig.whichBrokerWhenConsumeSlowly (default)

log = logging.getLogger("txmq.broker")

# Nothing to read yet at the pull's offset: a suspended pull waits. A queue never written (no ConsumeQueue yet,
# NO_MATCHED_LOGIC_QUEUE) waits too; the topic exists, or ``_refuse`` answered already.
_HOLD = (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.OFFSET_OVERFLOW_ONE,
         GetMessageStatus.NO_MATCHED_LOGIC_QUEUE)


class HeldPull:
    """One suspended pull: its future is set True when a message arrives (answer now), False when its connection
    closes (nobody to answer)."""

    __slots__ = ("fut", "key", "offset", "on_conn")

    def __init__(self, key: tuple[str, int], offset: int, on_conn: set[HeldPull] | None) -> None:
        self.fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.key = key
        self.offset = offset
        self.on_conn = on_conn


def queue_refusal(broker: BrokerController, cmd: RemotingCommand, topic: str, queue_id: int) -> RemotingCommand | None:
    """The answer to a request about a topic or queue this broker does not have, or None when it has them."""
    cfg = broker.topic_config_manager.get(topic)
    if cfg is None:
        return RemotingCommand.response_to(cmd, ResponseCode.TOPIC_NOT_EXIST,
                                           remark=f"topic[{topic}] not exist, apply first please!")
    if not 0 <= queue_id < max(cfg.read_queue_nums, cfg.write_queue_nums):
        return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR,
                                           remark=f"queueId[{queue_id}] is illegal, topic {topic}")
    return None


class PullRequestHoldService:
    """Held pulls per (topic, queue), woken by the store's arrival listener, and per connection, dropped when it
    closes: a peer that goes away leaves nothing behind (each held pull costs a task, its request and a future)."""

    def __init__(self, max_per_connection: int = 4096, max_total: int = 65536) -> None:
        self.waiters: dict[tuple[str, int], set[HeldPull]] = {}
        self._by_conn: dict[Connection, set[HeldPull]] = {}
        self.max_per_connection = max_per_connection
        self.max_total = max_total
        self.held = 0
        self._full = False  # for one log line per episode of a full cap, not one per refused pull

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        for pull in self.waiters.get((topic, queue_id), ()):
            if max_offset > pull.offset and not pull.fut.done():
                pull.fut.set_result(True)

    def hold(self, topic: str, queue_id: int, offset: int, conn: Connection | None = None) -> HeldPull | None:
        """Register a pull to hold now (so caps count it at once), or None when a cap is full (logged once per
        episode). gRPC's pulls pass no connection: grpcio cancels a call whose client went away."""
        if conn is not None and conn.closed:
            return None  # its on_close callbacks ran already: nothing would ever drop it
        on_conn = self._by_conn.get(conn) if conn is not None else None
        full = self.held >= self.max_total or (on_conn is not None and len(on_conn) >= self.max_per_connection)
        if full and not self._full:
            log.warning("held pulls at their cap (%d held, %d on %s; maxHeldPulls=%d, maxHeldPullsPerConnection=%d):"
                        " further suspended pulls are answered SYSTEM_BUSY", self.held, len(on_conn or ()),
                        conn.remote_address if conn else "-", self.max_total, self.max_per_connection)
        self._full = full
        if full:
            return None
        if conn is not None and on_conn is None:
            on_conn = self._by_conn[conn] = set()
            conn.on_close.append(self._drop_connection)
        pull = HeldPull((topic, queue_id), offset, on_conn)
        self.waiters.setdefault(pull.key, set()).add(pull)
        if on_conn is not None:
            on_conn.add(pull)
        self.held += 1
        return pull

    async def wait(self, pull: HeldPull, timeout_s: float) -> bool:
        """Until a message past the pull's offset arrives or ``timeout_s`` passes (True: answer now), or until its
        connection closes (False)."""
        try:
            async with asyncio.timeout(timeout_s):
                return await pull.fut
        except TimeoutError:
            return True
        finally:
            self.held -= 1
            if pull.on_conn is not None:
                pull.on_conn.discard(pull)
            waiting = self.waiters.get(pull.key)
            if waiting is not None:
                waiting.discard(pull)
                if not waiting:
                    del self.waiters[pull.key]

    def _drop_connection(self, conn: Connection) -> None:
        for pull in self._by_conn.pop(conn, ()):
            if not pull.fut.done():
                pull.fut.set_result(False)


def parse_pull(cmd: RemotingCommand) -> PullMessageRequestHeader:
    h = PullMessageRequestHeader.from_ext(cmd.ext_fields)
    check_group(h.consumer_group)
    check_topic(h.topic)
    return h


def pull_needs(h: PullMessageRequestHeader) -> Needs:
    """Sub on the topic and the consumer group."""
    return Needs().topic(h.topic, Action.SUB).group(h.consumer_group, Action.SUB)


class PullMessageProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.hold = PullRequestHoldService(broker.config.max_held_pulls_per_connection, broker.config.max_held_pulls)

    def requests(self) -> list[RequestSpec[Any]]:
        return [RequestSpec(RequestCode.PULL_MESSAGE, parse_pull, pull_needs, self.pull)]

    def pull(self, conn: Connection, cmd: RemotingCommand, h: PullMessageRequestHeader):
        refused = self._refuse(cmd, h)
        if refused is not None:
            return refused
        config = self.broker.config
        if config.is_slave and not config.slave_read_enable:
            # RocketMQ: a slave serves pulls only with slaveReadEnable; the client is sent to the master.
            store = self.broker.store
            header = PullMessageResponseHeader(
                next_begin_offset=h.queue_offset, min_offset=store.get_min_offset_in_queue(h.topic, h.queue_id),
                max_offset=store.get_max_offset_in_queue(h.topic, h.queue_id, confirmed=True),
                suggest_which_broker_id=MASTER_ID)
            return RemotingCommand.response_to(cmd, ResponseCode.PULL_RETRY_IMMEDIATELY, ext_fields=header.to_ext(),
                                               remark="slave reads are off (slaveReadEnable=false)")
        if h.sys_flag & PullMessageRequestHeader.FLAG_COMMIT_OFFSET and not self.broker.config.is_slave:
            self.broker.consumer_offset_manager.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        filt = self._filter(h)
        if isinstance(filt, FilterRefused):
            code = ResponseCode.SYSTEM_ERROR if filt.disabled else ResponseCode.SUBSCRIPTION_PARSE_FAILED
            return RemotingCommand.response_to(cmd, code, remark=str(filt))
        result = self._get(h, filt)
        suspend = h.sys_flag & PullMessageRequestHeader.FLAG_SUSPEND and self.broker.config.long_polling_enable
        if result.status in _HOLD and suspend and h.queue_offset >= result.max_offset:
            pull = self.hold.hold(h.topic, h.queue_id, h.queue_offset, conn)
            if pull is None:
                return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_BUSY,
                                                   remark="too many held pulls: pull again later")
            return self._held(pull, cmd, h, filt)
        return self._response(cmd, h, result)

    async def _held(self, pull: HeldPull, cmd: RemotingCommand, h: PullMessageRequestHeader,
                    filt: MessageFilter) -> RemotingCommand | None:
        if not await self.hold.wait(pull, max(0.0, h.suspend_timeout_millis / 1000)):
            return None
        return self._response(cmd, h, self._get(h, filt))

    def _filter(self, h: PullMessageRequestHeader) -> MessageFilter | FilterRefused:
        """The pull's own subscription (the subscription flag), else the one its group's heartbeat registered."""
        expression, kind = h.subscription, h.expression_type
        if not h.sys_flag & PullMessageRequestHeader.FLAG_SUBSCRIPTION or expression is None:
            group = self.broker.consumer_manager.get(h.consumer_group)
            sub = group.subscriptions.get(h.topic) if group else None
            expression, kind = (sub.sub_string, sub.expression_type) if sub else ("*", ExpressionType.TAG)
        try:
            return build_filter(kind, expression, sql_enabled=self.broker.config.enable_property_filter)
        except FilterRefused as exc:
            return exc

    def _get(self, h: PullMessageRequestHeader, filt: MessageFilter) -> GetMessageResult:
        return self.broker.store.get_message(h.topic, h.queue_id, h.queue_offset, min(h.max_msg_nums, 256),
                                             tags_filter=filt.tags, confirmed=True, record_filter=filt.record)

    def _refuse(self, cmd: RemotingCommand, h: PullMessageRequestHeader) -> RemotingCommand | None:
        internal = internal_refusal(h.topic)
        if internal is not None:
            return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION, remark=internal)
        missing = queue_refusal(self.broker, cmd, h.topic, h.queue_id)
        if missing is not None:
            return missing
        cfg = self.broker.topic_config_manager.get(h.topic)
        group = self.broker.subscription_group_manager.get(h.consumer_group)
        if group is not None and not group.consume_enable:
            return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION,
                                               remark=f"subscription group [{h.consumer_group}] does not have "
                                                      "consume permission (consumeEnable=false)")
        if cfg is not None and not PermName.is_readable(cfg.perm):
            return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION,
                                               remark=f"the topic[{h.topic}] pulling message is forbidden")
        return None

    def _response(self, cmd: RemotingCommand, h: PullMessageRequestHeader, r: GetMessageResult) -> RemotingCommand:
        # RocketMQ: with slaveReadEnable, a reader far behind is sent to a slave (whichBrokerWhenConsumeSlowly,
        # 1) and any other back to the master; without it, always to the master.
        slowly = self.broker.config.slave_read_enable and r.suggest_pulling_from_slave
        suggest = WHEN_CONSUME_SLOWLY if slowly else MASTER_ID
        header = PullMessageResponseHeader(next_begin_offset=r.next_begin_offset, min_offset=r.min_offset,
                                           max_offset=r.max_offset, suggest_which_broker_id=suggest).to_ext()
        s = r.status
        if s == GetMessageStatus.FOUND:
            stats = self.broker.stats_manager
            stats.get(h.topic, h.consumer_group, len(r.messages), sum(map(len, r.messages)))
            stats.pulled_to(h.consumer_group, h.topic, h.queue_id, r.next_begin_offset)
            return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, ext_fields=header,
                                               body=b"".join(r.messages))
        if s in (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING):
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        elif s in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
            moved = h.queue_offset != 0 and r.max_offset > 0
            code = ResponseCode.PULL_OFFSET_MOVED if moved else ResponseCode.PULL_NOT_FOUND
        elif s in (GetMessageStatus.OFFSET_FOUND_NULL, GetMessageStatus.OFFSET_OVERFLOW_ONE):
            code = ResponseCode.PULL_NOT_FOUND
        else:  # OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL
            code = ResponseCode.PULL_OFFSET_MOVED
        return RemotingCommand.response_to(cmd, code, remark=s.name, ext_fields=header)
