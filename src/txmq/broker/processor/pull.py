"""Pulls (code 11) with long polling: RocketMQ's ``PullMessageProcessor`` and ``PullRequestHoldService``.

A pull that finds nothing and carries the suspend flag is held until a message arrives in that queue (the
store's arrival listener wakes it) or its suspend timeout passes; then it is answered from the store again.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from txmq.errors import RemoteProtocolError
from txmq.message import java_string_hash
from txmq.remoting.codes import ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    parse_tag_expression,
)
from txmq.remoting.transport import Connection
from txmq.store import GetMessageResult, GetMessageStatus
from txmq.topic import RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, PermName

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

MASTER_ID = 0
WHEN_CONSUME_SLOWLY = 1  # RocketMQ SubscriptionGroupConfig.whichBrokerWhenConsumeSlowly (default)

# Topics whose records are broker-internal: never served to a consumer, by any protocol.
HIDDEN_TOPICS = frozenset({RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, RMQ_SYS_SCHEDULE_TOPIC})


class PullRequestHoldService:
    """Held pulls per (topic, queue), woken by the store's arrival listener."""

    def __init__(self) -> None:
        self.waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future[None]]]] = {}

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        waiting = self.waiters.get((topic, queue_id))
        if not waiting:
            return
        keep = []
        for offset, fut in waiting:
            if fut.done():
                continue
            if max_offset > offset:
                fut.set_result(None)
            else:
                keep.append((offset, fut))
        if keep:
            self.waiters[(topic, queue_id)] = keep
        else:
            del self.waiters[(topic, queue_id)]

    async def wait(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.setdefault((topic, queue_id), []).append((offset, fut))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(fut, timeout_s)


def tags_filter(expression: str | None):
    tags = parse_tag_expression(expression)
    if tags is None:
        return None
    codes = {java_string_hash(t) for t in tags}
    return codes.__contains__


class PullMessageProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.hold = PullRequestHoldService()

    def process(self, conn: Connection, cmd: RemotingCommand):
        try:
            h = PullMessageRequestHeader.from_ext(cmd.ext_fields)
        except RemoteProtocolError as exc:
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=str(exc))
        refused = self._refuse(cmd, h)
        if refused is not None:
            return refused
        config = self.broker.config
        if config.is_slave and not config.slave_read_enable:
            # RocketMQ: a slave serves pulls only with slaveReadEnable; the client is sent to the master.
            store = self.broker.store
            header = PullMessageResponseHeader(
                next_begin_offset=h.queue_offset, min_offset=store.get_min_offset_in_queue(h.topic, h.queue_id),
                max_offset=store.get_max_offset_in_queue(h.topic, h.queue_id), suggest_which_broker_id=MASTER_ID)
            return RemotingCommand.response_to(cmd, ResponseCode.PULL_RETRY_IMMEDIATELY, ext_fields=header.to_ext(),
                                               remark="slave reads are off (slaveReadEnable=false)")
        if h.sys_flag & PullMessageRequestHeader.FLAG_COMMIT_OFFSET and not self.broker.config.is_slave:
            self.broker.consumer_offset_manager.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        expression = h.subscription
        if not h.sys_flag & PullMessageRequestHeader.FLAG_SUBSCRIPTION or expression is None:
            group = self.broker.consumer_manager.get(h.consumer_group)
            sub = group.subscriptions.get(h.topic) if group else None
            expression = sub.sub_string if sub else "*"
        filt = tags_filter(expression)
        result = self.broker.store.get_message(h.topic, h.queue_id, h.queue_offset, min(h.max_msg_nums, 256),
                                               tags_filter=filt)
        suspend = h.sys_flag & PullMessageRequestHeader.FLAG_SUSPEND and self.broker.config.long_polling_enable
        if result.status in (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.OFFSET_OVERFLOW_ONE) and suspend \
                and h.queue_offset >= result.max_offset:
            return self._held(cmd, h, filt)
        return self._response(cmd, h, result)

    async def _held(self, cmd: RemotingCommand, h: PullMessageRequestHeader, filt) -> RemotingCommand:
        await self.hold.wait(h.topic, h.queue_id, h.queue_offset, max(0.0, h.suspend_timeout_millis / 1000))
        result = self.broker.store.get_message(h.topic, h.queue_id, h.queue_offset, min(h.max_msg_nums, 256),
                                               tags_filter=filt)
        return self._response(cmd, h, result)

    def _refuse(self, cmd: RemotingCommand, h: PullMessageRequestHeader) -> RemotingCommand | None:
        if h.topic in HIDDEN_TOPICS:
            return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION,
                                               remark=f"topic {h.topic} is internal to the broker and cannot be pulled")
        cfg = self.broker.topic_config_manager.get(h.topic)
        if cfg is None:
            return RemotingCommand.response_to(cmd, ResponseCode.TOPIC_NOT_EXIST,
                                               remark=f"topic[{h.topic}] not exist, apply first please!")
        if not PermName.is_readable(cfg.perm):
            return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION,
                                               remark=f"the topic[{h.topic}] pulling message is forbidden")
        if not 0 <= h.queue_id < max(cfg.read_queue_nums, cfg.write_queue_nums):
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR,
                                               remark=f"queueId[{h.queue_id}] is illegal, topic {h.topic}")
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
