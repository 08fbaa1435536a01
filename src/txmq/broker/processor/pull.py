"""Pulls (code 11) with long polling over remoting: RocketMQ's ``PullMessageProcessor`` as an adapter of the broker
core's ``PullService`` (``txmq.broker.core.pull``), which holds the rules, the reads, the counters and the held
pulls. A held pull is dropped, unanswered, when its connection closes; beyond the caps of held pulls a pull is
answered SYSTEM_BUSY at once, which RocketMQ's clients and txmq's retry after a pause.

A pull is filtered by its own subscription (the subscription flag: expression and type in its header), else by
the one its group's heartbeat registered: tags by the consume queue's tag hash, SQL92 by each record's properties
(txmq.filter). A SQL92 expression that does not parse is answered SUBSCRIPTION_PARSE_FAILED, SQL92 with
``enablePropertyFilter=false`` SYSTEM_ERROR, as RocketMQ answers.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from txmq.acl.model import Action, Needs
from txmq.broker.core.refusal import Refusal
from txmq.broker.processor.refused import refused
from txmq.filter import ExpressionType, FilterRefused, MessageFilter, build_filter
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import RequestSpec
from txmq.remoting.request_headers import PullMessageRequestHeader, PullMessageResponseHeader
from txmq.remoting.transport import Connection, Reply
from txmq.store import GetMessageResult, GetMessageStatus
from txmq.topic import check_group, check_topic

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController

MASTER_ID = 0
WHEN_CONSUME_SLOWLY = 1  # RocketMQ SubscriptionGroupConfig.whichBrokerWhenConsumeSlowly (default)


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
        self.pulls = broker.core.pulls

    def requests(self) -> list[RequestSpec[Any]]:
        return [RequestSpec(RequestCode.PULL_MESSAGE, parse_pull, pull_needs, self.pull)]

    def pull(self, conn: Connection, cmd: RemotingCommand, h: PullMessageRequestHeader):
        pulls = self.pulls
        refusal = pulls.refusal(h.consumer_group, h.topic, h.queue_id)
        if refusal is not None:
            return refused(cmd, refusal)
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
        if h.sys_flag & PullMessageRequestHeader.FLAG_COMMIT_OFFSET and not config.is_slave:
            self.broker.consumer_offset_manager.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        filt = self._filter(h)
        if isinstance(filt, FilterRefused):
            code = ResponseCode.SYSTEM_ERROR if filt.disabled else ResponseCode.SUBSCRIPTION_PARSE_FAILED
            return RemotingCommand.response_to(cmd, code, remark=str(filt))
        got = pulls.read(h.consumer_group, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, filt)
        if h.sys_flag & PullMessageRequestHeader.FLAG_SUSPEND and pulls.holds(got, h.queue_offset):
            # Without long polling, held shortPollingTimeMills (RocketMQ's short polling): answered at once, a
            # consumer that pulls again at once would spin with the broker.
            hold_ms = h.suspend_timeout_millis if config.long_polling_enable else config.short_polling_time_mills
            reply = Reply(conn, cmd)
            pull = pulls.hold(h.topic, h.queue_id, h.queue_offset, hold_ms / 1000,
                              functools.partial(self._woken, reply, h, filt), conn)
            if isinstance(pull, Refusal):
                return refused(cmd, pull)
            return reply
        return self._response(cmd, h, got)

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

    def _woken(self, reply: Reply, h: PullMessageRequestHeader, filt: MessageFilter, answer: bool) -> None:
        """A held pull's end: answered with a read made now, from the store's arrival listener or the pull's timer
        (no task), or not at all when its connection closed (``answer`` False)."""
        if not answer:
            reply.cancel()
            return
        try:
            got = self.pulls.read_woken(h.consumer_group, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, filt)
            reply.set_result(refused(reply.cmd, got) if isinstance(got, Refusal) else self._response(reply.cmd, h, got))
        except Exception as exc:
            reply.set_exception(exc)

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
