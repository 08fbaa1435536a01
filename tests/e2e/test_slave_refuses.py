"""A broker with brokerRole=SLAVE stores nothing from producers: sends are answered SERVICE_NOT_AVAILABLE
(RocketMQ's store in slave mode), END_TRANSACTION SLAVE_NOT_AVAILABLE (RocketMQ's EndTransactionProcessor), and
its queues stay empty."""

import asyncio

from txmq.message import MessageSysFlag
from txmq.remoting.codes import RequestCode, ResponseCode
from txmq.remoting.command import RemotingCommand
from txmq.remoting.request_headers import EndTransactionRequestHeader, SendMessageRequestHeader
from txmq.remoting.transport import RemotingClient


def test_slave_refuses_sends_and_end_transaction(cluster):
    broker = cluster.start_broker("broker-slave", conf={"brokerRole": "SLAVE", "brokerId": 1})
    addr = broker.addrs["broker"]

    async def go() -> tuple[RemotingCommand, RemotingCommand, RemotingCommand]:
        client = RemotingClient()
        try:
            send = SendMessageRequestHeader(producer_group="g", topic="SlaveTopic", queue_id=0,
                                            properties="TRAN_MSG\x01true\x02PGROUP\x01g\x02")
            half = await client.invoke(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send.to_v2_ext(),
                                                                     body=b"half"), 5)
            end = EndTransactionRequestHeader(producer_group="g", tran_state_table_offset=0, commit_log_offset=0,
                                              commit_or_rollback=MessageSysFlag.TRANSACTION_COMMIT_TYPE)
            ended = await client.invoke(addr, RemotingCommand.request(RequestCode.END_TRANSACTION, end.to_ext()), 5)
            top = await client.invoke(addr, RemotingCommand.request(
                RequestCode.GET_MAX_OFFSET, {"topic": "RMQ_SYS_TRANS_HALF_TOPIC", "queueId": "0"}), 5)
            return half, ended, top
        finally:
            await client.close()

    half, ended, top = asyncio.run(go())
    # Not SLAVE_NOT_AVAILABLE, which means "stored on the master" and makes RocketMQ clients read a send header.
    assert half.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in (half.remark or ""), half.remark
    assert "msgId" not in half.ext_fields
    assert ended.code == ResponseCode.SLAVE_NOT_AVAILABLE and "slave" in (ended.remark or "")
    assert top.code == ResponseCode.SUCCESS and top.ext_fields["offset"] == "0"  # nothing was stored
