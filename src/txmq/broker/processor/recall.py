"""RECALL_MESSAGE (RocketMQ 5.3 ``RecallMessageProcessor``): cancel a scheduled timer message by the recall handle
its send answer carried. Needs Pub on the topic; the handle must name a message of that topic still scheduled."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from txmq.acl.model import Action, Needs
from txmq.broker.timer import RecallError
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.registry import RequestSpec, header
from txmq.remoting.request_headers import Header
from txmq.remoting.transport import Connection

if TYPE_CHECKING:
    from txmq.broker.controller import BrokerController


@dataclasses.dataclass(slots=True)
class RecallMessageRequestHeader(Header):
    topic: str
    recall_handle: str
    producer_group: str = ""


def recall_needs(h: RecallMessageRequestHeader) -> Needs:
    """Pub on the topic."""
    return Needs().topic(h.topic, Action.PUB)


class RecallMessageProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def requests(self) -> list[RequestSpec[Any]]:
        return [RequestSpec(RequestCode.RECALL_MESSAGE, header(RecallMessageRequestHeader), recall_needs, self.recall)]

    async def recall(self, conn: Connection, cmd: RemotingCommand, h: RecallMessageRequestHeader) -> RemotingCommand:
        broker = self.broker
        if not broker.config.recall_message_enable:
            return RemotingCommand.response_to(cmd, ResponseCode.NO_PERMISSION,
                                               remark="recall failed, operation is forbidden (recallMessageEnable)")
        if broker.config.is_slave:
            return RemotingCommand.response_to(cmd, ResponseCode.SLAVE_NOT_AVAILABLE,
                                               remark="recall failed, broker service not available (a slave)")
        if broker.topic_config_manager.get(h.topic) is None:
            return RemotingCommand.response_to(cmd, ResponseCode.TOPIC_NOT_EXIST,
                                               remark=f"recall failed, the topic[{h.topic}] not exist")
        try:
            msg_id = await broker.timer_service.recall(h.topic, h.recall_handle, broker.config.broker_name,
                                                       broker.store_host)
        except RecallError as exc:
            code = ResponseCode.SYSTEM_ERROR if exc.code == "store" else ResponseCode.ILLEGAL_OPERATION
            return RemotingCommand.response_to(cmd, code, remark=str(exc))
        return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, ext_fields={"msgId": msg_id})
