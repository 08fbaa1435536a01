"""``PullConsumer``: the application picks queues and offsets itself (RocketMQ's ``DefaultMQPullConsumer``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from txmq.client.base import ClientBase
from txmq.client.consumer import TagFilter, prepare_for_user
from txmq.client.instance import MessageQueue
from txmq.errors import BrokerError, ClientError
from txmq.message import MessageExt, decode_messages
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import PullMessageRequestHeader
from txmq.topic import check_group


class PullStatus(Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    msgs: list[MessageExt] = field(default_factory=list)
    body: bytes = b""  # with ``pull(decode=False)``: the messages as the broker sent them, not filtered by tag


_PULL_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


class PullConsumer(ClientBase):
    def __init__(self, group: str, namesrv: str | None = None, *, instance_name: str | None = None) -> None:
        check_group(group)
        super().__init__(namesrv, instance_name, group)
        self.group = group

    def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        async def go() -> list[MessageQueue]:
            assert self.instance is not None
            route = await self.instance.update_route(topic)
            if route is None:
                raise ClientError(f"no route for topic {topic}")
            return sorted(route.subscribe_queues)
        return self._call(go())

    def pull(self, mq: MessageQueue, expression: str = "*", offset: int = 0, max_nums: int = 32,
             block_s: float = 0.0, *, decode: bool = True, sql: str | None = None) -> PullResult:
        """Pull from ``offset``; with ``block_s`` > 0 the broker holds the pull until a message arrives. The
        messages are those the tag ``expression`` selects, or the SQL92 expression ``sql`` when given (the broker
        filters; one it refuses raises ``BrokerError``, SUBSCRIPTION_PARSE_FAILED and where).

        ``decode=False`` leaves ``msgs`` empty and the response body in ``body`` (RocketMQ's message layout), for
        a caller that decodes it its own way (``txmq.message_columns``) and filters tags itself."""
        filt = TagFilter.of(expression, sql)
        flags = PullMessageRequestHeader.FLAG_SUBSCRIPTION | (PullMessageRequestHeader.FLAG_SUSPEND if block_s else 0)
        header = PullMessageRequestHeader(consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id,
                                          queue_offset=offset, max_msg_nums=max_nums, sys_flag=flags,
                                          suspend_timeout_millis=int(block_s * 1000), subscription=filt.expression,
                                          expression_type=filt.expression_type)

        async def go() -> PullResult:
            assert self.instance is not None
            await self.instance.find_broker(mq)
            resp = await self.instance.invoke_broker(
                mq.broker_name, RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext()), block_s + 5)
            status = _PULL_STATUS.get(resp.code)
            if status is None:
                raise BrokerError(resp.code, resp.remark)
            ext = resp.ext_fields
            msgs = [prepare_for_user(m) for m in decode_messages(resp.body) if filt.match(m)] \
                if resp.body and decode else []
            return PullResult(status, int(ext.get("nextBeginOffset", offset)), int(ext.get("minOffset", 0)),
                              int(ext.get("maxOffset", 0)), msgs, b"" if decode else bytes(resp.body))
        return self._call(go(), block_s + 10)

    def _offset_request(self, code: int, mq: MessageQueue, extra: dict[str, str] | None = None) -> RemotingCommand:
        async def go() -> RemotingCommand:
            assert self.instance is not None
            await self.instance.find_broker(mq)
            ext = {"consumerGroup": self.group, "topic": mq.topic, "queueId": str(mq.queue_id), **(extra or {})}
            return await self.instance.invoke_broker(mq.broker_name, RemotingCommand.request(code, ext))
        return self._call(go())

    def fetch_consume_offset(self, mq: MessageQueue) -> int:
        """The group's committed offset of ``mq``, or -1 when it never committed one."""
        resp = self._offset_request(RequestCode.QUERY_CONSUMER_OFFSET, mq)
        return int(resp.ext_fields.get("offset", "-1")) if resp.code == ResponseCode.SUCCESS else -1

    def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        resp = self._offset_request(RequestCode.UPDATE_CONSUMER_OFFSET, mq, {"commitOffset": str(offset)})
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark)

    def max_offset(self, mq: MessageQueue) -> int:
        return int(self._offset_request(RequestCode.GET_MAX_OFFSET, mq).ext_fields.get("offset", "0"))

    def min_offset(self, mq: MessageQueue) -> int:
        return int(self._offset_request(RequestCode.GET_MIN_OFFSET, mq).ext_fields.get("offset", "0"))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset of ``mq`` stored at or after ``timestamp_ms``, its max offset when none is
        (SEARCH_OFFSET_BY_TIMESTAMP)."""
        resp = self._offset_request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, {"timestamp": str(timestamp_ms)})
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark)
        return int(resp.ext_fields["offset"])
